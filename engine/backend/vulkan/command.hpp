// Command recording for one graph: dispatches go into one command buffer that can be submitted any
// number of times (a cached graph's executable); a barrier is inserted only when a dispatch touches
// a range written (or, for writes, read) since the last barrier, and one at the start orders the
// buffer after everything submitted before it. Descriptor sets come from per-recorder pools, kept
// as long as the recording is. Each submit signals the recorder's fence; waits have a finite
// timeout. With KILN_PROFILE=1 a timestamp follows each dispatch and the per-op times accumulate
// into a table printed at exit.
#pragma once

#include <vulkan/vulkan.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/vulkan/memory.hpp"
#include "backend/vulkan/pipeline.hpp"

namespace kiln::vk {

/** One kernel argument: an allocation bound from byte `base` (a multiple of 256) through a texel
 *  view of `format` or as a storage buffer; [offset, offset+size) is the range it touches. */
struct Arg {
  const Allocation* alloc = nullptr;
  VkFormat format = VK_FORMAT_UNDEFINED;  ///< texel bindings only
  bool write = false;
  uint64_t offset = 0, size = 0;  ///< hazard range within the allocation; size 0 = all of it
  uint64_t base = 0;              ///< binding / view start within the allocation
};

class Profiler;

/** How long a wait for a submitted buffer may take: KILN_VULKAN_TIMEOUT_S, else 600 s on lavapipe
 *  (no TDR on a CPU device: a runaway kernel just blocks), 60 s on GPUs. */
uint64_t fence_timeout_ns(const Context& ctx);

class Recorder {
 public:
  Recorder(Context& ctx, Allocator& mem, Profiler* profiler, uint64_t timeout_ns);
  ~Recorder();
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  /** Starts a new recording (resets the command buffer and descriptor pools). */
  void begin();
  /** Records one dispatch of `groups` workgroups (x may exceed the device limit: it is folded into y). */
  void dispatch(const Pipeline& p, std::span<const Arg> args, const void* push, uint32_t push_bytes, uint32_t gx,
                uint32_t gy = 1, uint32_t gz = 1, const char* op = nullptr);
  void copy(const Allocation& src, uint64_t src_off, const Allocation& dst, uint64_t dst_off, uint64_t bytes);
  /** Regions' offsets are relative to the allocations; they must not overlap each other. */
  void copy_regions(const Allocation& src, const Allocation& dst, const std::vector<VkBufferCopy>& regions);
  void fill_zero(const Allocation& dst, uint64_t off, uint64_t bytes);
  /** Ends the recording; the command buffer may then be submitted any number of times. */
  void end();
  /** Submits the recorded buffer, signalling the fence. One submission at a time. */
  void submit();
  /** Waits for the last submit (timeout KILN_VULKAN_TIMEOUT_S, default 600 s on lavapipe, 60 s on
   *  GPUs); throws HostError on a timeout (timed_out() is then true). No-op when none is pending. */
  void wait();
  /** Whether a submit has not been waited for yet. */
  bool pending() const { return pending_; }
  /** Whether the last submit has finished (does not wait). */
  bool finished() const;
  /** end(), submit() and wait(). */
  void submit_and_wait();
  bool recording() const { return recording_; }
  bool profiled() const { return profiler_ != nullptr; }
  /** A submit timed out: the command buffer may still run; destroy only after the device idles. */
  bool timed_out() const { return timed_out_; }
  size_t dispatches() const { return dispatches_; }
  size_t barriers() const { return barriers_; }

 private:
  struct Range {
    VkBuffer buffer;
    uint64_t begin, end;
  };
  void hazard_barrier(std::span<const Range> reads, std::span<const Range> writes);
  VkDescriptorSet allocate_set(VkDescriptorSetLayout layout);

  Context& ctx_;
  Allocator& mem_;
  Profiler* profiler_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkCommandBuffer cmd_ = VK_NULL_HANDLE;
  VkFence fence_ = VK_NULL_HANDLE;
  std::vector<VkDescriptorPool> desc_pools_;
  size_t desc_pool_next_ = 0;
  VkQueryPool queries_ = VK_NULL_HANDLE;
  uint32_t query_capacity_ = 0, query_count_ = 0;
  std::vector<std::string> query_ops_;
  std::vector<Range> written_, read_;
  bool recording_ = false, timed_out_ = false, pending_ = false;
  size_t dispatches_ = 0, barriers_ = 0;
  uint64_t timeout_ns_ = 0;
};

/** Per-op GPU time from timestamp queries (KILN_PROFILE=1). */
class Profiler {
 public:
  explicit Profiler(double period_ns) : period_ns_(period_ns) {}
  void add(const std::string& op, uint64_t ticks);
  std::string table() const;
  bool empty() const { return ops_.empty(); }

 private:
  struct Row {
    std::string op;
    uint64_t calls = 0;
    double ns = 0;
    std::vector<float> samples;  ///< per call, ns: the median hides the first call's lavapipe JIT
  };
  double period_ns_;
  std::vector<Row> ops_;
};

}  // namespace kiln::vk
