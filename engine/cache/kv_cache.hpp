// Per-sequence cache bookkeeping over the pools of a CacheLayout: block tables per KV group,
// sliding-window groups returning blocks that left every query's window, recurrent state slots,
// and the sharing that prefix caching builds on: blocks held by more than one sequence or by a
// holder that is not a sequence (a prefix-tree node), sequences started from held blocks at a known
// length, a write into a shared block copying it first, truncation, state slots beyond the live
// sequences for snapshots. Every call that needs memory returns a Status; running out never throws
// and never leaves partial changes. Steps are transactions: begin() makes a step's changes
// tentatively (so the next step can be planned on top of them while it runs), commit() makes them
// final, rollback() undoes them (latest first).
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cache/block_pool.hpp"
#include "cache/layout.hpp"

namespace kiln::cache {

enum class Status {
  ok = 0,
  out_of_blocks,  ///< a KV pool has too few free blocks: queue or preempt, then retry
  out_of_slots,   ///< every recurrent state slot is taken
  too_long,       ///< the sequence would exceed max_context
  unknown_sequence,
  duplicate_sequence,  ///< add(): the id is alive already
  repeated_in_step,    ///< a sequence listed twice in one step
  invalid_token,       ///< a token id outside the model's vocabulary
  too_many_tokens,     ///< more tokens in one step than the host takes (max_batch_tokens)
  too_many_seqs,       ///< more sequences in one step than the host or the device takes
  prefix_unusable,     ///< a prefix lacks blocks a window needs, or a state snapshot at its length
  busy,                ///< the sequence has a step in flight; finish it first
  sequence_failed,     ///< its recurrent state was lost with a failed step: release it
  empty_step,          ///< no tokens, or no logits row asked for
};
const char* status_message(Status s);

/**
 * Blocks held outside a sequence (e.g. by a prefix-tree node): per KV group the block ids holding
 * positions [0, length) (-1 where a sliding-window group had already returned a block). Holding
 * keeps them out of the free pool; KvCache::drop gives them back. Full blocks are never written
 * again; a partly filled last block is copied by whoever writes into it next.
 */
struct BlockSpan {
  uint32_t length = 0;
  std::vector<std::vector<int32_t>> tables;  ///< per group
  bool empty() const { return tables.empty(); }
};

/** A block copy a step needs before its graph runs: `src` to `dst` in every layer of `group`. */
struct BlockCopy {
  size_t group;
  int32_t src, dst;
};

/** What one step would take from the pools (KvCache::check; nothing changes). */
struct StepNeeds {
  std::vector<uint32_t> blocks;  ///< fresh blocks per group, copies of shared blocks included
  std::vector<uint32_t> free;    ///< free blocks per group now
  uint32_t copies = 0;           ///< shared partly filled blocks to copy before writing
  bool fits() const {
    for (size_t g = 0; g < blocks.size(); ++g)
      if (blocks[g] > free[g]) return false;
    return true;
  }
};

/** A step's tentative changes (KvCache::begin), undone by rollback or made final by commit. */
struct Transaction {
  struct Seq {
    uint64_t seq;
    uint32_t start;                   ///< length before the step (the first token's position)
    uint32_t n;                       ///< tokens appended
    std::vector<size_t> old_size;     ///< per group: table size before the step
    std::vector<BlockCopy> replaced;  ///< per copied block: the shared block it replaced
  };
  std::vector<Seq> seqs;
  std::vector<BlockCopy> copies;  ///< to run on the device before the step's graph
  bool open = false;
  const Seq* find(uint64_t seq) const {
    for (const Seq& s : seqs)
      if (s.seq == seq) return &s;
    return nullptr;
  }
};

class KvCache {
 public:
  KvCache(CacheLayout layout, CacheOptions options);

  const CacheLayout& layout() const { return layout_; }
  const CacheOptions& options() const { return options_; }

  /** Starts an empty sequence (takes a recurrent slot when the model has recurrent layers). */
  Status add(uint64_t seq);
  /**
   * Starts a sequence at `prefix.length` on the prefix's blocks (each held once more). Sliding
   * groups need the blocks of the positions the next query sees (prefix_usable), else
   * prefix_unusable. The recurrent state (a slot is taken) is the caller's to fill.
   */
  Status add(uint64_t seq, const BlockSpan& prefix);
  /**
   * Frees every block and the state slot of `seq`. Unknown sequences are ignored. A sequence with an
   * open transaction cannot be released, truncated or held (HostError): commit or roll it back.
   */
  void release(uint64_t seq);
  /**
   * Shortens `seq` to `length` (<= its length), returning the blocks past it; sliding groups need
   * the window before `length` (else prefix_unusable). Recurrent state is the caller's to restore.
   */
  Status truncate(uint64_t seq, uint32_t length);

