#include "backend/vulkan/command.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"

namespace kiln::vk {

namespace {
constexpr uint32_t kSetsPerPool = 512;
}

uint64_t fence_timeout_ns(const Context& ctx) {
  double secs = ctx.info().is_lavapipe ? 600 : 60;
  if (const char* t = std::getenv("KILN_VULKAN_TIMEOUT_S"); t && *t) secs = std::atof(t);
  return static_cast<uint64_t>(secs * 1e9);
}

Recorder::Recorder(Context& ctx, Allocator& mem, Profiler* profiler, uint64_t timeout_ns)
    : ctx_(ctx), mem_(mem), profiler_(profiler), timeout_ns_(timeout_ns) {
  VkDevice dev = ctx.device();
  VkCommandPoolCreateInfo pi{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pi.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
  pi.queueFamilyIndex = ctx.queue_family();
  check(vkCreateCommandPool(dev, &pi, nullptr, &pool_), "vkCreateCommandPool");
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  check(vkAllocateCommandBuffers(dev, &ai, &cmd_), "vkAllocateCommandBuffers");
  VkFenceCreateInfo fi{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  check(vkCreateFence(dev, &fi, nullptr, &fence_), "vkCreateFence");
  if (profiler_ && ctx.info().timestamps) {
    query_capacity_ = 4096;
    VkQueryPoolCreateInfo qi{VK_STRUCTURE_TYPE_QUERY_POOL_CREATE_INFO};
    qi.queryType = VK_QUERY_TYPE_TIMESTAMP;
    qi.queryCount = query_capacity_;
    check(vkCreateQueryPool(dev, &qi, nullptr, &queries_), "vkCreateQueryPool");
  }
}

Recorder::~Recorder() {
  VkDevice dev = ctx_.device();
  if (recording_) vkEndCommandBuffer(cmd_);
  if (pending_ && !timed_out_) vkWaitForFences(dev, 1, &fence_, VK_TRUE, timeout_ns_);  // never free a running buffer
  for (VkDescriptorPool p : desc_pools_) vkDestroyDescriptorPool(dev, p, nullptr);
  if (queries_) vkDestroyQueryPool(dev, queries_, nullptr);
  vkDestroyFence(dev, fence_, nullptr);
  vkDestroyCommandPool(dev, pool_, nullptr);
}

void Recorder::begin() {
  if (recording_) return;
  if (pending_) wait();
  check(vkResetCommandBuffer(cmd_, 0), "vkResetCommandBuffer");
  for (VkDescriptorPool p : desc_pools_) vkResetDescriptorPool(ctx_.device(), p, 0);
  desc_pool_next_ = 0;
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  check(vkBeginCommandBuffer(cmd_, &bi), "vkBeginCommandBuffer");
  written_.clear();
  read_.clear();
  query_ops_.clear();
  query_count_ = 0;
  // Everything submitted to the queue before this buffer (other graphs, copies, staging transfers)
  // is in this barrier's first scope: the buffer's commands see their writes, and theirs its reads.
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                     VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
  if (queries_) {
    vkCmdResetQueryPool(cmd_, queries_, 0, query_capacity_);
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_TOP_OF_PIPE_BIT, queries_, query_count_++);
  }
  recording_ = true;
  dispatches_ = barriers_ = 0;
}

VkDescriptorSet Recorder::allocate_set(VkDescriptorSetLayout layout) {
  VkDescriptorSetAllocateInfo ai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
  ai.descriptorSetCount = 1;
  ai.pSetLayouts = &layout;
  VkDescriptorSet set = VK_NULL_HANDLE;
  while (desc_pool_next_ < desc_pools_.size()) {
    ai.descriptorPool = desc_pools_[desc_pool_next_];
    VkResult r = vkAllocateDescriptorSets(ctx_.device(), &ai, &set);
    if (r == VK_SUCCESS) return set;
    if (r != VK_ERROR_OUT_OF_POOL_MEMORY && r != VK_ERROR_FRAGMENTED_POOL) check(r, "vkAllocateDescriptorSets");
    ++desc_pool_next_;
  }
  VkDescriptorPoolSize sizes[2] = {{VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER, kSetsPerPool * 6},
                                   {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, kSetsPerPool * 4}};
  VkDescriptorPoolCreateInfo pi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
  pi.maxSets = kSetsPerPool;
  pi.poolSizeCount = 2;
  pi.pPoolSizes = sizes;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  check(vkCreateDescriptorPool(ctx_.device(), &pi, nullptr, &pool), "vkCreateDescriptorPool");
  desc_pools_.push_back(pool);
  desc_pool_next_ = desc_pools_.size() - 1;
  ai.descriptorPool = pool;
  check(vkAllocateDescriptorSets(ctx_.device(), &ai, &set), "vkAllocateDescriptorSets");
  return set;
}

void Recorder::hazard_barrier(std::span<const Range> reads, std::span<const Range> writes) {
  auto overlaps = [](const Range& a, const std::vector<Range>& set) {
    for (const Range& b : set)
      if (a.buffer == b.buffer && a.begin < b.end && b.begin < a.end) return true;
    return false;
  };
  bool need = false;
  for (const Range& r : reads) need = need || overlaps(r, written_);                         // RAW
  for (const Range& w : writes) need = need || overlaps(w, written_) || overlaps(w, read_);  // WAW, WAR
  if (need) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT;
    vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                         VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr,
                         0, nullptr);
    written_.clear();
    read_.clear();
    ++barriers_;
  }
  read_.insert(read_.end(), reads.begin(), reads.end());
  written_.insert(written_.end(), writes.begin(), writes.end());
}

