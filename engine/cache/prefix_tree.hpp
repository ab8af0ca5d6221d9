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
//
// With announce() on, the tree also says which blocks it can serve as a hit, for KV-cache event
// subscribers (a router's index, vLLM's BlockStored / BlockRemoved / AllBlocksCleared): a node is
// servable where match() would stop on it (a snapshot there for recurrent layers, the window's
// blocks for sliding ones), and a node is announced while it or a descendant is servable, since a
// subscriber learns a block only after its parent. Each node has a 64-bit hash chained from its
// parent's, its tokens and, at the top, the key: replicas that cached the same prefix announce the
// same hashes.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
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

  /** A change of the announced blocks (KV-cache events). */
  struct Event {
    enum class Kind { stored, removed, cleared };
    Kind kind = Kind::stored;
    std::vector<uint64_t> hashes;    ///< stored: a chain, parent first; removed: children first
    std::optional<uint64_t> parent;  ///< stored: the first block's parent (none: it starts at the top)
    std::vector<int32_t> tokens;     ///< stored: the blocks' tokens, concatenated
    std::string key;                 ///< stored: the tree's key (cache_salt) when the chain starts at the top
  };
  /** An announced block (the test endpoint's listing). */
  struct Announced {
    uint64_t hash = 0;
    std::optional<uint64_t> parent;
    std::vector<int32_t> tokens;
    std::string key;  ///< for a block at the top
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
  /** Drops everything (announcing it as one `cleared` event). */
  void clear();

  /**
   * Starts announcing servable blocks: a node is servable when `usable` accepts the span from the
   * top to it (null: always) and, with `need_state`, it holds a snapshot. Starts with a `cleared`
   * event. A block whose window an ancestor's later insertion completes is announced when a path
   * through it is next inserted (never early).
   */
  void announce(std::function<bool(const BlockSpan&)> usable, bool need_state);
  /** The events since the last call, in order. */
  std::vector<Event> take_events();
  /** Every announced block, parents before children. */
  std::vector<Announced> announced() const;

  const Stats& stats() const { return stats_; }

 private:
  Node* find(const std::string& key, const std::vector<int32_t>& tokens, uint32_t length) const;
  void drop_node(Node* n);
  void drop_subtree(Node* n);
  /** Announcing: `n`'s servable flag set to `v`, the announced blocks above it updated. */
  void set_servable(Node* n, bool v);
  /** Announcing: re-evaluates the nodes of `path` (top first) from `from` on, in one pass. */
  void update_path(const std::vector<Node*>& path, size_t from);
  bool servable(const std::vector<Node*>& path, size_t i) const;
  void stored(const std::vector<Node*>& chain);   ///< top first
  void removed(const std::vector<Node*>& chain);  ///< bottom first

  uint32_t bt_;
  size_t groups_;
  Hooks hooks_;
  uint64_t tick_ = 0;
  std::map<std::string, std::unique_ptr<Node>> roots_;
  Stats stats_;
  bool announcing_ = false, need_state_ = false;
  std::function<bool(const BlockSpan&)> usable_;
  std::vector<Event> events_;
};

}  // namespace kiln::cache
