// The CPU device: host-memory buffers, capability checks and the op dispatch.
#include "backend/reference/reference_backend.hpp"

#include <fmt/format.h>
#include <tbb/task_arena.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <new>
#include <thread>
#include <utility>

#include "backend/ops.hpp"
#include "backend/reference/common.hpp"
#include "backend/reference/kernels.hpp"

namespace kiln::backend {
namespace {

constexpr size_t kAlign = 64;

class CpuBuffer final : public Buffer {
 public:
  CpuBuffer(Device& device, void* data, size_t size, bool owned)
      : device_(device), data_(data), size_(size), owned_(owned) {}
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

bool is_cache_dtype(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || is_kv_quantized(t);
}

/** A checked node list; `ticket` counts its runs so wait() knows which one it waits for. */
struct CpuExecutable final : Executable {
  ExecStats stats() const override { return {static_cast<uint32_t>(graph.nodes.size()), 0}; }
  BoundGraph graph;
  uint64_t ticket = 0;  ///< the worker's job number of the last submit (0: never submitted)
  std::exception_ptr error;
};

/**
 * Runs submitted jobs (graph runs, copies) in order on one thread, so the caller's thread goes on
 * while the kernels run (their TBB loops use the other cores). Started on the first submit. The
 * kernels' parallel loops run in an arena of KILN_CPU_THREADS threads (default: every core); 1
 * runs them on the worker alone (ThreadSanitizer then sees only kiln's own threads).
 */
class Worker {
 public:
  Worker() {
    if (const char* env = std::getenv("KILN_CPU_THREADS"); env && std::atoi(env) > 0) threads_ = std::atoi(env);
  }
  ~Worker() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  /** Queues `job`; returns its ticket. */
  uint64_t push(std::function<void()> job) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    queue_.push_back(std::move(job));
    const uint64_t t = ++pushed_;
    cv_.notify_all();
    return t;
  }
  /** Waits until job `ticket` (and every job before it) has run. */
  void wait(uint64_t ticket) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_ >= ticket; });
  }
  void sync() { wait(pushed()); }
  uint64_t pushed() {
    std::lock_guard<std::mutex> lock(mu_);
    return pushed_;
  }

 private:
  void loop() {
    tbb::task_arena arena(threads_ > 0 ? threads_ : tbb::task_arena::automatic, 1);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      std::function<void()> job = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      arena.execute(job);  // jobs catch their own exceptions
      lock.lock();
      ++done_;
      done_cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::function<void()>> queue_;
  uint64_t pushed_ = 0, done_ = 0;
  bool stop_ = false;
  int threads_ = 0;
  std::thread thread_;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const HostDeviceSpec& spec) : run_(spec.run) {
    info_.backend = spec.backend;
    info_.name = spec.name;
    info_.id = spec.id;
    info_.kind = DeviceKind::cpu;
    info_.driver = fmt::format("{}, {} hardware threads", spec.driver, std::max(1L, sysconf(_SC_NPROCESSORS_ONLN)));
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
      const bool cache_operand =
          (n.op == KILN_OP_SET_ROWS && i == 0) || (n.op == KILN_OP_ATTENTION && (i == 1 || i == 2));
      if (weight_operand ? !is_weight_dtype(t) : cache_operand ? !is_cache_dtype(t) : false)
        return Support::no(fmt::format("{} source {} has no CPU kernel", dtype_name(t), i));
    }
    return Support::yes();
  }
  std::unique_ptr<Executable> prepare(const BoundGraph& graph) override {
    check_supported(*this, graph);
    for (const Node& n : graph.nodes) {
      for (uint32_t i = 0; i < n.n_src; ++i) check_ref(n, n.src[i]);
      check_ref(n, n.dst);
    }
    check_regions(graph.copies_after);
    auto exe = std::make_unique<CpuExecutable>();
    exe->graph = graph;
    return exe;
  }
  void submit(Executable& e) override {
    auto& exe = static_cast<CpuExecutable&>(e);
    if (exe.ticket)
      throw BackendError(BackendError::Kind::invalid,
                         "[backend cpu] an executable was submitted again before its last run was waited for");
    exe.error = nullptr;
    exe.ticket = worker_.push([&exe, run = run_] {
      try {
        for (const Node& n : exe.graph.nodes) run(n);
        run_copies(exe.graph.copies_after);
      } catch (...) {
        exe.error = std::current_exception();
      }
    });
  }
  void wait(Executable& e) override {
    auto& exe = static_cast<CpuExecutable&>(e);
    if (!exe.ticket) return;
    worker_.wait(exe.ticket);
    exe.ticket = 0;
    if (exe.error) std::rethrow_exception(std::exchange(exe.error, nullptr));
  }
  void copy(const std::vector<CopyRegion>& regions) override {
    check_regions(regions);
    worker_.push([regions] { run_copies(regions); });
  }
  void sync() override { worker_.sync(); }

  void check_regions(const std::vector<CopyRegion>& regions) const {
    for (const CopyRegion& r : regions) {
      for (Buffer* b : {r.src, r.dst})
        if (b && (&b->device() != this || !b->host_ptr()))
          throw BackendError(BackendError::Kind::invalid, "[backend cpu] copy: a buffer lives on another device");
      if (!r.dst || r.dst_offset > r.dst->size() || r.bytes > r.dst->size() - r.dst_offset ||
          (r.src && (r.src_offset > r.src->size() || r.bytes > r.src->size() - r.src_offset)))
        throw BackendError(BackendError::Kind::invalid,
                           fmt::format("[backend cpu] copy of {} bytes outside its buffers", r.bytes));
    }
  }
  static void run_copies(const std::vector<CopyRegion>& regions) {
    for (const CopyRegion& r : regions) {
      auto* dst = static_cast<std::byte*>(r.dst->host_ptr()) + r.dst_offset;
      if (r.src)
        std::memmove(dst, static_cast<const std::byte*>(r.src->host_ptr()) + r.src_offset, r.bytes);
      else
        std::memset(dst, 0, r.bytes);
    }
  }
  void check_ref(const Node& n, const TensorRef& t) const {
    if (!t.buffer) reference::fail(n, "a tensor has no buffer");
    if (&t.buffer->device() != this || !t.buffer->host_ptr())
      reference::fail(n, fmt::format("a tensor lives on device '{}', not the CPU", t.buffer->device().info().name));
    if (t.offset > t.buffer->size() || t.desc.bytes() > t.buffer->size() - t.offset)
      reference::fail(
          n, fmt::format("{} at offset {} overruns its {}-byte buffer", t.desc.str(), t.offset, t.buffer->size()));
  }
  DeviceInfo info_;
  void (*run_)(const Node&);
  Worker worker_;
};

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(const HostDeviceSpec& spec) : name_(spec.backend), device_(spec) {}
  std::string_view name() const override { return name_; }
  std::vector<Device*> devices() override { return {&device_}; }

 private:
  std::string name_;
  CpuDevice device_;
};

}  // namespace

