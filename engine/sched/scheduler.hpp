// The serial scheduling step of continuous batching. Each call to plan() returns one step under the
// host's limits and the token budget: every running decode first (one token each), then prefill
// chunks of sequences that are part-way through their prompt, then newly admitted sequences in
// arrival order (chunked prefill: a long prompt is cut to what the budget leaves, so it never stalls
// running streams). When the KV cache runs out, the youngest running sequence is preempted: its
// blocks are freed and it later recomputes its prompt and output so far (recompute preemption).
//
// The scheduler owns no request: it holds pointers to Sequences that the engine owns and keeps
// alive until it calls remove(). It asks the model host what a step would take (check) and never
// changes the cache except to start (add_sequence) and end (release) sequences.
//
// With prefix caching on, it also owns the model's prefix tree (cache/prefix_tree.hpp): every
// committed step's whole blocks join the tree at once (not when the request ends), a sequence starts
// on the longest cached prefix every cache kind can serve (at least one prompt token is always
// recomputed, so a full hit still produces logits), a request whose prefix another sequence is
// computing right now waits for those blocks instead of computing them too, models with recurrent
// layers get state snapshots at chunk-aligned positions (prefill chunks are cut there), models with
// sliding-window layers prefill in chunks shorter than the window (so every block is still in the
// window, and joins the tree, at the end of some step), and the tree's least recently used leaves
// are evicted before any running sequence is preempted.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "cache/prefix_tree.hpp"
#include "cache/ragged_batch.hpp"
#include "model/model_host.hpp"

namespace kiln::sched {

/** One sequence being generated (one choice of a request). */
struct Sequence {
  std::vector<int32_t> tokens;  ///< prompt, then every token generated so far
  uint32_t prompt_len = 0;
  uint32_t computed = 0;  ///< tokens whose KV the cache holds
  uint64_t host_seq = 0;  ///< the model host's sequence id while in the cache, else 0
  uint64_t arrival = 0;   ///< admission order (set by enqueue)
  uint32_t preemptions = 0;
  bool failed = false;  ///< the scheduler gave up on it (failure says why); remove it
  std::string failure;
  // Prefix caching.
  std::string cache_key;  ///< sequences share cached prefixes only under the same key (cache_salt)
  uint32_t cached = 0;    ///< prompt tokens reused from the cache at its first start
  uint32_t indexed = 0;   ///< tokens whose blocks the tree has been given
  bool started = false;   ///< admitted at least once (cached is final)
  /**
   * Recurrent models: every step since the sequence started ended on the delta-rule chunk grid, so
   * its state has the bits of one uninterrupted prefill and a snapshot of it is a valid hit.
   */
  bool on_grid = true;
  void* owner = nullptr;  ///< whoever queued it (the serving engine's choice): a plan row leads back without a lookup
};

/** One sequence's part of a step. */
struct PlanRow {
  Sequence* seq = nullptr;
  cache::SeqStep step;  ///< what the host runs for it
  bool sample = false;  ///< the step reaches the end of the sequence's tokens: sample the next
};

/**
 * One step, a row per sequence. The host returns logits rows in the order of the steps that ask
 * for them, so the sampled rows' logits are the result's rows in order.
 */
struct Plan {
  std::vector<PlanRow> rows;
  uint32_t decode_tokens = 0, prefill_tokens = 0;
  bool empty() const { return rows.empty(); }
  /** The host's view of the rows' steps. */
  cache::Steps steps() const { return cache::Steps::members<&PlanRow::step>(rows); }
};

struct SchedulerStats {
  uint64_t preemptions = 0;
  size_t waiting = 0, running = 0;
  // Prefix caching (zeros when off).
  uint64_t prefix_lookups = 0, prefix_hits = 0, cached_tokens = 0;
  uint64_t queried_tokens = 0;  ///< tokens of the sequences that looked the cache up (vLLM's queries)
  uint64_t cached_blocks = 0, evicted_blocks = 0;
  uint64_t snapshots = 0, snapshot_bytes = 0, evicted_snapshots = 0;
};

class Scheduler {
 public:
  /** `token_budget` 0: the host's max_batch_tokens. */
  explicit Scheduler(model::ModelHost& host, uint32_t token_budget = 0, bool prefix_caching = false,
                     uint32_t snapshot_interval = 512);
  ~Scheduler();

  /** Queues a sequence (its tokens set, computed 0); it joins a step once it fits. */
  void enqueue(Sequence* s);
  /** Takes the sequence out (finished, cancelled or failed) and frees its blocks and slot. */
  void remove(Sequence* s);
  /** The next step (empty when nothing can run). Sequences it gives up on are marked failed. */
  Plan plan();
  /** After the step ran: each planned sequence's computed advances by its chunk. */
  void commit(const Plan& plan);
  /** After the step failed: the planned sequences' KV is as before the step. */
  void abort(const Plan& plan);

  SchedulerStats stats() const;

  /** Starts announcing the prefix cache's servable blocks (KV-cache events); false without one. */
  bool announce_blocks();
  /** The prefix cache's events since the last call (empty unless announcing). */
  std::vector<cache::PrefixTree::Event> take_events();
  /** The blocks announced now, parents first. */
  std::vector<cache::PrefixTree::Announced> announced() const;
  /** Drops every cached prefix that no running sequence holds (the tree lets go of all). */
  void reset_prefix_cache();
  bool idle() const { return waiting_.empty() && running_.empty(); }

 private:
  void preempt(Sequence* s);
  /** Adds the steps for `s` (a chunk of at most `budget` tokens) if the host takes them. */
  bool try_add(Plan& p, Sequence* s, uint32_t budget);
  /** Starts `s` as host sequence `id`, on its longest cached prefix (`*reused` tokens) when there is one. */
  cache::Status start(Sequence* s, uint64_t id, uint32_t* reused);
  /** Whether a running sequence is computing a prefix `s` would reuse, beyond what is cached. */
  bool wait_for_shared_prefix(const Sequence* s);
  /** Gives the tree `s`'s newly computed whole blocks, and a snapshot at a chunk-aligned length. */
  void index(Sequence* s);

  model::ModelHost& host_;
  uint32_t budget_;
  uint64_t next_arrival_ = 1, next_seq_ = 1, preemptions_ = 0;
  std::vector<Sequence*> running_;           ///< in the cache, oldest arrival first
  std::deque<Sequence*> waiting_;            ///< not in the cache, oldest arrival first
  std::unique_ptr<cache::PrefixTree> tree_;  ///< null when prefix caching is off
  /** With a tree and sliding-window layers: the longest prefill chunk whose blocks all reach the tree. */
  uint32_t window_chunk_ = 0;
  /** With a tree and recurrent layers: prefills stop at every multiple of this for a snapshot. */
  uint32_t snapshot_interval_ = 0;
  uint64_t lookups_ = 0, hits_ = 0, cached_tokens_ = 0, queried_tokens_ = 0;
};

}  // namespace kiln::sched