  /** Holds the blocks of positions [0, length) of `seq` (length <= its length). */
  BlockSpan hold(uint64_t seq, uint32_t length);
  /** Gives held blocks back (the span is emptied). */
  void drop(BlockSpan& span);
  /** Whether a sequence started from `span` at its length has what every group's next query reads. */
  bool prefix_usable(const BlockSpan& span) const;

  /** A recurrent state slot outside any sequence (a snapshot), or -1 when none is free. */
  int32_t take_slot();
  void free_slot(int32_t slot);

  /** What appending these tokens would take (nothing changes): ok, or the status begin() returns. */
  Status check(const std::vector<std::pair<uint64_t, uint32_t>>& appends, StepNeeds* needs) const;
  /**
   * Appends the tokens tentatively, all or nothing: lengths advance, fresh blocks join the tables, a
   * shared partly filled block about to be written is replaced by a fresh one (tx.copies lists the
   * copies to run before the write). A sequence may appear once.
   */
  Status begin(const std::vector<std::pair<uint64_t, uint32_t>>& appends, Transaction* tx);
  /** Makes `tx` final: sliding groups return the blocks no later query of its sequences sees. */
  void commit(Transaction& tx);
  /** Undoes `tx` (transactions begun after it must be rolled back first). */
  void rollback(Transaction& tx);
  /** begin() + commit(). */
  Status append(uint64_t seq, uint32_t n) { return append_all({{seq, n}}); }
  Status append_all(const std::vector<std::pair<uint64_t, uint32_t>>& appends);

  bool has(uint64_t seq) const { return seqs_.count(seq) != 0; }
  uint32_t length(uint64_t seq) const;
  int32_t state_slot(uint64_t seq) const;  ///< -1 without recurrent layers
  /** Block ids by logical block index (position / block_tokens); -1 for blocks already released. */
  const std::vector<int32_t>& block_table(uint64_t seq, size_t group) const;
  /** Cache row (block * block_tokens + offset) holding `pos` of `seq` in `group`, -1 if released. */
  int32_t slot(uint64_t seq, size_t group, uint32_t pos) const;
  uint32_t blocks_held(uint64_t seq, size_t group) const;
  uint32_t free_blocks(size_t group) const { return pools_[group].free_count(); }
  /** Blocks of `group` in use that only holds (prefix-tree nodes) keep: reusable after an eviction. */
  uint32_t idle_blocks(size_t group) const { return pools_[group].idle_count(); }
  uint32_t block_refs(size_t group, int32_t block) const { return pools_[group].refs(block); }
  uint32_t free_state_slots() const { return static_cast<uint32_t>(free_slots_.size()); }
  size_t n_sequences() const { return seqs_.size(); }

 private:
  struct Seq {
    uint32_t length = 0;
    int32_t state_slot = -1;
    std::vector<std::vector<int32_t>> tables;  ///< per group
    uint32_t open = 0;                         ///< transactions begun and not yet committed or rolled back
  };
  /** Throws HostError: releasing, truncating or holding a sequence with an open transaction. */
  void check_settled(const Seq& s, uint64_t seq, const char* what) const;
  /** Fresh blocks `s` needs in `group` for n more tokens, and whether one of them replaces a
   *  shared partly filled block (copied before the write). */
  uint32_t fresh(const Seq& s, size_t group, uint32_t n, bool* copy) const;
  /** Returns the sliding-window blocks no query from position `length` on sees. */
  void release_out_of_window(Seq& s, uint32_t length);
  /** First position the next query of a sequence at `length` reads in `group`. */
  uint32_t first_visible(size_t group, uint32_t length) const;
  Status take_state_slot(Seq* s);

  CacheLayout layout_;
  CacheOptions options_;
  std::vector<BlockPool> pools_;
  std::vector<int32_t> free_slots_;
  std::unordered_map<uint64_t, Seq> seqs_;
};

}  // namespace kiln::cache
