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
};

namespace {

std::vector<int32_t> block_of(const std::vector<int32_t>& tokens, uint32_t b, uint32_t bt) {
  return std::vector<int32_t>(tokens.begin() + b * bt, tokens.begin() + (b + 1) * bt);
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
  if (!root) root = std::make_unique<Node>();
  Node* n = root.get();
  const uint32_t blocks = std::min<uint32_t>(held.length, static_cast<uint32_t>(tokens.size())) / bt_;
  ++tick_;
  for (uint32_t b = 0; b < blocks; ++b) {
    std::vector<int32_t> key_tokens = block_of(tokens, b, bt_);
    auto it = n->children.find(key_tokens);
    if (it == n->children.end()) {
      auto child = std::make_unique<Node>();
      child->parent = n;
      child->tokens = key_tokens;
      child->end = (b + 1) * bt_;
      child->ids.assign(groups_, -1);
      it = n->children.emplace(std::move(key_tokens), std::move(child)).first;
      ++stats_.nodes;
    }
    Node* c = it->second.get();
    // Adopt the caller's reference where the node lacks the block (new, or a sliding block an
    // earlier insertion no longer had); the others go back below.
    for (size_t g = 0; g < groups_ && g < held.tables.size(); ++g)
      if (b < held.tables[g].size() && c->ids[g] < 0 && held.tables[g][b] >= 0) {
        c->ids[g] = held.tables[g][b];
        held.tables[g][b] = -1;
      }
    c->used = tick_;
    n = c;
  }
  hooks_.drop(held);
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
}

void PrefixTree::drop_node(Node* n) {
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
  return true;
}

void PrefixTree::drop_subtree(Node* n) {
  while (!n->children.empty()) drop_subtree(n->children.begin()->second.get());
  drop_node(n);
  --stats_.evicted_blocks;  // not an eviction
}

void PrefixTree::clear() {
  for (auto& [k, root] : roots_)
    while (!root->children.empty()) drop_subtree(root->children.begin()->second.get());
  roots_.clear();
}

}  // namespace kiln::cache
