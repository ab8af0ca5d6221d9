// One step's ragged batch: sequences of different lengths, prefill chunks and decodes mixed, tokens
// flattened with no padding. Every token carries its own position, captured from the cache before
// the step (serving-hazards.md (e): positions are per sequence and by value), and every sequence
// its own block tables. Laid out exactly as the graph's inputs (docs/backend.md §3).
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "cache/kv_cache.hpp"

namespace kiln::cache {

struct SeqStep {
  uint64_t seq = 0;
  std::vector<int32_t> tokens;  ///< this step's tokens (a prefill chunk, or one decode token)
  bool logits = true;           ///< want the logits of the last token
  bool logits_all = false;      ///< want the logits of every token (scoring, tests)
};

/**
 * The steps of one batch, read where they lie: a vector of steps, or one member of each row of a
 * vector of larger rows (the scheduler's plan, whose rows carry their sequence and sampling beside
 * the step), without copying their tokens. Only ever a parameter: it points into the vector.
 */
class Steps {
 public:
  Steps(const std::vector<SeqStep>& steps)  // NOLINT(google-explicit-constructor): any vector of steps is a batch
      : base_(steps.data()),
        size_(steps.size()),
        at_([](const void* b, size_t i) -> const SeqStep& { return static_cast<const SeqStep*>(b)[i]; }) {}
  /** Steps written in place at a call (`host.step({{seq, tokens, true, false}}, ...)`). */
  Steps(std::initializer_list<SeqStep> steps)  // NOLINT(google-explicit-constructor)
      : base_(steps.begin()),
        size_(steps.size()),
        at_([](const void* b, size_t i) -> const SeqStep& { return static_cast<const SeqStep*>(b)[i]; }) {}
  /** Member `M` (a SeqStep) of each of `rows`. */
  template <auto M, class Row>
  static Steps members(const std::vector<Row>& rows) {
    Steps s;
    s.base_ = rows.data();
    s.size_ = rows.size();
    s.at_ = [](const void* b, size_t i) -> const SeqStep& { return static_cast<const Row*>(b)[i].*M; };
    return s;
  }

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const SeqStep& operator[](size_t i) const { return at_(base_, i); }

  class Iterator {
   public:
    Iterator(const Steps* s, size_t i) : s_(s), i_(i) {}
    const SeqStep& operator*() const { return (*s_)[i_]; }
    const SeqStep* operator->() const { return &(*s_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }

   private:
    const Steps* s_;
    size_t i_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size_}; }

 private:
  Steps() = default;
  const void* base_ = nullptr;
  size_t size_ = 0;
  const SeqStep& (*at_)(const void*, size_t) = nullptr;
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
std::vector<std::pair<uint64_t, uint32_t>> step_appends(Steps steps);

/**
 * Describes a step whose appends `tx` has begun: positions from each sequence's length before the
 * step, slots and block tables from the tables after it. Sequences and logits rows keep the order
 * of the steps (a step's rows in token order).
 */
RaggedBatch describe_batch(const KvCache& cache, const Transaction& tx, Steps steps);

/**
 * Begins the step's appends in `cache` (all or nothing; the caller commits or rolls back `tx`) and
 * describes the batch. Sequences must have been add()ed. On a status other than ok nothing changed.
 */
Status plan_batch(KvCache& cache, Steps steps, RaggedBatch* out, Transaction* tx);

}  // namespace kiln::cache
