#include "backend/vulkan/device.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string_view>
#include <vector>

#include "backend/ops.hpp"
#include "backend/vulkan/ops/ops.hpp"
#include "core/log.hpp"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_VK_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define KILN_VK_ASAN 1
#endif
#if defined(KILN_VK_ASAN)
// Mesa's Vulkan drivers leak small objects that no kiln frame allocates: lavapipe 48 bytes per
// pipeline, and every driver the loader probes (libvulkan_intel.so, libvulkan_radeon.so, ... on a
// host without that hardware) a little while enumerating devices. The drivers are built without
// frame pointers, so such a stack ends in the driver's own frame and a pattern naming the Mesa
// driver modules (libvulkan_<driver>.so, and Mesa's device-select layer) matches exactly those
// leaks, never one allocated by kiln's code. Context::list_devices keeps the drivers mapped for the
// process, so the module names are known when LeakSanitizer reports. LeakSanitizer reads this hook
// in every binary that links the Vulkan backend.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:libvulkan_\nleak:libVkLayer_MESA_\nleak:libVkLayer_khronos_validation.so\n";
}
#endif

namespace kiln::vk {

using backend::BackendError;

namespace {

bool profiling() {
  const char* p = std::getenv("KILN_PROFILE");
  return p && *p && std::strcmp(p, "0") != 0;
}

backend::DeviceKind kind_of(const DeviceInfo& d) {
  switch (d.type) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU:
      return backend::DeviceKind::discrete_gpu;
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU:
      return backend::DeviceKind::integrated_gpu;
    default:
      return backend::DeviceKind::software_gpu;
  }
}

// Registry devices are never destroyed, so KILN_PROFILE tables are printed from atexit.
std::mutex g_profiled_mu;
std::vector<VulkanDevice*> g_profiled;

void print_profiles_at_exit() {
  std::lock_guard<std::mutex> lock(g_profiled_mu);
  for (VulkanDevice* d : g_profiled) {
    std::string t = d->profile_table();
    if (!t.empty()) fmt::print(stderr, "[vulkan] per-op GPU time on '{}':\n{}", d->info().name, t);
  }
  g_profiled.clear();
}

}  // namespace

// ------------------------------------------------------------------------------------------------

VulkanBuffer::~VulkanBuffer() {
  // After a timed-out submit the memory may still be in use by the device: keep it (a leak of
  // device memory beats a use-after-free); the allocator frees its blocks at device destruction.
  if (!dev_.lost()) dev_.allocator().release(alloc_);
}

backend::Device& VulkanBuffer::device() const {
  return dev_;
}

void VulkanBuffer::check_range(const char* what, size_t offset, size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset)
    throw BackendError(
        BackendError::Kind::invalid,
        fmt::format("[backend vulkan] {} of {} bytes at {} is outside a {}-byte buffer", what, bytes, offset, size_));
}

void VulkanBuffer::upload(size_t offset, const void* src, size_t bytes) {
  check_range("upload", offset, bytes);
  if (!bytes) return;
  written(offset, bytes);
  if (alloc_.mapped) {
    if (alloc_.imported)
      throw BackendError(BackendError::Kind::invalid, "[backend vulkan] an imported host buffer is read-only");
    std::memcpy(alloc_.mapped + offset, src, bytes);
    return;
  }
  dev_.transfer(alloc_, offset, const_cast<void*>(src), bytes, true);
}

void VulkanBuffer::upload_weights(size_t offset, const void* src, size_t bytes, DType dtype) {
  if (dtype != DType::f16 || offset % 2 || bytes % 2 || (alloc_.mapped && alloc_.imported)) {
    upload(offset, src, bytes);
    return;
  }
  check_range("upload", offset, bytes);
  if (!bytes) return;
  written(offset, bytes);
  const auto* from = static_cast<const std::byte*>(src);
  bool clean = true;
  if (alloc_.mapped) {
    clean = flush_half_subnormals(from, alloc_.mapped + offset, bytes / 2);
  } else {  // staged: flush into a bounded host copy, chunk by chunk
    std::vector<uint16_t> chunk(std::min<size_t>(bytes, size_t{16} << 20) / 2);
    for (size_t done = 0; done < bytes;) {
      const size_t n = std::min(chunk.size() * 2, bytes - done);
      clean = flush_half_subnormals(from + done, chunk.data(), n / 2) && clean;
      dev_.transfer(alloc_, offset + done, chunk.data(), n, true);
      done += n;
    }
  }
  if (clean) {
    std::lock_guard<std::mutex> lock(clean_mu_);
    clean_.add(offset, offset + bytes);
  }
}

