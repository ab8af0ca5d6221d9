// Lowering a planned graph onto a device: every tensor becomes a TensorRef (intermediates in the
// arena, externals from the host's resolver), RESHAPE nodes disappear into aliases.
#pragma once

#include "backend/backend.hpp"
#include "graph/allocator.hpp"
#include "graph/graph.hpp"

#include <functional>

namespace kiln::graph {

/** Places an external tensor (weight, input, cache): the host owns those buffers. */
using ExternalResolver = std::function<backend::TensorRef(uint32_t id, const Tensor& tensor)>;

/** Where tensor `t` lives once bound (follows aliases; a RESHAPE keeps its own desc). */
backend::TensorRef locate(const Graph& graph, const Plan& plan, backend::Buffer& arena, const ExternalResolver& ext,
                          uint32_t t);

/** The graph as a backend executes it. */
backend::BoundGraph bind(const Graph& graph, const Plan& plan, backend::Buffer& arena, const ExternalResolver& ext);

}  // namespace kiln::graph