std::unique_ptr<Backend> make_host_backend(const HostDeviceSpec& spec) {
  return std::make_unique<CpuBackend>(spec);
}

std::unique_ptr<Backend> make_reference_backend() {
  return make_host_backend({"reference", "reference", "cpu reference", "reference kernels", &reference::run_node});
}

namespace reference {

void run_node(const Node& n) {
  switch (n.op) {
    case KILN_OP_GET_ROWS:
      return run_get_rows(n);
    case KILN_OP_SET_ROWS:
      return run_set_rows(n);
    case KILN_OP_SLICE:
      return run_slice(n);
    case KILN_OP_CONCAT:
      return run_concat(n);
    case KILN_OP_MATMUL:
      return run_matmul(n);
    case KILN_OP_MOE_MATMUL:
      return run_moe_matmul(n);
    case KILN_OP_ADD:
    case KILN_OP_MUL:
      return run_binary(n);
    case KILN_OP_SCALE:
    case KILN_OP_SILU:
    case KILN_OP_GELU_TANH:
    case KILN_OP_SIGMOID:
    case KILN_OP_SOFTPLUS:
    case KILN_OP_SOFTCAP:
    case KILN_OP_EXP:
      return run_unary(n);
    case KILN_OP_RMS_NORM:
      return run_rms_norm(n);
    case KILN_OP_L2_NORM:
      return run_l2_norm(n);
    case KILN_OP_SOFTMAX:
      return run_softmax(n);
    case KILN_OP_ROPE:
      return run_rope(n);
    case KILN_OP_ATTENTION:
      return run_attention(n);
    case KILN_OP_CONV1D_CAUSAL:
      return run_conv1d(n);
    case KILN_OP_GATED_DELTA:
      return run_gated_delta(n);
    case KILN_OP_TOP_K:
      return run_top_k(n);
    case KILN_OP_MOE_WEIGHTS:
      return run_moe_weights(n);
    case KILN_OP_MOE_SUM:
      return run_moe_sum(n);
    default:
      fail(n, "no CPU kernel");
  }
}

}  // namespace reference

}  // namespace kiln::backend
