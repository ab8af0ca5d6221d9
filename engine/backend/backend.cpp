// The registry (CPU always, Vulkan when compiled in), device selection and the shared error helpers.
#include "backend/backend.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/ops.hpp"
#include "backend/reference/reference_backend.hpp"
#include "core/log.hpp"

namespace kiln::backend {

const char* device_kind_name(DeviceKind k) {
  switch (k) {
    case DeviceKind::cpu:
      return "cpu";
    case DeviceKind::discrete_gpu:
      return "discrete GPU";
    case DeviceKind::integrated_gpu:
      return "integrated GPU";
    case DeviceKind::software_gpu:
      return "software GPU";
  }
  return "?";
}

std::string describe(const Node& node) {
  std::string s = op_name(node.op);
  if (!node.name.empty()) s += " '" + node.name + "'";
  s += "(";
  for (uint32_t i = 0; i < node.n_src; ++i) s += (i ? ", " : "") + node.src[i].desc.str();
  return s + ") -> " + node.dst.desc.str();
}

void throw_unsupported(const Device& device, const Node& node, std::string_view reason) {
  const DeviceInfo& info = device.info();
  throw BackendError(BackendError::Kind::unsupported,
                     fmt::format("[backend {}] op {} is not supported on device '{}' ({}): {}; pick another "
                                 "device (KILN_DEVICE) or a supported dtype",
                                 info.backend, describe(node), info.name, info.id, reason));
}

void throw_out_of_memory(const Device& device, uint64_t asked, uint64_t free) {
  const DeviceInfo& info = device.info();
  throw BackendError(BackendError::Kind::out_of_memory,
                     fmt::format("[backend {}] out of memory on '{}': asked {}, free {}; use a smaller "
                                 "model, quantized weights or a smaller KV cache",
                                 info.backend, info.name, format_bytes(asked), format_bytes(free)));
}

void check_supported(const Device& device, const BoundGraph& graph) {
  for (const Node& n : graph.nodes) {
    Support s = device.supports_op(n);
    if (!s) throw_unsupported(device, n, s.reason);
  }
}

// ------------------------------------------------------------------------------------------------

Registry& Registry::instance() {
  static Registry* reg = [] {
    auto* r = new Registry();  // never destroyed: devices may be used from static destructors
    r->add(make_reference_backend());
    r->add(make_cpu_backend());
#if defined(KILN_HAVE_VULKAN)
    try {
      register_vulkan_backend(*r);
    } catch (const std::exception& e) {
      log::warn("[backend] Vulkan backend unavailable: {}", e.what());
    }
#endif
    return r;
  }();
  return *reg;
}

void Registry::add(std::unique_ptr<Backend> backend) {
  backends_.push_back(std::move(backend));
}

std::vector<Backend*> Registry::backends() const {
  std::vector<Backend*> out;
  for (const auto& b : backends_) out.push_back(b.get());
  return out;
}

std::vector<Device*> Registry::devices() const {
  std::vector<Device*> out;
  for (const auto& b : backends_)
    for (Device* d : b->devices()) out.push_back(d);
  return out;
}

Device* Registry::find(std::string_view spec) const {
  const auto all = devices();
  for (Device* d : all)
    if (d->info().id == spec) return d;
  for (Device* d : all)
    if (d->info().backend == spec) return d;
  for (Device* d : all)
    if (!spec.empty() && d->info().name.find(spec) != std::string::npos) return d;
  return nullptr;
}

Device& Registry::reference() const {
  Device* d = find("reference");
  if (!d) throw_error("[backend] the CPU reference backend is not registered (a build error)");
  return *d;
}

Device& Registry::cpu() const {
  Device* d = find("cpu");
  if (!d) throw_error("[backend] the CPU backend is not registered (a build error)");
  return *d;
}

Device& Registry::select(const Selection& selection) const {
  std::string spec = selection.device;
  if (const char* env = std::getenv("KILN_DEVICE"); env && *env) spec = env;
  const auto all = devices();
  auto list = [&] {
    std::string s;
    for (Device* d : all)
      s += fmt::format("\n  {} : {} ({})", d->info().id, d->info().name, device_kind_name(d->info().kind));
    return s;
  };
  if (!spec.empty() && spec != "auto") {
    if (Device* d = find(spec)) return *d;
    throw_error("[backend] no device matches '{}'; devices:{}", spec, list());
  }
  // auto: a hardware GPU through Vulkan (discrete before integrated), else the native CPU
  // backend. A software Vulkan device (lavapipe) runs on the same CPU at about half native speed,
  // and the reference backend is the test oracle: both only when named.
  Device* best = nullptr;
  for (DeviceKind kind : {DeviceKind::discrete_gpu, DeviceKind::integrated_gpu})
    for (Device* d : all)
      if (!best && d->info().kind == kind) best = d;
  if (best) {
    log::info("[backend] auto: {} '{}' ({})", device_kind_name(best->info().kind), best->info().name, best->info().id);
    return *best;
  }
  if (!selection.allow_cpu_fallback)
    throw_error(
        "[backend] no hardware GPU found (is a Vulkan driver such as mesa-vulkan-drivers installed?) and "
        "allow_cpu_fallback is off; set it, or name a device (cpu, vulkan for a software Vulkan device); "
        "devices:{}",
        list());
  Device& c = cpu();
  bool software = false;
  for (Device* d : all) software |= d->info().kind == DeviceKind::software_gpu;
  log::info("[backend] auto: no hardware GPU{}; using the native CPU backend: {}",
            software ? " (software Vulkan devices such as lavapipe run only when named: kind: vulkan)" : "",
            c.info().driver);
  return c;
}

}  // namespace kiln::backend