bool VulkanBuffer::half_clean(size_t offset, size_t bytes) const {
  std::lock_guard<std::mutex> lock(clean_mu_);
  return clean_.covers(offset, offset + bytes);
}

void VulkanBuffer::written(size_t offset, size_t bytes) {
  std::lock_guard<std::mutex> lock(clean_mu_);
  if (!clean_.empty()) clean_.erase(offset, offset + bytes);
}

void VulkanBuffer::download(size_t offset, void* dst, size_t bytes) const {
  check_range("download", offset, bytes);
  if (!bytes) return;
  if (alloc_.mapped) {
    std::memcpy(dst, alloc_.mapped + offset, bytes);
    return;
  }
  dev_.transfer(alloc_, offset, dst, bytes, false);
}

// ------------------------------------------------------------------------------------------------

VulkanDevice::VulkanDevice(const ContextOptions& opts, int index) {
  ctx_ = std::make_unique<Context>(opts);
  mem_ = std::make_unique<Allocator>(*ctx_);
  pipes_ = std::make_unique<Pipelines>(*ctx_);
  if (profiling()) {
    profiler_ = std::make_unique<Profiler>(ctx_->info().timestamp_period_ns);
    static std::once_flag once;
    std::call_once(once, [] { std::atexit(print_profiles_at_exit); });
    std::lock_guard<std::mutex> lock(g_profiled_mu);
    g_profiled.push_back(this);
  }
  timeout_ns_ = fence_timeout_ns(*ctx_);
  xfer_ = std::make_unique<Recorder>(*ctx_, *mem_, nullptr, timeout_ns_);
  policy_ = choose_policy(ctx_->info());
  const DeviceInfo& d = ctx_->info();
  info_.backend = "vulkan";
  info_.name = d.name;
  info_.id = "vulkan:" + std::to_string(index >= 0 ? static_cast<uint32_t>(index) : d.index);
  info_.kind = kind_of(d);
  info_.driver = fmt::format("Vulkan {}.{}.{}, driver id {}", VK_API_VERSION_MAJOR(d.api_version),
                             VK_API_VERSION_MINOR(d.api_version), VK_API_VERSION_PATCH(d.api_version),
                             static_cast<int>(d.driver_id));
}

VulkanDevice::~VulkanDevice() {
  if (ctx_) vkDeviceWaitIdle(ctx_->device());  // nothing below may be destroyed while in use
  if (profiler_) {
    std::lock_guard<std::mutex> lock(g_profiled_mu);
    auto it = std::find(g_profiled.begin(), g_profiled.end(), this);
    if (it != g_profiled.end()) {
      g_profiled.erase(it);
      if (!profiler_->empty())
        fmt::print(stderr, "[vulkan] per-op GPU time on '{}':\n{}", info_.name, profiler_->table());
    }
  }
  copies_.clear();
  spare_.clear();
  spare_profiled_.clear();
  zombies_.clear();
  xfer_.reset();
}

std::string VulkanDevice::profile_table() const {
  return profiler_ && !profiler_->empty() ? profiler_->table() : std::string();
}

backend::MemoryInfo VulkanDevice::memory() const {
  MemoryStats s = mem_->stats();
  return {s.limit, s.limit > s.used ? s.limit - s.used : 0};
}

