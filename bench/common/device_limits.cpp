#include "device_limits.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

#include "backend/backend.hpp"

namespace kiln::bench {

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

double device_copy_gbs(backend::Device& dev, int mib, int reps) {
  const int64_t n = int64_t{mib} << 18;  // floats
  auto a = dev.allocate(static_cast<size_t>(n) * 4, backend::BufferUsage::activations);
  auto b = dev.allocate(static_cast<size_t>(n) * 4, backend::BufferUsage::activations);
  std::vector<float> ones(static_cast<size_t>(n), 1.0f);
  a->upload(0, ones.data(), ones.size() * 4);
  backend::BoundGraph g;
  backend::Node s;
  s.op = KILN_OP_SLICE;
  s.n_src = 1;
  s.params.axis = 0;
  s.params.begin = 0;
  s.params.end = n;
  s.src[0] = {a.get(), 0, backend::TensorDesc(DType::f32, {n})};
  s.dst = {b.get(), 0, backend::TensorDesc(DType::f32, {n})};
  for (int i = 0; i < 8; ++i) g.nodes.push_back(s);
  dev.compute(g);
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    dev.compute(g);
    best = std::min(best, (now() - t0) / 8);
  }
  return 2.0 * static_cast<double>(n) * 4 / best / 1e9;
}

bool is_gpu(const backend::Device& dev) {
  const backend::DeviceKind k = dev.info().kind;
  return k == backend::DeviceKind::discrete_gpu || k == backend::DeviceKind::integrated_gpu;
}

}  // namespace kiln::bench
