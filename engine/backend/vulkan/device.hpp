// kiln's backend::Device / Buffer / Backend on Vulkan. prepare() records a whole bound graph into
// one command buffer (barriers only on overlapping read/write ranges) that submit() runs as often
// as asked, each run signalling its own fence; wait() has a finite timeout. With validation
// enabled (KILN_VULKAN_VALIDATION=1) any layer message during a run is an error, so the op harness
// proves "zero validation messages" by passing.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/vulkan/command.hpp"
#include "backend/vulkan/context.hpp"
#include "backend/vulkan/kernels.hpp"
#include "backend/vulkan/memory.hpp"
#include "backend/vulkan/pipeline.hpp"
#include "backend/vulkan/weight_prep.hpp"

namespace kiln::vk {

class VulkanDevice;

/**
 * Device-local scratch for kernels (the chunked delta rule's per-chunk terms, at most 256 MiB),
 * one per device shared by every executable: the queue runs executables one after another, each
 * starting with a barrier, so one buffer serves them all, and cached executables do not each keep
 * their own (memory the model host's budget does not count). A larger request makes a new one; the
 * executables recorded with a smaller one keep it alive until they go.
 */
struct SharedScratch {
  SharedScratch(VulkanDevice& dev, Allocation a) : dev(dev), alloc(a) {}
  ~SharedScratch();
  VulkanDevice& dev;
  Allocation alloc;
};

/**
 * Device memory one executable's kernels need besides their tensors: small tables (RoPE
 * frequencies), freed with the executable, and a hold on the device's shared scratch.
 */
class GraphTemps {
 public:
  GraphTemps(VulkanDevice& dev, Allocator& mem) : dev_(dev), mem_(mem) {}
  ~GraphTemps() { release(); }
  GraphTemps(const GraphTemps&) = delete;
  GraphTemps& operator=(const GraphTemps&) = delete;
  /** Host-visible copy of `bytes` of `data`. */
  const Allocation& upload(const void* data, size_t bytes);
  /** The device's shared scratch, at least `bytes`; throws HostError when the memory is not there. */
  const Allocation& scratch(size_t bytes);
  void release();
  /** After a lost device: the memory may still be in use, so it is never released. */
  void leak() { temps_.clear(); }

 private:
  VulkanDevice& dev_;
  Allocator& mem_;
  std::deque<Allocation> temps_;
  std::vector<std::shared_ptr<SharedScratch>> scratch_;  ///< held while this executable lives
};

class VulkanBuffer final : public backend::Buffer {
 public:
  VulkanBuffer(VulkanDevice& dev, Allocation a, size_t size) : dev_(dev), alloc_(a), size_(size) {}
  ~VulkanBuffer() override;
  backend::Device& device() const override;
  size_t size() const override { return size_; }
  void upload(size_t offset, const void* src, size_t bytes) override;
  void download(size_t offset, void* dst, size_t bytes) const override;
  /** f16: stored with subnormals flushed; the range is then "clean" unless it holds inf/NaN. */
  void upload_weights(size_t offset, const void* src, size_t bytes, DType dtype) override;
  void* host_ptr() override { return alloc_.mapped; }
  const Allocation& allocation() const { return alloc_; }
  /** Whether [offset, offset + bytes) holds f16 weights with neither subnormals nor inf/NaN (set by
   *  upload_weights; cleared by upload() and by kernels writing there): matmul.comp's CLEAN path. */
  bool half_clean(size_t offset, size_t bytes) const;
  /** A kernel is about to write [offset, offset + bytes). */
  void written(size_t offset, size_t bytes);

 private:
  void check_range(const char* what, size_t offset, size_t bytes) const;

  VulkanDevice& dev_;
  Allocation alloc_;
  size_t size_;
  mutable std::mutex clean_mu_;
  RangeSet clean_;
};

class VulkanDevice final : public backend::Device {
 public:
  /** index < 0: the id uses the physical device's index. */
  VulkanDevice(const ContextOptions& opts, int index = -1);
  ~VulkanDevice() override;