std::unique_ptr<backend::Buffer> VulkanDevice::allocate(size_t bytes, backend::BufferUsage usage) {
  // Device-local memory (host-visible when the device is UMA), but batch inputs and readback in
  // host-visible memory: written or read every step, a staging copy would wait for (or behind)
  // other steps on the queue.
  if (bytes == 0) throw BackendError(BackendError::Kind::invalid, "[backend vulkan] allocate: 0 bytes asked");
  const MemoryKind kind = usage == backend::BufferUsage::inputs || usage == backend::BufferUsage::readback
                              ? MemoryKind::host
                              : MemoryKind::device;
  try {
    return std::make_unique<VulkanBuffer>(*this, mem_->allocate(bytes, kind), bytes);
  } catch (const BackendError&) {
    throw;
  } catch (const HostError& e) {
    // The allocator's out-of-memory message already names the device, what was asked and what is
    // free; only re-tag it. The largest-allocation refusal gets the asked/free summary added.
    if (std::strstr(e.what(), "out of device memory")) {
      std::string_view m = e.what();
      if (m.rfind("[vulkan] ", 0) == 0) m.remove_prefix(9);
      throw BackendError(BackendError::Kind::out_of_memory, fmt::format("[backend vulkan] {}", m));
    }
    if (std::strstr(e.what(), "largest allocation")) {
      MemoryStats s = mem_->stats();
      uint64_t free = s.limit > s.used ? s.limit - s.used : 0;
      throw BackendError(BackendError::Kind::out_of_memory,
                         fmt::format("[backend vulkan] out of memory on '{}': asked {}, free {} ({})", info_.name,
                                     format_bytes(bytes), format_bytes(free), e.what()));
    }
    throw BackendError(BackendError::Kind::device, e.what());
  }
}

std::unique_ptr<backend::Buffer> VulkanDevice::import_host(void* ptr, size_t bytes) {
  Allocation a = mem_->import_host(ptr, bytes);
  if (!a) return nullptr;
  return std::make_unique<VulkanBuffer>(*this, a, bytes);
}

std::string VulkanDevice::lost_reason() const {
  std::lock_guard<std::mutex> lock(lost_mu_);
  return lost_;
}

void VulkanDevice::set_lost(const std::string& why) {
  std::lock_guard<std::mutex> lock(lost_mu_);
  if (lost_.empty()) lost_ = why;
}

void VulkanDevice::check_not_lost() const {
  const std::string why = lost_reason();
  if (!why.empty())
    throw BackendError(BackendError::Kind::device,
                       fmt::format("[backend vulkan] device '{}' is unusable after an earlier failure ({}); restart "
                                   "the process",
                                   info_.name, why));
}

void VulkanDevice::transfer(const Allocation& a, size_t offset, void* host, size_t bytes, bool to_device) {
  std::lock_guard<std::mutex> lock(xfer_mu_);
  check_not_lost();
  constexpr size_t kChunk = 64ull << 20;
  Allocation staging = mem_->allocate(std::min(bytes, kChunk), MemoryKind::host);
  try {
    for (size_t done = 0; done < bytes; done += kChunk) {
      size_t n = std::min(kChunk, bytes - done);
      auto* h = static_cast<uint8_t*>(host) + done;
      if (to_device) {
        std::memcpy(staging.mapped, h, n);
        xfer_->copy(staging, 0, a, offset + done, n);
        xfer_->submit_and_wait();
      } else {
        xfer_->copy(a, offset + done, staging, 0, n);
        xfer_->submit_and_wait();
        std::memcpy(h, staging.mapped, n);
      }
    }
  } catch (const HostError& ex) {
    // A staging copy that missed the fence timeout (discrete GPUs) is the same device failure as a
    // compute() that did: the device is lost, and the in-flight recorder and staging buffer are
    // kept until the device idles at destruction.
    if (!xfer_->timed_out()) {
      mem_->release(staging);
      throw;
    }
    set_lost(ex.what());
    {
      std::lock_guard<std::mutex> lock(pool_mu_);
      zombies_.push_back(std::move(xfer_));
    }
    xfer_ = std::make_unique<Recorder>(*ctx_, *mem_, nullptr, timeout_ns_);
    throw BackendError(BackendError::Kind::device, ex.what());
  } catch (...) {
    mem_->release(staging);
    throw;
  }
  mem_->release(staging);
}

const Allocation& GraphTemps::upload(const void* data, size_t bytes) {
  Allocation a = mem_.allocate(std::max<size_t>(bytes, 16), MemoryKind::host);
  std::memcpy(a.mapped, data, bytes);
  temps_.push_back(a);
  return temps_.back();
}

