#include "cache/prefix_tree.hpp"

#include <algorithm>

namespace kiln::cache {

struct PrefixTree::Node {
  Node* parent = nullptr;
  std::vector<int32_t> tokens;  ///< the block's tokens (empty at a root)
  std::vector<int32_t> ids;     ///< per group: the block held, -1 when not kept
  uint32_t end = 0;             ///< tokens from the root to this node's end
  int32_t state = -1;           ///< snapshot slot at `end`, or -1
  uint64_t used = 0, state_used = 0;
  std::map<std::vector<int32_t>, std::unique_ptr<Node>> children;
  // Announcing (KV-cache events).
  uint64_t hash = 0;      ///< chained from the parent's (a root's: from its key)
  bool servable = false;  ///< match() can stop here
  uint32_t below = 0;     ///< servable nodes in the subtree, this one included: announced while > 0
  std::string key;        ///< a root's key
};

namespace {

std::vector<int32_t> block_of(const std::vector<int32_t>& tokens, uint32_t b, uint32_t bt) {
  return std::vector<int32_t>(tokens.begin() + b * bt, tokens.begin() + (b + 1) * bt);
}

/** splitmix64's finalizer: a bijection that spreads every input bit over the output. */
uint64_t mix(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t block_hash(uint64_t parent, const std::vector<int32_t>& tokens) {
  uint64_t h = mix(parent ^ 0x9e3779b97f4a7c15ULL);
  for (int32_t t : tokens) h = mix(h ^ static_cast<uint32_t>(t));
  return h;
}

uint64_t key_hash(const std::string& key) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a, then mixed
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ULL;
  return mix(h ^ key.size());
}

/** The nodes from the top (a root's child) down to `n`. */
std::vector<PrefixTree::Node*> path_to(PrefixTree::Node* n) {
  std::vector<PrefixTree::Node*> path;
  for (; n->parent; n = n->parent) path.push_back(n);
  std::reverse(path.begin(), path.end());
  return path;
}

template <class Fn>
void for_each_node(PrefixTree::Node* n, Fn&& fn) {
  for (auto& [k, c] : n->children) {
    fn(c.get());
    for_each_node(c.get(), fn);
  }
}

}  // namespace

PrefixTree::PrefixTree(uint32_t block_tokens, size_t groups, Hooks hooks)
    : bt_(block_tokens), groups_(groups), hooks_(std::move(hooks)) {}

PrefixTree::~PrefixTree() {
  clear();
}

PrefixTree::Match PrefixTree::match(const std::string& key, const std::vector<int32_t>& tokens, uint32_t limit,
                                    const std::function<bool(const BlockSpan&)>& usable, bool need_state) {
  Match m;
  auto root = roots_.find(key);
  if (root == roots_.end()) return m;
  std::vector<Node*> path;
  Node* n = root->second.get();
  const uint32_t blocks = std::min<uint32_t>(limit, static_cast<uint32_t>(tokens.size())) / bt_;
  for (uint32_t b = 0; b < blocks; ++b) {
    auto it = n->children.find(block_of(tokens, b, bt_));
    if (it == n->children.end()) break;
    n = it->second.get();
    path.push_back(n);
  }
  if (path.empty()) return m;
  BlockSpan span;
  span.tables.assign(groups_, {});
  for (Node* p : path)
    for (size_t g = 0; g < groups_; ++g) span.tables[g].push_back(p->ids[g]);
  // The deepest length every kind serves: a snapshot there for recurrent layers, the window's blocks
  // for sliding ones.
  for (size_t d = path.size(); d-- > 0;) {
    Node* at = path[d];
    if (need_state && at->state < 0) continue;
    span.length = at->end;
    if (!usable(span)) continue;
    ++tick_;
    for (size_t i = 0; i <= d; ++i) path[i]->used = tick_;
    if (need_state) at->state_used = tick_;
    for (auto& t : span.tables) t.resize(d + 1);
    m.length = at->end;
    m.span = std::move(span);
    m.state_slot = at->state;
    return m;
  }
  return m;
}

void PrefixTree::insert(const std::string& key, const std::vector<int32_t>& tokens, BlockSpan held) {
  auto& root = roots_[key];
  if (!root) {
    root = std::make_unique<Node>();
    root->key = key;
    root->hash = key_hash(key);
  }
  Node* n = root.get();
  const uint32_t blocks = std::min<uint32_t>(held.length, static_cast<uint32_t>(tokens.size())) / bt_;
  ++tick_;
  std::vector<Node*> path;
  size_t changed = blocks;  // the first node created or given a block
  for (uint32_t b = 0; b < blocks; ++b) {
    std::vector<int32_t> key_tokens = block_of(tokens, b, bt_);
    auto it = n->children.find(key_tokens);
    if (it == n->children.end()) {
      auto child = std::make_unique<Node>();
      child->parent = n;
      child->tokens = key_tokens;
      child->end = (b + 1) * bt_;
      child->ids.assign(groups_, -1);
      child->hash = block_hash(n->hash, key_tokens);
      it = n->children.emplace(std::move(key_tokens), std::move(child)).first;
      ++stats_.nodes;
      changed = std::min<size_t>(changed, b);
    }
    Node* c = it->second.get();
    // Adopt the caller's reference where the node lacks the block (new, or a sliding block an
    // earlier insertion no longer had); the others go back below.
    for (size_t g = 0; g < groups_ && g < held.tables.size(); ++g)
      if (b < held.tables[g].size() && c->ids[g] < 0 && held.tables[g][b] >= 0) {
        c->ids[g] = held.tables[g][b];
        held.tables[g][b] = -1;
        changed = std::min<size_t>(changed, b);
      }
    c->used = tick_;
    n = c;
    path.push_back(c);
  }
  hooks_.drop(held);
  if (announcing_ && changed < path.size()) update_path(path, changed);
}

bool PrefixTree::servable(const std::vector<Node*>& path, size_t i) const {
  if (need_state_ && path[i]->state < 0) return false;
  if (!usable_) return true;
  BlockSpan span;
  span.tables.assign(groups_, {});
  for (size_t d = 0; d <= i; ++d)
    for (size_t g = 0; g < groups_; ++g) span.tables[g].push_back(path[d]->ids[g]);
  span.length = path[i]->end;
  return usable_(span);
}

void PrefixTree::update_path(const std::vector<Node*>& path, size_t from) {
  std::vector<int> delta(path.size(), 0);
  for (size_t i = from; i < path.size(); ++i) {
    const bool v = servable(path, i);
    if (v != path[i]->servable) {
      path[i]->servable = v;
      delta[i] = v ? 1 : -1;
    }
  }
  // Counts change from the bottom up; the nodes that start or stop being announced are each one
  // run of the path (a node's count is at least its descendants').
  std::vector<Node*> on, off;
  int acc = 0;
  for (size_t i = path.size(); i-- > 0;) {
    acc += delta[i];
    if (!acc) continue;
    const uint32_t before = path[i]->below;
    path[i]->below = static_cast<uint32_t>(static_cast<int64_t>(before) + acc);
    if (!before && path[i]->below) on.push_back(path[i]);
    if (before && !path[i]->below) off.push_back(path[i]);
  }
  if (!off.empty()) removed(off);
  std::reverse(on.begin(), on.end());
  if (!on.empty()) stored(on);
}

void PrefixTree::set_servable(Node* n, bool v) {
  if (n->servable == v) return;
  n->servable = v;
  std::vector<Node*> on, off;
  for (Node* p = n; p->parent; p = p->parent) {
    const uint32_t before = p->below;
    p->below = v ? before + 1 : before - 1;
    if (!before && p->below) on.push_back(p);
    if (before && !p->below) off.push_back(p);
  }
  if (!off.empty()) removed(off);
  std::reverse(on.begin(), on.end());
  if (!on.empty()) stored(on);
}

void PrefixTree::stored(const std::vector<Node*>& chain) {
  Event e;
  e.kind = Event::Kind::stored;
  const Node* top = chain.front()->parent;
  if (top->parent)
    e.parent = top->hash;
  else
    e.key = top->key;
  for (const Node* n : chain) {
    e.hashes.push_back(n->hash);
    e.tokens.insert(e.tokens.end(), n->tokens.begin(), n->tokens.end());
  }
  events_.push_back(std::move(e));
}

void PrefixTree::removed(const std::vector<Node*>& chain) {
  Event e;
  e.kind = Event::Kind::removed;
  for (const Node* n : chain) e.hashes.push_back(n->hash);
  events_.push_back(std::move(e));
}

void PrefixTree::announce(std::function<bool(const BlockSpan&)> usable, bool need_state) {
  announcing_ = true;
  usable_ = std::move(usable);
  need_state_ = need_state;
  events_.push_back({Event::Kind::cleared, {}, std::nullopt, {}, {}});
  // Whatever the tree holds already (normally nothing: the server announces from its start).
  for (auto& [k, root] : roots_) {
    std::vector<Node*> nodes;
    for_each_node(root.get(), [&](Node* n) { nodes.push_back(n); });
    for (Node* n : nodes) {
      const std::vector<Node*> path = path_to(n);
      set_servable(n, servable(path, path.size() - 1));
    }
  }
}

std::vector<PrefixTree::Event> PrefixTree::take_events() {
  std::vector<Event> out;
  out.swap(events_);
  return out;
}

std::vector<PrefixTree::Announced> PrefixTree::announced() const {
  std::vector<Announced> out;
  for (const auto& [k, root] : roots_)
    for_each_node(root.get(), [&](Node* n) {  // parents first
      if (!n->below) return;
      Announced a;
      a.hash = n->hash;
      if (n->parent->parent)
        a.parent = n->parent->hash;
      else
        a.key = n->parent->key;
      a.tokens = n->tokens;
      out.push_back(std::move(a));
    });
  return out;
}

PrefixTree::Node* PrefixTree::find(const std::string& key, const std::vector<int32_t>& tokens, uint32_t length) const {
  auto root = roots_.find(key);
  if (root == roots_.end() || length % bt_ || length == 0 || length > tokens.size()) return nullptr;
  Node* n = root->second.get();
  for (uint32_t b = 0; b < length / bt_; ++b) {
    auto it = n->children.find(block_of(tokens, b, bt_));
    if (it == n->children.end()) return nullptr;
    n = it->second.get();
  }
  return n;
}

bool PrefixTree::wants_state(const std::string& key, const std::vector<int32_t>& tokens, uint32_t length) const {
  const Node* n = find(key, tokens, length);
  return n && n->state < 0;
}

void PrefixTree::attach_state(const std::string& key, const std::vector<int32_t>& tokens, uint32_t length,
                              int32_t slot) {
  Node* n = find(key, tokens, length);
  if (!n || n->state >= 0) {
    hooks_.drop_state(slot);
    return;
  }
  n->state = slot;
  n->state_used = ++tick_;
  ++stats_.snapshots;
  if (announcing_) {
    const std::vector<Node*> path = path_to(n);
    set_servable(n, servable(path, path.size() - 1));
  }
}

void PrefixTree::drop_node(Node* n) {
  if (announcing_) set_servable(n, false);  // a leaf: announced only while servable itself
  BlockSpan span;
  for (int32_t id : n->ids) span.tables.push_back({id});
  span.length = bt_;
  hooks_.drop(span);
  if (n->state >= 0) {
    hooks_.drop_state(n->state);
    --stats_.snapshots;
  }
  --stats_.nodes;
  ++stats_.evicted_blocks;
  Node* parent = n->parent;
  const std::vector<int32_t> key = n->tokens;
  parent->children.erase(key);  // destroys n
}

bool PrefixTree::evict_leaf() {
  Node* victim = nullptr;
  for (auto& [k, root] : roots_)
    for_each_node(root.get(), [&](Node* n) {
      if (n->children.empty() && (!victim || n->used < victim->used) && hooks_.frees(n->ids)) victim = n;
    });
  if (!victim) return false;
  drop_node(victim);
  for (auto it = roots_.begin(); it != roots_.end();)
    it = it->second->children.empty() ? roots_.erase(it) : std::next(it);
  return true;
}

bool PrefixTree::evict_state() {
  Node* victim = nullptr;
  for (auto& [k, root] : roots_)
    for_each_node(root.get(), [&](Node* n) {
      if (n->state >= 0 && (!victim || n->state_used < victim->state_used)) victim = n;
    });
  if (!victim) return false;
  hooks_.drop_state(victim->state);
  victim->state = -1;
  --stats_.snapshots;
  ++stats_.evicted_snapshots;
  if (announcing_ && need_state_) set_servable(victim, false);
  return true;
}

void PrefixTree::drop_subtree(Node* n) {
  while (!n->children.empty()) drop_subtree(n->children.begin()->second.get());
  drop_node(n);
  --stats_.evicted_blocks;  // not an eviction
}

void PrefixTree::clear() {
  const bool announcing = announcing_;
  announcing_ = false;  // one `cleared` event, not a removal per block
  for (auto& [k, root] : roots_)
    while (!root->children.empty()) drop_subtree(root->children.begin()->second.get());
  roots_.clear();
  announcing_ = announcing;
  if (announcing_) events_.push_back({Event::Kind::cleared, {}, std::nullopt, {}, {}});
}

}  // namespace kiln::cache