void Recorder::dispatch(const Pipeline& p, std::span<const Arg> args, const void* push, uint32_t push_bytes,
                        uint32_t gx, uint32_t gy, uint32_t gz, const char* op) {
  if (!recording_) begin();
  if (args.size() != p.bindings.size())
    throw_error("[vulkan] internal: {} takes {} buffers, {} given", p.name, p.bindings.size(), args.size());
  if (push_bytes > Pipelines::kPushBytes) throw_error("[vulkan] internal: {} push constants too large", p.name);
  if (gx == 0 || gy == 0 || gz == 0) return;
  const DeviceInfo& d = ctx_.info();
  if (gy > d.max_groups[1] || gz > d.max_groups[2] || gx > d.max_groups[0])
    throw_error("[vulkan] internal: {} grid {}x{}x{} exceeds the device limit {}x{}x{}", p.name, gx, gy, gz,
                d.max_groups[0], d.max_groups[1], d.max_groups[2]);

  VkDescriptorSet set = allocate_set(p.set_layout);
  std::vector<VkWriteDescriptorSet> writes(args.size());
  std::vector<VkDescriptorBufferInfo> infos(args.size());
  std::vector<VkBufferView> views(args.size());
  std::vector<Range> rd, wr;
  for (size_t i = 0; i < args.size(); ++i) {
    const Arg& a = args[i];
    if (!a.alloc || !*a.alloc) throw_error("[vulkan] internal: {} binding {} has no buffer", p.name, i);
    VkWriteDescriptorSet& w = writes[i];
    w = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
    w.dstSet = set;
    w.dstBinding = static_cast<uint32_t>(i);
    w.descriptorCount = 1;
    if (p.bindings[i] == Bind::texel) {
      views[i] = mem_.view(*a.alloc, a.base, a.format);
      w.descriptorType = VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER;
      w.pTexelBufferView = &views[i];
    } else {
      infos[i] = {a.alloc->buffer, a.alloc->offset + a.base,
                  std::min<uint64_t>(a.alloc->size - a.base, d.max_storage_range)};
      w.descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
      w.pBufferInfo = &infos[i];
    }
    uint64_t b = a.alloc->offset + a.offset;
    Range r{a.alloc->buffer, b, b + (a.size ? a.size : a.alloc->size)};
    (a.write ? wr : rd).push_back(r);
  }
  vkUpdateDescriptorSets(ctx_.device(), static_cast<uint32_t>(writes.size()), writes.data(), 0, nullptr);
  hazard_barrier(rd, wr);
  vkCmdBindPipeline(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.pipeline);
  vkCmdBindDescriptorSets(cmd_, VK_PIPELINE_BIND_POINT_COMPUTE, p.layout, 0, 1, &set, 0, nullptr);
  if (push_bytes) vkCmdPushConstants(cmd_, p.layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, push_bytes, push);
  vkCmdDispatch(cmd_, gx, gy, gz);
  ++dispatches_;
  if (queries_ && query_count_ < query_capacity_) {
    vkCmdWriteTimestamp(cmd_, VK_PIPELINE_STAGE_BOTTOM_OF_PIPE_BIT, queries_, query_count_++);
    query_ops_.push_back(op ? std::string(op) : p.name);
  }
}

void Recorder::copy(const Allocation& src, uint64_t src_off, const Allocation& dst, uint64_t dst_off, uint64_t bytes) {
  if (!recording_) begin();
  if (!bytes) return;
  Range r{src.buffer, src.offset + src_off, src.offset + src_off + bytes};
  Range w{dst.buffer, dst.offset + dst_off, dst.offset + dst_off + bytes};
  hazard_barrier({&r, 1}, {&w, 1});
  VkBufferCopy c{src.offset + src_off, dst.offset + dst_off, bytes};
  vkCmdCopyBuffer(cmd_, src.buffer, dst.buffer, 1, &c);
}

void Recorder::copy_regions(const Allocation& src, const Allocation& dst, const std::vector<VkBufferCopy>& regions) {
  if (!recording_) begin();
  if (regions.empty()) return;
  uint64_t slo = UINT64_MAX, shi = 0, dlo = UINT64_MAX, dhi = 0;
  std::vector<VkBufferCopy> abs = regions;
  for (VkBufferCopy& c : abs) {
    slo = std::min(slo, c.srcOffset), shi = std::max(shi, c.srcOffset + c.size);
    dlo = std::min(dlo, c.dstOffset), dhi = std::max(dhi, c.dstOffset + c.size);
    c.srcOffset += src.offset;
    c.dstOffset += dst.offset;
  }
  Range r{src.buffer, src.offset + slo, src.offset + shi};
  Range w{dst.buffer, dst.offset + dlo, dst.offset + dhi};
  hazard_barrier({&r, 1}, {&w, 1});
  vkCmdCopyBuffer(cmd_, src.buffer, dst.buffer, static_cast<uint32_t>(abs.size()), abs.data());
}