const Allocation& GraphTemps::scratch(size_t bytes) {
  // Every node of the graph that asks uses the same scratch (the recorder orders their uses by its
  // hazard barriers); a larger request takes a larger shared one, the smaller one stays held (this
  // graph's earlier dispatches use it).
  if (!scratch_.empty() && scratch_.back()->alloc.size >= bytes) return scratch_.back()->alloc;
  scratch_.push_back(dev_.shared_scratch(bytes));
  return scratch_.back()->alloc;
}

SharedScratch::~SharedScratch() {
  if (!dev.lost()) dev.allocator().release(alloc);  // lost: it may still be in use
}

std::shared_ptr<SharedScratch> VulkanDevice::shared_scratch(size_t bytes) {
  std::lock_guard<std::mutex> lock(scratch_mu_);
  if (auto cur = scratch_.lock(); cur && cur->alloc.size >= bytes) return cur;
  auto next = std::make_shared<SharedScratch>(*this, mem_->allocate(std::max<size_t>(bytes, 16), MemoryKind::device));
  scratch_ = next;
  return next;
}

void GraphTemps::release() {
  for (Allocation& a : temps_) mem_.release(a);
  temps_.clear();
  scratch_.clear();
}

backend::Support VulkanDevice::supports_op(const backend::Node& node) const {
  return vulkan_supports(*this, node);
}

/**
 * A recorded graph: its command buffer (with descriptor sets and, under KILN_PROFILE, timestamp
 * queries), its temporaries, and the words its kernels raise errors in.
 */
class VulkanDevice::Executable final : public backend::Executable {
 public:
  backend::ExecStats stats() const override {
    return {static_cast<uint32_t>(rec->dispatches()), static_cast<uint32_t>(rec->barriers())};
  }
  Executable(VulkanDevice& dev, std::unique_ptr<Recorder> rec) : dev_(dev), rec(std::move(rec)), temps(dev, *dev.mem_) {
    // Words 0-4: error flags the kernels raise (checked after each run); word 7: a sink
    // attention_keys.comp writes its prefetched words to so the compiler keeps the loads.
    flags = dev.mem_->allocate(32, MemoryKind::host);
  }
  ~Executable() override {
    // After a lost device the buffer may still run: its recorder waits for the device to idle and
    // its memory is never freed (a leak of device memory beats a use-after-free).
    if (dev_.lost() || rec->timed_out()) {
      temps.leak();
      std::lock_guard<std::mutex> lock(dev_.pool_mu_);
      dev_.zombies_.push_back(std::move(rec));
      return;
    }
    try {
      rec->wait();
    } catch (...) {
    }
    temps.release();
    dev_.mem_->release(flags);
    dev_.return_recorder(std::move(rec));
  }

  VulkanDevice& dev_;
  std::unique_ptr<Recorder> rec;
  GraphTemps temps;
  Allocation flags;
  uint64_t messages = 0;  ///< validation messages before the last submit
};

std::unique_ptr<Recorder> VulkanDevice::take_recorder(bool profiled) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  auto& spare = profiled ? spare_profiled_ : spare_;
  if (spare.empty()) return std::make_unique<Recorder>(*ctx_, *mem_, profiled ? profiler_.get() : nullptr, timeout_ns_);
  auto r = std::move(spare.back());
  spare.pop_back();
  return r;
}

void VulkanDevice::return_recorder(std::unique_ptr<Recorder> rec) {
  std::lock_guard<std::mutex> lock(pool_mu_);
  // A few idle recorders are worth keeping (their pools and fences); more are freed.
  auto& spare = rec->profiled() ? spare_profiled_ : spare_;
  if (spare.size() < 8 && !rec->recording()) spare.push_back(std::move(rec));
}

backend::DeviceLimits VulkanDevice::limits(uint32_t block_tokens) const {
  backend::DeviceLimits l;
  if (policy_.loop_budget) {
    // llvmpipe ends a shader's loops after loop_budget iterations: attention and the chunked delta
    // rule scan the batch's sequences, and a query's keys must fit what one invocation visits.
    l.max_batch_seqs = attention_max_seqs(policy_.loop_budget);
    l.max_attention_keys = attention_max_keys(policy_, std::max<uint32_t>(block_tokens, 1));
  }
  l.max_batch_seqs = std::min(l.max_batch_seqs, ctx_->info().max_groups[1]);
  l.max_head_dim = 8 * attention_max_groups(policy_);
  return l;
}

