// The native CPU device: the shared host-memory device with this backend's op dispatch.
#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/isa.hpp"
#include "backend/cpu/ops.hpp"
#include "backend/reference/reference_backend.hpp"

namespace kiln::backend {
namespace simd {
namespace {

Isa chosen_isa() {
  static const Isa isa = active_isa();
  return isa;
}

}  // namespace

const Kernels& kernels() {
  static const Kernels& k = kernels_for(chosen_isa());
  return k;
}

void run_node(const Node& n) {
  switch (n.op) {
    case KILN_OP_MATMUL:
      return run_matmul(n);
    case KILN_OP_MOE_MATMUL:
      return run_moe_matmul(n);
    case KILN_OP_ATTENTION:
      return run_attention(n);
    case KILN_OP_GATED_DELTA:
      return run_gated_delta(n);
    case KILN_OP_CONV1D_CAUSAL:
      return run_conv1d(n);
    default:
      return reference::run_node(n);
  }
}

}  // namespace simd

std::unique_ptr<Backend> make_cpu_backend() {
  const simd::Isa isa = simd::chosen_isa();
  return make_host_backend(
      {"cpu", "cpu", std::string("cpu (") + simd::isa_name(isa) + ")", simd::describe_isa(isa), &simd::run_node});
}

}  // namespace kiln::backend
