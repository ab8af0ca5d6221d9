// The prefix cache's index: a radix tree over fixed-size token blocks, one tree per key (a served
// model's cache_salt), each node holding one reference to its block in every KV group (the KV of
// positions [depth·B, (depth+1)·B)) and, for models with recurrent layers, optionally a state
// snapshot at its end. A prompt's longest cached prefix is the path of its blocks; a hit at length L
// is handed to the model host as one BlockSpan assembled from the path. Nodes are evicted least
// recently used first, leaves only (a node's descendants need its blocks); snapshots have their own
// LRU so their memory can be reclaimed while the blocks stay.
//
// The tree only holds block ids and snapshot slots; what holding means (reference counts in the
// block pools, state slots) is the cache's, reached through Hooks. Not thread-safe: one scheduler
// thread owns it.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cache/kv_cache.hpp"

namespace kiln::cache {

class PrefixTree {
 public:
  struct Hooks {
    std::function<void(BlockSpan&)> drop;          ///< gives held blocks back (KvCache::drop)
    std::function<void(int32_t slot)> drop_state;  ///< frees a snapshot's state slot
    /** Whether giving these blocks (one per group, -1: none) back frees any (no one else holds it). */
    std::function<bool(const std::vector<int32_t>& ids)> frees;
  };
  struct Stats {
    uint64_t nodes = 0, snapshots = 0;
    uint64_t evicted_blocks = 0, evicted_snapshots = 0;
  };
  /** A cached prefix: `span` holds nothing of its own (the tree keeps the references). */
  struct Match {
    uint32_t length = 0;      ///< tokens, a multiple of the block size (0: no hit)
    BlockSpan span;           ///< tables of [0, length), per group; -1 where a block was not kept
    int32_t state_slot = -1;  ///< the snapshot at `length` (models with recurrent layers)
  };

  struct Node;  ///< opaque

  PrefixTree(uint32_t block_tokens, size_t groups, Hooks hooks);
  ~PrefixTree();
  PrefixTree(const PrefixTree&) = delete;
  PrefixTree& operator=(const PrefixTree&) = delete;

  /**
   * The longest prefix of `tokens` (at most `limit` tokens) the tree can start a sequence at:
   * `usable` says whether a span serves the next query (sliding windows need their last blocks),
   * and with `need_state` only lengths holding a snapshot qualify. Marks the path recently used.
   */
  Match match(const std::string& key, const std::vector<int32_t>& tokens, uint32_t limit,
              const std::function<bool(const BlockSpan&)>& usable, bool need_state);

  /**
   * Records the blocks of `held` (positions [0, held.length) of `tokens`, each held once by the
   * caller for the tree): blocks the tree lacks become nodes and keep their reference; the rest are
   * given back. Only whole blocks are kept.
   */
  void insert(const std::string& key, const std::vector<int32_t>& tokens, BlockSpan held);

  /** The node ending at `length` (a block multiple) exists and has no snapshot yet. */
  bool wants_state(const std::string& key, const std::vector<int32_t>& tokens, uint32_t length) const;
  /** Gives the node ending at `length` the snapshot in `slot` (the tree frees it on eviction). */
  void attach_state(const std::string& key, const std::vector<int32_t>& tokens, uint32_t length, int32_t slot);

  /**
   * Evicts the least recently used leaf whose blocks no running sequence also holds (so the pool
   * gains a block); false when there is none. O(nodes).
   */
  bool evict_leaf();
  /** Frees the least recently used snapshot (its node keeps its blocks); false when none. */
  bool evict_state();
  /** Drops everything. */
  void clear();

  const Stats& stats() const { return stats_; }

 private:
  Node* find(const std::string& key, const std::vector<int32_t>& tokens, uint32_t length) const;
  void drop_node(Node* n);
  void drop_subtree(Node* n);

  uint32_t bt_;
  size_t groups_;
  Hooks hooks_;
  uint64_t tick_ = 0;
  std::map<std::string, std::unique_ptr<Node>> roots_;
  Stats stats_;
};

}  // namespace kiln::cache