std::unique_ptr<backend::Executable> VulkanDevice::prepare(const backend::BoundGraph& graph) {
  backend::check_supported(*this, graph);
  for (const backend::Node& n : graph.nodes) {
    const int ws = op_traits(n.op).writes_src;  // state updated in place (conv1d, delta rule)
    for (uint32_t i = 0; i <= n.n_src; ++i) {
      const backend::TensorRef& t = i < n.n_src ? n.src[i] : n.dst;
      if (!t.buffer) continue;
      if (&t.buffer->device() != this)
        throw BackendError(BackendError::Kind::invalid,
                           fmt::format("[backend vulkan] {}: a tensor lives in a buffer of device '{}', not '{}'",
                                       backend::describe(n), t.buffer->device().info().name, info_.name));
      // A kernel writing into prepared weights (never done by the model host, but legal) voids
      // their clean mark before anything reads it.
      if (i == n.n_src || static_cast<int>(i) == ws)
        static_cast<VulkanBuffer*>(t.buffer)->written(t.offset, t.desc.bytes());
    }
  }
  check_regions(graph.copies_after);
  check_not_lost();
  auto exe = std::make_unique<Executable>(*this, take_recorder(profiler_ != nullptr));
  Recorder& rec = *exe->rec;
  std::lock_guard<std::mutex> lock(record_mu_);
  try {
    rec.begin();
    for (size_t i = 0; i < graph.nodes.size(); ++i) {
      const backend::Node& n = graph.nodes[i];
      OpEnv e{*this, rec, n, exe->flags, exe->temps};
      // Pairs of nodes that run as one dispatch (ops.hpp: fuses_*); the second node's OpEnv
      // records both. Sibling matmuls are grouped in the MATMUL case.
      if (!fuse_off() && i + 1 < graph.nodes.size()) {
        const backend::Node& next = graph.nodes[i + 1];
        OpEnv ne{*this, rec, next, exe->flags, exe->temps};
        if (fuses_add_norm(n, next)) {
          record_norm(ne, &n);
          ++i;
          continue;
        }
        if (i + 3 < graph.nodes.size() &&
            fuses_norm_rope_pair(*this, n, next, graph.nodes[i + 2], graph.nodes[i + 3])) {
          record_norm(e, nullptr, &next, &graph.nodes[i + 2], &graph.nodes[i + 3]);
          i += 3;
          continue;
        }
        if (fuses_norm_rope(n, next)) {
          record_norm(e, nullptr, &next);
          ++i;
          continue;
        }
        if (fuses_set_rows(*this, n, next)) {
          record_set_rows(e, &next);
          ++i;
          continue;
        }
        if (fuses_unary_binary(n, next)) {
          record_elementwise(ne, &n);
          ++i;
          continue;
        }
      }
      switch (n.op) {
        case KILN_OP_MATMUL: {
          const size_t k = fusable_matmuls(*this, graph.nodes, i);
          record_matmul(e, k > 1 ? &graph.nodes[i + 1] : nullptr, k - 1);
          i += k - 1;
          break;
        }
        case KILN_OP_MOE_MATMUL:
          record_matmul(e);
          break;
        case KILN_OP_ADD:
        case KILN_OP_MUL:
        case KILN_OP_SCALE:
        case KILN_OP_SILU:
        case KILN_OP_GELU_TANH:
        case KILN_OP_SIGMOID:
        case KILN_OP_SOFTPLUS:
        case KILN_OP_SOFTCAP:
        case KILN_OP_EXP:
          record_elementwise(e);
          break;
        case KILN_OP_RMS_NORM:
        case KILN_OP_L2_NORM:
        case KILN_OP_SOFTMAX:
          record_norm(e);
          break;
        case KILN_OP_ROPE:
          record_rope(e);
          break;
        case KILN_OP_GET_ROWS:
        case KILN_OP_SET_ROWS:
        case KILN_OP_SLICE:
        case KILN_OP_CONCAT:
          record_data(e);
          break;
        case KILN_OP_ATTENTION:
          record_attention(e);
          break;
        case KILN_OP_CONV1D_CAUSAL:
        case KILN_OP_GATED_DELTA:
          record_recurrent(e);
          break;
        case KILN_OP_TOP_K:
        case KILN_OP_MOE_WEIGHTS:
        case KILN_OP_MOE_SUM:
          record_moe(e);
          break;
        default:
          e.fail("no Vulkan kernel");
      }
    }
    record_copies(rec, graph.copies_after);
    rec.end();
  } catch (const BackendError&) {
    exe->rec =
        std::make_unique<Recorder>(*ctx_, *mem_, profiler_.get(), timeout_ns_);  // the half-recorded one is dropped
    throw;
  } catch (const HostError& ex) {
    exe->rec = std::make_unique<Recorder>(*ctx_, *mem_, profiler_.get(), timeout_ns_);
    throw BackendError(BackendError::Kind::device, ex.what());
  }
  last_barriers_ = rec.barriers();
  last_dispatches_ = rec.dispatches();
  return exe;
}

