// The CPU device: host-memory buffers, capability checks and the op dispatch.
#include "backend/cpu/cpu_backend.hpp"

#include "backend/cpu/common.hpp"
#include "backend/cpu/kernels.hpp"
#include "backend/ops.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdlib>
#include <new>

namespace kiln::backend {
namespace {

constexpr size_t kAlign = 64;

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(Device& device, void* data, size_t size, bool owned) : device_(device), data_(data), size_(size), owned_(owned) {}
  ~CpuBuffer() override {
    if (owned_) std::free(data_);
  }
  Device& device() const override { return device_; }
  size_t size() const override { return size_; }
  void upload(size_t offset, const void* src, size_t bytes) override {
    check(offset, bytes, "upload");
    if (bytes) std::memcpy(static_cast<std::byte*>(data_) + offset, src, bytes);
  }
  void download(size_t offset, void* dst, size_t bytes) const override {
    check(offset, bytes, "download");
    if (bytes) std::memcpy(dst, static_cast<const std::byte*>(data_) + offset, bytes);
  }
  void* host_ptr() override { return data_; }

 private:
  void check(size_t offset, size_t bytes, const char* what) const {
    if (offset > size_ || bytes > size_ - offset)
      throw BackendError(BackendError::Kind::invalid,
                         fmt::format("[backend cpu] {} of {} bytes at offset {} is outside the {}-byte buffer", what,
                                     bytes, offset, size_));
  }
  Device& device_;
  void* data_;
  size_t size_;
  bool owned_;
};

bool is_cache_dtype(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

class CpuDevice final : public Device {
 public:
  CpuDevice() {
    info_.backend = "cpu";
    info_.name = "cpu";
    info_.id = "cpu";
    info_.kind = DeviceKind::cpu;
    info_.driver = fmt::format("reference, {} hardware threads", std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
  }
  const DeviceInfo& info() const override { return info_; }
  MemoryInfo memory() const override {
    const long page = sysconf(_SC_PAGESIZE);
    MemoryInfo m;
    m.total = static_cast<uint64_t>(sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(page);
    m.free = static_cast<uint64_t>(sysconf(_SC_AVPHYS_PAGES)) * static_cast<uint64_t>(page);
    return m;
  }
  std::unique_ptr<Buffer> allocate(size_t bytes, BufferUsage) override {
    // More than the machine has cannot succeed; asking malloc anyway would trip sanitizers.
    if (bytes > memory().total) throw_out_of_memory(*this, bytes, memory().free);
    const size_t rounded = (std::max<size_t>(bytes, 1) + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded);
    if (!p) throw_out_of_memory(*this, bytes, memory().free);
    return std::make_unique<CpuBuffer>(*this, p, bytes, true);
  }
  std::unique_ptr<Buffer> import_host(void* ptr, size_t bytes) override {
    return std::make_unique<CpuBuffer>(*this, ptr, bytes, false);
  }
  Support supports_op(const Node& n) const override {
    if (!op_traits(n.op).name) return Support::no(fmt::format("unknown op {}", static_cast<unsigned>(n.op)));
    if (op_is_view(n.op)) return Support::no("RESHAPE is lowered to an alias and never executed");
    for (uint32_t i = 0; i < n.n_src; ++i) {
      const DType t = n.src[i].desc.dtype;
      const bool weight_operand = (n.op == KILN_OP_GET_ROWS && i == 0) || (n.op == KILN_OP_MATMUL && i == 1) ||
                                  (n.op == KILN_OP_MOE_MATMUL && i == 1);
      const bool cache_operand = (n.op == KILN_OP_SET_ROWS && i == 0) || (n.op == KILN_OP_ATTENTION && (i == 1 || i == 2));
      if (weight_operand ? !is_weight_dtype(t) : cache_operand ? !is_cache_dtype(t) : false)
        return Support::no(fmt::format("{} source {} has no CPU kernel", dtype_name(t), i));
    }
    return Support::yes();
  }
  void compute(const BoundGraph& graph) override {
    check_supported(*this, graph);
    for (const Node& n : graph.nodes) {
      for (uint32_t i = 0; i < n.n_src; ++i) check_ref(n, n.src[i]);
      check_ref(n, n.dst);
      run(n);
    }
  }

 private:
  void check_ref(const Node& n, const TensorRef& t) const {
    if (!t.buffer) cpu::fail(n, "a tensor has no buffer");
    if (&t.buffer->device() != this || !t.buffer->host_ptr())
      cpu::fail(n, fmt::format("a tensor lives on device '{}', not the CPU", t.buffer->device().info().name));
    if (t.offset > t.buffer->size() || t.desc.bytes() > t.buffer->size() - t.offset)
      cpu::fail(n, fmt::format("{} at offset {} overruns its {}-byte buffer", t.desc.str(), t.offset, t.buffer->size()));
  }
  static void run(const Node& n) {
    using namespace cpu;
    switch (n.op) {
      case KILN_OP_GET_ROWS: return run_get_rows(n);
      case KILN_OP_SET_ROWS: return run_set_rows(n);
      case KILN_OP_SLICE: return run_slice(n);
      case KILN_OP_CONCAT: return run_concat(n);
      case KILN_OP_MATMUL: return run_matmul(n);
      case KILN_OP_MOE_MATMUL: return run_moe_matmul(n);
      case KILN_OP_ADD:
      case KILN_OP_MUL: return run_binary(n);
      case KILN_OP_SCALE:
      case KILN_OP_SILU:
      case KILN_OP_GELU_TANH:
      case KILN_OP_SIGMOID:
      case KILN_OP_SOFTPLUS:
      case KILN_OP_SOFTCAP:
      case KILN_OP_EXP: return run_unary(n);
      case KILN_OP_RMS_NORM: return run_rms_norm(n);
      case KILN_OP_L2_NORM: return run_l2_norm(n);
      case KILN_OP_SOFTMAX: return run_softmax(n);
      case KILN_OP_ROPE: return run_rope(n);
      case KILN_OP_ATTENTION: return run_attention(n);
      case KILN_OP_CONV1D_CAUSAL: return run_conv1d(n);
      case KILN_OP_GATED_DELTA: return run_gated_delta(n);
      case KILN_OP_TOP_K: return run_top_k(n);
      case KILN_OP_MOE_WEIGHTS: return run_moe_weights(n);
      case KILN_OP_MOE_SUM: return run_moe_sum(n);
      default: fail(n, "no CPU kernel");
    }
  }
  DeviceInfo info_;
};

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::vector<Device*> devices() override { return {&device_}; }

 private:
  CpuDevice device_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend() { return std::make_unique<CpuBackend>(); }

}  // namespace kiln::backend
