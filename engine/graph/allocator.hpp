// Arena planning for a graph's intermediates: liveness-based reuse, so memory is the peak of what
// is live at once rather than the sum of every intermediate.
#pragma once

#include "graph/graph.hpp"

#include <cstddef>
#include <vector>

namespace kiln::graph {

struct Plan {
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t arena_bytes = 0;      ///< size of the arena buffer to allocate
  size_t unshared_bytes = 0;   ///< what the intermediates would need without reuse (for logs/tests)
  std::vector<size_t> offset;  ///< per tensor id: arena offset of intermediates owning memory, else kNone
};

/**
 * Places every intermediate that owns memory (aliases use their base's) in one arena. A tensor is
 * live from its producing node to its last reader (outputs: to the end); first-fit placement among
 * live tensors, `alignment`-aligned. A node's result never overlaps its sources.
 */
Plan plan_memory(const Graph& graph, size_t alignment = 256);

}  // namespace kiln::graph
