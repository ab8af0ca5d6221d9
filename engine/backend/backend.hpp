// The backend interface (ggml-style: a registry of backends, each owning devices that allocate
// buffers and execute bound graphs) and the registry. Implementations: reference/ (the reference,
// always present), cpu/ (the native CPU backend, always present) and vulkan/ (when built). The contract,
// op by op, is docs/backend.md.
//
//   Registry ── Backend ("reference", "cpu", "vulkan") ── Device ── Buffer
//                                              └── supports_op(node), limits(), copy(regions)
//                                              └── prepare(graph) → Executable; submit / wait
#pragma once

#include <kiln/kiln_plugin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/tensor.hpp"
#include "core/bytes.hpp"
#include "core/error.hpp"

namespace kiln::backend {

class Device;

// ------------------------------------------------------------------------------------------------
// Errors. Messages start with "[backend <name>]" and say what to do.

class BackendError : public HostError {
 public:
  enum class Kind { unsupported, out_of_memory, device, invalid };
  BackendError(Kind kind, const std::string& message) : HostError(message), kind_(kind) {}
  Kind kind() const { return kind_; }

 private:
  Kind kind_;
};

// ------------------------------------------------------------------------------------------------
// Graphs as backends see them: ops over tensors already placed in buffers, executed in order.

class Buffer;

/** A device-side copy, or a zero-fill when `src` is null. Offsets and sizes in bytes. */
struct CopyRegion {
  Buffer* src = nullptr;
  size_t src_offset = 0;
  Buffer* dst = nullptr;
  size_t dst_offset = 0;
  size_t bytes = 0;
};

struct Node {
  kiln_op op = KILN_OP_NONE;
  kiln_op_params params{};
  uint32_t n_src = 0;
  std::array<TensorRef, KILN_OP_MAX_SRCS> src{};
  TensorRef dst;
  std::string name;  ///< for errors and profiles ("blk.3.attn_q"); may be empty
};

/**
 * A bound graph. Nodes run in order; a node may read anything an earlier node wrote (backends
 * insert the barriers). SET_ROWS, CONV1D_CAUSAL and GATED_DELTA also write a source in place
 * (ops.hpp: op_writes_src). Buffers outlive the executables prepared from it.
 */
struct BoundGraph {
  std::vector<Node> nodes;
  /**
   * Copies run after the nodes, in the same run: results into host-visible memory the host then
   * reads without a transfer of its own (which would queue behind later submissions).
   */
  std::vector<CopyRegion> copies_after;
};

// ------------------------------------------------------------------------------------------------
// Devices and buffers.

enum class DeviceKind { cpu, discrete_gpu, integrated_gpu, software_gpu /* lavapipe */ };
const char* device_kind_name(DeviceKind k);

struct DeviceInfo {
  std::string backend;  ///< "reference", "cpu", "vulkan"
  std::string name;     ///< "cpu (avx512)", "cpu reference", "llvmpipe (LLVM 15.0.6, 256 bits)", "NVIDIA H100"
  std::string id;       ///< registry spec: "cpu", "reference", "vulkan:0"
  DeviceKind kind = DeviceKind::cpu;
  std::string driver;  ///< driver / API version, free text
};

struct MemoryInfo {
  uint64_t total = 0;
  uint64_t free = 0;  ///< best estimate now
};

/** What a buffer is for; lets a device pick memory types. */
enum class BufferUsage {
  weights,      ///< uploaded once, read by kernels
  activations,  ///< graph intermediates and inputs/outputs, re-uploaded per step
  state,        ///< KV cache and recurrent state, long-lived and written by kernels
  inputs,       ///< batch inputs the host rewrites every step and kernels read (host-visible where
                ///< the device can, so upload() is a plain copy that does not wait for the device)
  readback,     ///< results a graph copies out for the host (host-visible where the device can)
};

/**
 * Device memory. Sub-allocation of large device allocations is the device's business; a Buffer
 * is what callers see. Tensors live at offsets inside buffers (graph arenas place many in one).
 */
class Buffer {
 public:
  virtual ~Buffer() = default;
  virtual Device& device() const = 0;
  virtual size_t size() const = 0;
  /** Synchronous copies; throw BackendError(invalid) for ranges outside the buffer. */
  virtual void upload(size_t offset, const void* src, size_t bytes) = 0;
  virtual void download(size_t offset, void* dst, size_t bytes) const = 0;
  /**
   * Uploads one weight tensor's data of `dtype`. A device may store it in the form its kernels
   * read fastest, provided every op then reads the values it would read from upload()'s copy
   * (Vulkan: f16 subnormals flushed to zero, which its kernels do anyway, and the range marked
   * for the f16 matmul path that skips those checks). download() returns the stored form.
   */
  virtual void upload_weights(size_t offset, const void* src, size_t bytes, DType dtype) {
    (void)dtype;
    upload(offset, src, bytes);
  }
  /** (optional) A host pointer to the contents when the memory is host-visible and coherent.
   *  Not for rewriting weights stored by upload_weights (their prepared form is tracked). */
  virtual void* host_ptr() { return nullptr; }
};

/** Answer of a capability query: ok, or why not (names the op, dtype and limit). */
struct Support {
  bool ok = true;
  std::string reason;
  static Support yes() { return {}; }
  static Support no(std::string why) { return {false, std::move(why)}; }
  explicit operator bool() const { return ok; }
};

/**
 * A bound graph made ready to run on one device, as many times as wanted, one run at a time: the
 * CPU keeps its checked node list, Vulkan its recorded command buffer, descriptor sets and small
 * per-graph tables. The buffers the graph names must outlive it; their contents may change between
 * runs (the model host rewrites the inputs of a cached graph every step).
 */
/** What one run of an executable launches (the same every run). */
struct ExecStats {
  uint32_t kernels = 0;   ///< Vulkan: dispatches; CPU devices: nodes run
  uint32_t barriers = 0;  ///< Vulkan: pipeline barriers between dispatches (0 on CPU devices)
};

class Executable {
 public:
  virtual ~Executable() = default;
  virtual ExecStats stats() const { return {}; }
};

/** What one step may hold on this device, for schedulers (the model host folds these in). */
struct DeviceLimits {
  uint32_t max_batch_seqs = UINT32_MAX;      ///< sequences in one ATTENTION or chunked GATED_DELTA op
  uint32_t max_head_dim = UINT32_MAX;        ///< ATTENTION key / value head dims
  uint32_t max_attention_keys = UINT32_MAX;  ///< keys one query may attend to (for the block size asked)
};

class Device {
 public:
  virtual ~Device() = default;
  virtual const DeviceInfo& info() const = 0;
  virtual MemoryInfo memory() const = 0;
  /** Allocates `bytes` (> 0); throws BackendError(out_of_memory) saying asked vs free. */
  virtual std::unique_ptr<Buffer> allocate(size_t bytes, BufferUsage usage) = 0;
  /**
   * (optional) Wraps host memory (e.g. an mmap'ed weights file) without copying; `ptr` stays valid
   * for the buffer's life. nullptr when the device cannot import: the caller allocates and uploads.
   */
  virtual std::unique_ptr<Buffer> import_host(void* ptr, size_t bytes) {
    (void)ptr, (void)bytes;
    return nullptr;
  }
  /** Whether this device can run `node` (op, dtypes and shapes of its sources and result). */
  virtual Support supports_op(const Node& node) const = 0;
  /** Limits of this device for caches of `block_tokens` tokens per block. */
  virtual DeviceLimits limits(uint32_t block_tokens) const {
    (void)block_tokens;
    return {};
  }

