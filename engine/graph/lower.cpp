// Binding symbolic tensors to buffers.
#include "graph/lower.hpp"

#include "core/error.hpp"
#include "backend/ops.hpp"

namespace kiln::graph {

backend::TensorRef locate(const Graph& g, const Plan& plan, backend::Buffer& arena, const ExternalResolver& ext,
                          uint32_t t) {
  const uint32_t b = g.base(t);
  const Tensor& bt = g.tensor(b);
  backend::TensorRef ref;
  if (bt.kind == TensorKind::intermediate) {
    if (plan.offset.size() <= b || plan.offset[b] == Plan::kNone)
      throw_error("[graph] tensor {} has no arena placement (plan made for another graph?)", b);
    ref = backend::TensorRef{&arena, plan.offset[b], bt.desc};
  } else {
    ref = ext(b, bt);
    if (!ref.buffer) throw_error("[graph] the host has no buffer for {} '{}'", bt.kind == TensorKind::weight ? "weight" : "tensor", bt.name);
  }
  ref.desc = g.tensor(t).desc;
  return ref;
}

backend::BoundGraph bind(const Graph& g, const Plan& plan, backend::Buffer& arena, const ExternalResolver& ext) {
  backend::BoundGraph out;
  for (const GraphNode& n : g.nodes()) {
    if (op_is_view(n.op)) continue;
    backend::Node bn;
    bn.op = n.op;
    bn.params = n.params;
    bn.n_src = static_cast<uint32_t>(n.srcs.size());
    for (size_t i = 0; i < n.srcs.size(); ++i) bn.src[i] = locate(g, plan, arena, ext, n.srcs[i]);
    bn.dst = locate(g, plan, arena, ext, n.dst);
    bn.name = g.tensor(n.dst).name;
    out.nodes.push_back(std::move(bn));
  }
  return out;
}

}  // namespace kiln::graph
