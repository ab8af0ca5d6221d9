// Test support for backend ops (in the spirit of llama.cpp's test-backend-ops): an OpGraph holds a
// small graph plus the host data of its external tensors, so the same graph with the same inputs
// can run on any device; outputs come back as f32/i32 arrays. Intermediates are poisoned (NaN)
// before every run, so an element a kernel forgot to write fails the NaN check.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "graph/graph.hpp"

namespace kiln::backend {
/** gtest prints a device parameter by id, so test names are stable across runs. */
inline void PrintTo(Device* d, std::ostream* os) {
  *os << (d ? d->info().id : "null");
}
}  // namespace kiln::backend

namespace kiln::test {

using backend::Device;
using backend::TensorDesc;

struct Output {
  std::string what;  ///< "out 0" or the cache/state tensor's name
  DType dtype = DType::f32;
  std::vector<float> f;    ///< float outputs (f16/bf16 caches converted)
  std::vector<int32_t> i;  ///< i32 outputs
};

class OpGraph {
 public:
  explicit OpGraph(uint32_t seed = 1234) : rng_(seed) {}

  /** Random f32 input in [lo, hi). */
  uint32_t f32(std::initializer_list<int64_t> shape, float lo = -1.0f, float hi = 1.0f);
  uint32_t f32_values(std::initializer_list<int64_t> shape, const std::vector<float>& values);
  uint32_t i32(std::initializer_list<int64_t> shape, const std::vector<int32_t>& values);
  /** Random weight N(0, sd²)-ish (uniform, same variance) stored as `t` (quantized as GGUF does);
      the block formats other than q8_0 / q4_0 as random_blocks (sd unused). */
  uint32_t weight(DType t, std::initializer_list<int64_t> shape, float sd = 0.5f);
  /** A weight given as its stored bytes (any dtype; bytes.size() must match). */
  uint32_t weight_bytes(DType t, std::initializer_list<int64_t> shape, std::vector<std::byte> bytes);
  /** A weight with the given values, rounded to `t` (f32, f16 or bf16). */
  uint32_t weight_values(DType t, std::initializer_list<int64_t> shape, const std::vector<float>& values);
  /** A writable cache/state tensor with random (or zero) initial contents. */
  uint32_t cache(DType t, std::initializer_list<int64_t> shape, bool zero = false, std::string name = "cache");
  /** A writable cache/state tensor with the given initial contents. */
  uint32_t cache_values(DType t, std::initializer_list<int64_t> shape, const std::vector<float>& values,
                        std::string name = "cache");
  uint32_t op(kiln_op op, std::initializer_list<uint32_t> srcs, const kiln_op_params& p = {});
  void output(uint32_t t) { graph_.mark_output(t); }
  /** Weights go through Buffer::upload_weights, as the model host loads them (false: upload()). */
  bool prepared_weights = true;

  /** Runs on `device` (fresh copies of every external) and returns the outputs, then every cache. */
  std::vector<Output> run(Device& device) const;

  graph::Graph& graph() { return graph_; }
  const graph::Graph& graph() const { return graph_; }
  std::mt19937& rng() { return rng_; }
  /** The host data of an external tensor (to build references in tests). */
  const std::vector<std::byte>& data(uint32_t t) const { return data_.at(t); }
  std::vector<float> data_f32(uint32_t t) const;

 private:
  uint32_t external(graph::TensorKind kind, std::string name, const TensorDesc& d, std::vector<std::byte> bytes);
  graph::Graph graph_;
  std::vector<std::vector<std::byte>> data_ = std::vector<std::vector<std::byte>>(1);
  mutable std::mt19937 rng_;
};

/** Σ(a−b)² / Σb²; +inf when either holds a NaN/Inf or the sizes differ. */
double nmse(const std::vector<float>& a, const std::vector<float>& ref);
/** Bitwise equality of float arrays. */
bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b);
/** n uniform floats in [lo, hi) from mt19937(seed). */
std::vector<float> random(size_t n, uint32_t seed, float lo = -1, float hi = 1);

/** GGUF quantization (llama.cpp's reference rounding) and an independent dequantizer. */
std::vector<std::byte> quantize(DType t, const std::vector<float>& x);
std::vector<float> dequantize(DType t, const std::vector<std::byte>& bytes, int64_t n);
/** `n` values of one of ggml's other block formats as random blocks: every integer bit pattern, the
    f16 scales and mins drawn from [0.2, 1]·2⁻⁶ (finite values of a few units). */
std::vector<std::byte> random_blocks(DType t, int64_t n, std::mt19937& rng);

/** Devices under test: every registered device, or only KILN_DEVICE's when that is set. */
std::vector<Device*> devices_under_test();
/** A device id as a test-name suffix ("vulkan:0" -> "vulkan_0"). */
std::string device_test_name(const Device* d);
/** KILN_BACKEND_OPS_LONG=1: the long shape lists. */
bool long_mode();

}  // namespace kiln::test