void VulkanDevice::submit(backend::Executable& e) {
  auto& exe = static_cast<Executable&>(e);
  check_not_lost();
  if (exe.rec->pending())
    throw BackendError(BackendError::Kind::invalid,
                       "[backend vulkan] an executable was submitted again before its last run was waited for");
  std::memset(exe.flags.mapped, 0, 32);
  exe.messages = ctx_->validation_messages();
  try {
    exe.rec->submit();
  } catch (const HostError& ex) {
    throw BackendError(BackendError::Kind::device, ex.what());
  }
}

void VulkanDevice::wait(backend::Executable& e) {
  auto& exe = static_cast<Executable&>(e);
  if (!exe.rec->pending()) return;
  try {
    exe.rec->wait();
  } catch (const HostError& ex) {
    if (exe.rec->timed_out()) set_lost(ex.what());  // still in flight: the executable keeps it until the device idles
    throw BackendError(BackendError::Kind::device, ex.what());
  }
  const auto* f = reinterpret_cast<const uint32_t*>(exe.flags.mapped);
  if (f[0])
    throw BackendError(BackendError::Kind::invalid,
                       "[backend vulkan] GET_ROWS: an id is outside the table (rows were zeroed); check token ids");
  if (f[1])
    throw BackendError(BackendError::Kind::invalid,
                       "[backend vulkan] SET_ROWS: a slot is outside the destination; check the cache block tables");
  if (f[2])
    throw BackendError(BackendError::Kind::invalid,
                       "[backend vulkan] MOE_MATMUL: an expert id is outside the expert stack (expert 0 was used); "
                       "check the router's TOP_K ids against the number of experts");
  if (f[4])
    throw BackendError(BackendError::Kind::invalid,
                       "[backend vulkan] GATED_DELTA / CONV1D_CAUSAL: a sequence's state slot is outside the state "
                       "tensor (that sequence was skipped); check the sequences' slots against the state's slots");
  if (f[3])
    throw BackendError(BackendError::Kind::invalid,
                       fmt::format("[backend vulkan] ATTENTION: a sequence attends to more keys than one invocation "
                                   "can visit on '{}' (llvmpipe ends a shader's loops after 65535 iterations: {} keys "
                                   "with cache blocks of 16, {} with blocks of 1): shorten the context or use a GPU",
                                   info_.name, attention_max_keys(policy_, 16), attention_max_keys(policy_, 1)));
  const uint64_t msgs = ctx_->validation_messages() - exe.messages;
  if (msgs)
    throw BackendError(BackendError::Kind::device,
                       fmt::format("[backend vulkan] the validation layer reported {} message(s) during compute; "
                                   "last: {}",
                                   msgs, ctx_->last_validation_message()));
}

void VulkanDevice::reap_copies(bool wait) {
  std::lock_guard<std::mutex> lock(copy_mu_);
  for (auto it = copies_.begin(); it != copies_.end();) {
    if (!wait && !(*it)->finished()) {
      ++it;
      continue;
    }
    try {
      (*it)->wait();
    } catch (const HostError& ex) {
      set_lost(ex.what());
      std::lock_guard<std::mutex> pl(pool_mu_);
      zombies_.push_back(std::move(*it));
      copies_.erase(it);
      throw BackendError(BackendError::Kind::device, ex.what());
    }
    return_recorder(std::move(*it));
    it = copies_.erase(it);
  }
}