void Recorder::fill_zero(const Allocation& dst, uint64_t off, uint64_t bytes) {
  if (!recording_) begin();
  if (!bytes) return;
  Range w{dst.buffer, dst.offset + off, dst.offset + off + bytes};
  hazard_barrier({}, {&w, 1});
  vkCmdFillBuffer(cmd_, dst.buffer, dst.offset + off, (bytes + 3) / 4 * 4, 0);
}

void Recorder::end() {
  if (!recording_) return;
  // Make device writes visible to the host (mapped reads after the wait).
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT;
  vkCmdPipelineBarrier(cmd_, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_PIPELINE_STAGE_HOST_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  recording_ = false;
  check(vkEndCommandBuffer(cmd_), "vkEndCommandBuffer");
}

void Recorder::submit() {
  if (recording_) throw_error("[vulkan] internal: a command buffer submitted while still recording");
  if (pending_) throw_error("[vulkan] internal: a command buffer submitted again before its last run was waited for");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cmd_;
  {
    std::lock_guard<std::mutex> lock(ctx_.queue_mutex());
    check(vkQueueSubmit(ctx_.queue(), 1, &si, fence_), "vkQueueSubmit");
  }
  pending_ = true;
}

bool Recorder::finished() const {
  return !pending_ || vkGetFenceStatus(ctx_.device(), fence_) == VK_SUCCESS;
}

void Recorder::wait() {
  if (!pending_) return;
  VkResult r = vkWaitForFences(ctx_.device(), 1, &fence_, VK_TRUE, timeout_ns_);
  if (r == VK_TIMEOUT) {
    timed_out_ = true;
    throw_error(
        "[vulkan] a command buffer of {} dispatches did not finish within {:.0f} s on '{}' (runaway kernel or "
        "a far too large shape; KILN_VULKAN_TIMEOUT_S raises the limit)",
        dispatches_, static_cast<double>(timeout_ns_) / 1e9, ctx_.info().name);
  }
  check(r, "vkWaitForFences");
  check(vkResetFences(ctx_.device(), 1, &fence_), "vkResetFences");
  pending_ = false;
  if (queries_ && profiler_ && query_count_ > 1) {
    std::vector<uint64_t> ts(query_count_);
    check(vkGetQueryPoolResults(ctx_.device(), queries_, 0, query_count_, ts.size() * 8, ts.data(), 8,
                                VK_QUERY_RESULT_64_BIT | VK_QUERY_RESULT_WAIT_BIT),
          "vkGetQueryPoolResults");
    uint64_t mask = ctx_.info().timestamp_valid_bits >= 64 ? ~0ull : ((1ull << ctx_.info().timestamp_valid_bits) - 1);
    for (uint32_t i = 1; i < query_count_; ++i) profiler_->add(query_ops_[i - 1], (ts[i] - ts[i - 1]) & mask);
  }
}

void Recorder::submit_and_wait() {
  if (!recording_) return;
  end();
  submit();
  wait();
}

void Profiler::add(const std::string& op, uint64_t ticks) {
  const double ns = static_cast<double>(ticks) * period_ns_;
  for (Row& r : ops_)
    if (r.op == op) {
      ++r.calls;
      r.ns += ns;
      r.samples.push_back(static_cast<float>(ns));
      return;
    }
  ops_.push_back({op, 1, ns, {static_cast<float>(ns)}});
}

std::string Profiler::table() const {
  std::vector<Row> rows = ops_;
  std::sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ns > b.ns; });
  double total = 0;
  for (const Row& r : rows) total += r.ns;
  // The mean includes each pipeline's first call, which on lavapipe holds its JIT; the median
  // is the steady-state cost of a call.
  std::string out = fmt::format("{:<40} {:>8} {:>12} {:>12} {:>12} {:>7}\n", "op (vulkan, KILN_PROFILE=1)", "calls",
                                "total ms", "mean us", "median us", "share");
  for (Row& r : rows) {
    std::nth_element(r.samples.begin(), r.samples.begin() + static_cast<std::ptrdiff_t>(r.samples.size() / 2),
                     r.samples.end());
    const double median = r.samples.empty() ? 0.0 : r.samples[r.samples.size() / 2];
    out += fmt::format("{:<40} {:>8} {:>12.3f} {:>12.1f} {:>12.1f} {:>6.1f}%\n", r.op, r.calls, r.ns / 1e6,
                       r.ns / 1e3 / static_cast<double>(r.calls), median / 1e3, total > 0 ? 100 * r.ns / total : 0.0);
  }
  out += fmt::format("{:<40} {:>8} {:>12.3f}\n", "total", "", total / 1e6);
  return out;
}

}  // namespace kiln::vk
