// Liveness-based first-fit placement of a graph's intermediates.
#include "graph/allocator.hpp"

#include <algorithm>
#include <map>

namespace kiln::graph {

Plan plan_memory(const Graph& g, size_t alignment) {
  const size_t n_tensors = g.tensor_count();
  const auto& nodes = g.nodes();
  Plan plan;
  plan.offset.assign(n_tensors, Plan::kNone);
  auto owns = [&](uint32_t t) { return g.tensor(t).kind == TensorKind::intermediate && !g.tensor(t).alias; };

  // Last node reading each base tensor; outputs live to the end.
  std::vector<int64_t> last_use(n_tensors, -1);
  for (size_t i = 0; i < nodes.size(); ++i)
    for (uint32_t s : nodes[i].srcs) last_use[g.base(s)] = std::max<int64_t>(last_use[g.base(s)], static_cast<int64_t>(i));
  for (uint32_t t = 1; t < n_tensors; ++t)
    if (g.tensor(t).output) last_use[g.base(t)] = static_cast<int64_t>(nodes.size());

  auto aligned = [&](size_t b) { return (b + alignment - 1) / alignment * alignment; };
  std::map<size_t, size_t> live;  // offset -> size, of tensors placed and not yet dead
  std::vector<std::vector<uint32_t>> dies_after(nodes.size() + 1);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const uint32_t t = nodes[i].dst;
    if (owns(t)) {
      const size_t size = aligned(std::max<size_t>(g.tensor(t).desc.bytes(), 1));
      plan.unshared_bytes += size;
      size_t at = 0;
      for (const auto& [off, sz] : live) {  // first gap that fits
        if (off >= at + size) break;
        at = std::max(at, off + sz);
      }
      live.emplace(at, size);
      plan.offset[t] = at;
      plan.arena_bytes = std::max(plan.arena_bytes, at + size);
      const int64_t last = std::max<int64_t>(last_use[t], static_cast<int64_t>(i));
      dies_after[static_cast<size_t>(last)].push_back(t);
    }
    for (uint32_t d : dies_after[i]) live.erase(plan.offset[d]);
  }
  return plan;
}

}  // namespace kiln::graph