void VulkanDevice::check_regions(const std::vector<backend::CopyRegion>& regions) const {
  for (const backend::CopyRegion& r : regions) {
    auto outside = [&](backend::Buffer* b, size_t off) { return off > b->size() || r.bytes > b->size() - off; };
    if (!r.dst) throw BackendError(BackendError::Kind::invalid, "[backend vulkan] copy: a region has no destination");
    for (backend::Buffer* b : {r.src, r.dst})
      if (b && &b->device() != this)
        throw BackendError(BackendError::Kind::invalid, "[backend vulkan] copy: a buffer lives on another device");
    if (outside(r.dst, r.dst_offset) || (r.src && outside(r.src, r.src_offset)))
      throw BackendError(BackendError::Kind::invalid,
                         fmt::format("[backend vulkan] copy of {} bytes outside its buffers", r.bytes));
  }
}

void VulkanDevice::record_copies(Recorder& rec, const std::vector<backend::CopyRegion>& regions) {
  for (const backend::CopyRegion& r : regions) {
    auto* dst = static_cast<VulkanBuffer*>(r.dst);
    dst->written(r.dst_offset, r.bytes);
    if (r.src)
      rec.copy(static_cast<VulkanBuffer*>(r.src)->allocation(), r.src_offset, dst->allocation(), r.dst_offset, r.bytes);
    else
      rec.fill_zero(dst->allocation(), r.dst_offset, r.bytes);
  }
}

void VulkanDevice::copy(const std::vector<backend::CopyRegion>& regions) {
  check_not_lost();
  reap_copies(false);
  check_regions(regions);
  if (regions.empty()) return;
  auto rec = take_recorder(false);
  try {
    rec->begin();
    record_copies(*rec, regions);
    rec->end();
    rec->submit();
  } catch (const HostError& ex) {
    throw BackendError(BackendError::Kind::device, ex.what());
  }
  std::lock_guard<std::mutex> lock(copy_mu_);
  copies_.push_back(std::move(rec));
}

void VulkanDevice::sync() {
  check_not_lost();
  {
    std::lock_guard<std::mutex> lock(ctx_->queue_mutex());
    check(vkQueueWaitIdle(ctx_->queue()), "vkQueueWaitIdle");
  }
  reap_copies(true);
}

}  // namespace kiln::vk

// ------------------------------------------------------------------------------------------------

namespace kiln::backend {

namespace {

class VulkanBackend final : public Backend {
 public:
  explicit VulkanBackend(std::vector<std::unique_ptr<vk::VulkanDevice>> d) : devs_(std::move(d)) {}
  std::string_view name() const override { return "vulkan"; }
  std::vector<Device*> devices() override {
    std::vector<Device*> out;
    for (auto& d : devs_) out.push_back(d.get());
    return out;
  }

 private:
  std::vector<std::unique_ptr<vk::VulkanDevice>> devs_;
};

}  // namespace

void register_vulkan_backend(Registry& registry) {
  // Every physical device becomes "vulkan:N" (N = vkEnumeratePhysicalDevices index) so the
  // registry's selection (auto: discrete > integrated, software only when named; YAML backend.device;
  // KILN_DEVICE)
  // chooses among them. KILN_VULKAN_DEVICE (index or name) opens only that one.
  std::vector<std::unique_ptr<vk::VulkanDevice>> devs;
  const char* only = std::getenv("KILN_VULKAN_DEVICE");
  uint32_t n = (only && *only) ? 1 : vk::Context::count_devices();
  if (n == 0) n = 1;  // let the context produce the precise "no driver / no device" message
  for (uint32_t i = 0; i < n; ++i) {
    vk::ContextOptions opts;
    if (!(only && *only)) opts.index = static_cast<int>(i);
    try {
      devs.push_back(std::make_unique<vk::VulkanDevice>(opts, -1));
    } catch (const std::exception& e) {
      log::info("[backend vulkan] device {} not registered: {}", i, e.what());
    }
  }
  if (!devs.empty()) registry.add(std::make_unique<VulkanBackend>(std::move(devs)));
}

}  // namespace kiln::backend
