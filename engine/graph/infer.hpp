// Shape and dtype rules of every op (docs/backend.md §4), used by the graph builder so that a model
// plugin gets a precise error at build time instead of a kernel failure later.
#pragma once

#include "backend/tensor.hpp"

#include <kiln/kiln_plugin.h>

#include <span>

namespace kiln::graph {

/**
 * The result description of `op` applied to `srcs` with `params`; throws HostError
 * "[graph] ROPE: positions must be i32 [N] (N = 7), got f32[7]" when the sources do not fit.
 */
backend::TensorDesc infer(uint32_t op, const kiln_op_params& params, std::span<const backend::TensorDesc> srcs);

}  // namespace kiln::graph
