// kiln's backend::Device / Buffer / Backend on Vulkan. compute() records a whole bound graph into
// one command buffer (barriers only on overlapping read/write ranges) and waits with a finite
// timeout. With validation enabled (KILN_VULKAN_VALIDATION=1) any layer message during a
// compute() is an error, so the op harness proves "zero validation messages" by passing.
#pragma once

#include <deque>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.hpp"
#include "backend/vulkan/command.hpp"
#include "backend/vulkan/context.hpp"
#include "backend/vulkan/kernels.hpp"
#include "backend/vulkan/memory.hpp"
#include "backend/vulkan/pipeline.hpp"
#include "backend/vulkan/weight_prep.hpp"

namespace kiln::vk {

class VulkanDevice;

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
  void compute(const backend::BoundGraph& graph) override;

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
  /** Barriers / dispatches recorded by the last compute() (tests of barrier placement). */
  size_t last_barriers() const { return last_barriers_; }
  size_t last_dispatches() const { return last_dispatches_; }
  /** Copies between device and host through a staging buffer when memory is not mappable. */
  void transfer(const Allocation& a, size_t offset, void* host, size_t bytes, bool to_device);
  /** Host-visible copy of small per-op constants (RoPE frequencies), freed after compute(). */
  const Allocation& temp_upload(const void* data, size_t bytes);
  /** Device-local scratch of at least `bytes` for the kernels of one compute() (the chunked
   *  delta rule's per-chunk terms): one allocation shared by the graph's nodes, freed after it.
   *  Throws HostError when the memory is not there. */
  const Allocation& temp_scratch(size_t bytes);

 private:
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Allocator> mem_;
  std::unique_ptr<Pipelines> pipes_;
  std::unique_ptr<Profiler> profiler_;
  std::unique_ptr<Recorder> rec_, xfer_;
  std::unique_ptr<Recorder> zombie_;       ///< a timed-out recorder, destroyed only after the device idles
  std::unique_ptr<Recorder> xfer_zombie_;  ///< the same for a timed-out staging transfer
  std::deque<Allocation> temps_;
  const Allocation* scratch_ = nullptr;  ///< the largest temp_scratch of this compute (in temps_)
  Allocation flags_;  ///< 16 bytes of error flags kernels raise (bad ids / slots)
  KernelPolicy policy_;
  backend::DeviceInfo info_;
  std::mutex compute_mu_, xfer_mu_;
  size_t last_barriers_ = 0, last_dispatches_ = 0;
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
