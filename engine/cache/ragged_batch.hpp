// One step's ragged batch: sequences of different lengths, prefill chunks and decodes mixed, tokens
// flattened with no padding. Every token carries its own position, captured from the cache before
// the step (serving-hazards.md (e): positions are per sequence and by value), and every sequence
// its own block tables. Laid out exactly as the graph's inputs (docs/backend.md §3).
#pragma once

#include <cstdint>
#include <vector>

#include "cache/kv_cache.hpp"

namespace kiln::cache {

struct SeqStep {
  uint64_t seq = 0;
  std::vector<int32_t> tokens;  ///< this step's tokens (a prefill chunk, or one decode token)
  bool logits = true;           ///< want the logits of the last token
  bool logits_all = false;      ///< want the logits of every token (scoring, tests)
};

struct RaggedBatch {
  uint32_t n_tokens = 0, n_seqs = 0;
  std::vector<int32_t> tokens;       ///< [N]
  std::vector<int32_t> positions;    ///< [N]
  std::vector<int32_t> seqs;         ///< [S, 4]: q_start, q_len, kv_len, state_slot
  std::vector<int32_t> logits_rows;  ///< rows whose logits come back, in order
  std::vector<uint64_t> seq_ids;     ///< [S]
  struct Group {
    /**
     * MB, the columns of block_table: the longest table, rounded up to a power of two so a
     * growing decode batch keeps one graph shape for many steps (-1 fills the rest; the
     * attention op reads a sequence's entries below its kv_len only).
     */
    uint32_t max_blocks = 0;
    std::vector<int32_t> block_table;  ///< [S, MB], -1 for released or unused entries
    std::vector<int32_t> slots;        ///< [N]: cache row receiving each token's K/V
  };
  std::vector<Group> groups;  ///< per KV group of the layout
};

/** The appends of `steps` (sequences with tokens), for KvCache::check / begin. */
std::vector<std::pair<uint64_t, uint32_t>> step_appends(const std::vector<SeqStep>& steps);

/**
 * Describes a step whose appends `tx` has begun: positions from each sequence's length before the
 * step, slots and block tables from the tables after it.
 */
RaggedBatch describe_batch(const KvCache& cache, const Transaction& tx, const std::vector<SeqStep>& steps);

/**
 * Begins the step's appends in `cache` (all or nothing; the caller commits or rolls back `tx`) and
 * describes the batch. Sequences must have been add()ed. On a status other than ok nothing changed.
 */
Status plan_batch(KvCache& cache, const std::vector<SeqStep>& steps, RaggedBatch* out, Transaction* tx);

}  // namespace kiln::cache