  const backend::DeviceInfo& info() const override { return info_; }
  backend::MemoryInfo memory() const override;
  std::unique_ptr<backend::Buffer> allocate(size_t bytes, backend::BufferUsage usage) override;
  std::unique_ptr<backend::Buffer> import_host(void* ptr, size_t bytes) override;
  backend::Support supports_op(const backend::Node& node) const override;
  backend::DeviceLimits limits(uint32_t block_tokens) const override;
  std::unique_ptr<backend::Executable> prepare(const backend::BoundGraph& graph) override;
  void submit(backend::Executable& exe) override;
  void wait(backend::Executable& exe) override;
  void copy(const std::vector<backend::CopyRegion>& regions) override;
  void sync() override;

  Context& context() { return *ctx_; }
  Allocator& allocator() { return *mem_; }
  Pipelines& pipelines() { return *pipes_; }
  const KernelPolicy& policy() const { return policy_; }
  /** True after a submit timed out: work may still run, compute() refuses, buffers are not freed. */
  bool lost() const { return !lost_reason().empty(); }
  /** Validation messages so far (0 when validation is off). */
  uint64_t validation_messages() const { return ctx_->validation_messages(); }
  bool validation_enabled() const { return ctx_->validation_enabled(); }
  /** The KILN_PROFILE=1 per-op table so far (empty when profiling is off). */
  std::string profile_table() const;
  /** Barriers / dispatches recorded by the last prepare() (tests of barrier placement). */
  size_t last_barriers() const { return last_barriers_; }
  size_t last_dispatches() const { return last_dispatches_; }
  /** Copies between device and host through a staging buffer when memory is not mappable. */
  void transfer(const Allocation& a, size_t offset, void* host, size_t bytes, bool to_device);
  /** The shared scratch (SharedScratch), at least `bytes`. */
  std::shared_ptr<SharedScratch> shared_scratch(size_t bytes);
  /** A recorder for a new recording: an idle one kept from a destroyed executable, or a new one. */
  std::unique_ptr<Recorder> take_recorder(bool profiled);
  /** Takes back the recorder of a destroyed executable (kept until the device idles when lost). */
  void return_recorder(std::unique_ptr<Recorder> rec);

 private:
  class Executable;
  /** Throws BackendError(invalid) for a region outside its buffers or on another device. */
  void check_regions(const std::vector<backend::CopyRegion>& regions) const;
  void record_copies(Recorder& rec, const std::vector<backend::CopyRegion>& regions);
  /** Recycles the recorders of copies that have finished (with `wait`: waits for all of them). */
  void reap_copies(bool wait);
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Allocator> mem_;
  std::unique_ptr<Pipelines> pipes_;
  std::unique_ptr<Profiler> profiler_;
  std::unique_ptr<Recorder> xfer_;
  std::vector<std::unique_ptr<Recorder>> zombies_;                 ///< timed out: destroyed only after the device idles
  std::vector<std::unique_ptr<Recorder>> spare_, spare_profiled_;  ///< idle recorders to reuse
  std::vector<std::unique_ptr<Recorder>> copies_;                  ///< submitted copy() buffers not yet recycled
  std::weak_ptr<SharedScratch> scratch_;                           ///< the current shared scratch
  KernelPolicy policy_;
  backend::DeviceInfo info_;
  std::mutex record_mu_, xfer_mu_, pool_mu_, copy_mu_, scratch_mu_;
  size_t last_barriers_ = 0, last_dispatches_ = 0;
  uint64_t timeout_ns_ = 0;  ///< fence waits (fence_timeout_ns, read when the device is made)
  /** Why the device is unusable (a timed-out submit), empty when fine. compute() and transfers
   *  (each under its own mutex) both read and set it. */
  std::string lost_reason() const;
  void set_lost(const std::string& why);
  /** Throws BackendError(device) once the device is lost. */
  void check_not_lost() const;
  mutable std::mutex lost_mu_;
  std::string lost_;
};

}  // namespace kiln::vk