  /**
   * Checks every node (supports_op; every buffer on this device) and prepares the graph for
   * repeated runs. Throws BackendError: unsupported or invalid, before anything runs.
   */
  virtual std::unique_ptr<Executable> prepare(const BoundGraph& graph) = 0;
  /**
   * Starts a run of `exe` after everything submitted to this device before (runs, copies) and
   * returns without waiting. One run of an executable at a time: wait() before submitting it again.
   * Throws BackendError(device) once the device is lost.
   */
  virtual void submit(Executable& exe) = 0;
  /**
   * Waits for the last run of `exe` to finish. Throws BackendError: device (lost, timeout) or
   * invalid (a kernel reported bad ids or slots). Returns at once when it was not submitted.
   */
  virtual void wait(Executable& exe) = 0;
  /**
   * Device-side copies and zero-fills, run after everything submitted before and before anything
   * submitted after; returns without waiting (a later wait() or sync() sees any failure). Regions
   * must not overlap one another.
   */
  virtual void copy(const std::vector<CopyRegion>& regions) = 0;
  /** Waits until everything submitted so far has finished. */
  virtual void sync() = 0;

  /** prepare(), submit() and wait(): runs the graph once. */
  void compute(const BoundGraph& graph) {
    auto exe = prepare(graph);
    submit(*exe);
    wait(*exe);
  }
};

/** One API ("reference", "cpu", "vulkan") and the devices it found. */
class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;
  virtual std::vector<Device*> devices() = 0;
};

// ------------------------------------------------------------------------------------------------
// Registry.

struct Selection {
  /** "" or "auto": a hardware GPU (discrete > integrated), else the native CPU backend; software
      GPUs (lavapipe) and the reference backend only when named. Else an id ("cpu", "reference",
      "vulkan:1"), a backend name ("vulkan") or a substring of a device name. The environment
      variable KILN_DEVICE overrides it. The choice and its reason are logged. */
  std::string device;
  /** With "auto": use the CPU backend when no hardware GPU exists (else that is an error). */
  bool allow_cpu_fallback = false;
};

class Registry {
 public:
  /** The process-wide registry: the CPU backend plus every backend compiled in (Vulkan). */
  static Registry& instance();

  void add(std::unique_ptr<Backend> backend);
  std::vector<Backend*> backends() const;
  std::vector<Device*> devices() const;
  /** A device by id / backend name / name substring (see Selection); nullptr when none matches. */
  Device* find(std::string_view spec) const;
  /** Picks a device; throws HostError listing the devices when none fits. */
  Device& select(const Selection& selection) const;
  /** The CPU reference device (always present): the oracle of the op tests. */
  Device& reference() const;
  /** The native (SIMD) CPU device (always present). */
  Device& cpu() const;

 private:
  std::vector<std::unique_ptr<Backend>> backends_;
};

// ------------------------------------------------------------------------------------------------
// Helpers for implementations and callers.

/** "ATTENTION(q f32[7, 4, 32], k f16[...], ...) -> f32[...]" for messages. */
std::string describe(const Node& node);
/** Throws BackendError(unsupported) "[backend X] op ... is not supported on device ...: reason". */
[[noreturn]] void throw_unsupported(const Device& device, const Node& node, std::string_view reason);
/** Throws BackendError(out_of_memory) "[backend X] out of memory on ...: asked N, free M". */
[[noreturn]] void throw_out_of_memory(const Device& device, uint64_t asked, uint64_t free);
/** Calls supports_op on every node and throws for the first refusal. */
void check_supported(const Device& device, const BoundGraph& graph);

/**
 * Registration hook of the Vulkan backend: defined by engine/backend/vulkan (target
 * kiln_backend_vulkan) and called by Registry::instance() when that library is built
 * (KILN_HAVE_VULKAN). Adds nothing (and logs why) when no loader or device exists.
 */
void register_vulkan_backend(Registry& registry);

}  // namespace kiln::backend
