#include "plugin/registry.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <filesystem>

#include "core/config.hpp"
#include "core/log.hpp"

namespace kiln {

const char* component_kind_name(kiln_component_kind kind) {
  switch (kind) {
    case KILN_COMPONENT_MODEL: return "model";
    case KILN_COMPONENT_REASONING_PARSER: return "reasoning-parser";
    case KILN_COMPONENT_TOOL_PARSER: return "tool-parser";
  }
  return "unknown";
}

bool parse_component_kind(std::string_view s, kiln_component_kind* out) {
  for (auto k : {KILN_COMPONENT_MODEL, KILN_COMPONENT_REASONING_PARSER, KILN_COMPONENT_TOOL_PARSER})
    if (s == component_kind_name(k)) {
      *out = k;
      return true;
    }
  return false;
}

PluginRegistry::PluginRegistry(Options options) : options_(options) {}

bool PluginRegistry::refuse(const std::string& file, std::string reason) {
  log::warn("[plugin] refused {}: {}", file, reason);
  refused_.push_back({file, std::move(reason)});
  return false;
}

namespace {
// The smallest vtable size each kind must report: everything up to the last required entry.
size_t min_vtable_size(uint32_t kind) {
  switch (kind) {
    case KILN_COMPONENT_MODEL: return offsetof(kiln_model_vtable, build_graph) + sizeof(void*);
    case KILN_COMPONENT_REASONING_PARSER:
    case KILN_COMPONENT_TOOL_PARSER: return offsetof(kiln_parser_vtable, finish) + sizeof(void*);
  }
  return SIZE_MAX;
}

bool valid_name(const char* s) {
  if (!s || !*s) return false;
  for (const char* p = s; *p; ++p)
    if (!(std::isalnum(static_cast<unsigned char>(*p)) || *p == '_' || *p == '-' || *p == '.')) return false;
  return true;
}
}  // namespace

bool PluginRegistry::add_descriptor(const kiln_plugin_descriptor* d, const std::string& file, std::string* reason) {
  auto fail = [&](std::string r) {
    *reason = std::move(r);
    return false;
  };
  if (!d) return fail(fmt::format("the plugin declined this host (kiln_plugin_get_descriptor returned NULL for host ABI {}.{})",
                                  KILN_ABI_MAJOR, KILN_ABI_MINOR));
  // Read only what the plugin says it has (struct_size), and require the v1.0 fields.
  constexpr size_t kMinDescriptor = offsetof(kiln_plugin_descriptor, components) + sizeof(void*);
  if (d->struct_size < kMinDescriptor)
    return fail(fmt::format("descriptor too small ({} bytes, need at least {}): not built against the kiln SDK?",
                            d->struct_size, kMinDescriptor));
  if (d->abi_major != KILN_ABI_MAJOR)
    return fail(fmt::format("ABI major mismatch: plugin built for kiln ABI {}.{}, host has ABI {}.{}; rebuild the plugin "
                            "against this kiln SDK",
                            d->abi_major, d->abi_minor, KILN_ABI_MAJOR, KILN_ABI_MINOR));
  if (d->abi_minor < options_.min_abi_minor)
    return fail(fmt::format("ABI minor too old: plugin built for kiln ABI {}.{}, host {}.{} needs at least {}.{}; rebuild "
                            "the plugin against this kiln SDK",
                            d->abi_major, d->abi_minor, KILN_ABI_MAJOR, KILN_ABI_MINOR, KILN_ABI_MAJOR,
                            options_.min_abi_minor));
  if (!valid_name(d->plugin_name)) return fail("the descriptor has no valid plugin_name");
  if (d->component_count == 0 || !d->components) return fail("the plugin provides no components");

  std::vector<Component> added;
  for (uint32_t i = 0; i < d->component_count; ++i) {
    const kiln_component& c = d->components[i];
    constexpr size_t kMinComponent = offsetof(kiln_component, model_types) + sizeof(void*);
    if (c.struct_size < kMinComponent)
      return fail(fmt::format("component {} is too small ({} bytes, need {})", i, c.struct_size, kMinComponent));
    if (c.kind == 2)
      return fail(fmt::format("component {} has kind 2 (a plugin cache policy), which was retired in kiln ABI 2.0: models "
                              "declare their per-layer cache kinds and the host owns the caches",
                              i));
    if (c.kind < KILN_COMPONENT_MODEL || c.kind > KILN_COMPONENT_TOOL_PARSER)
      return fail(fmt::format("component {} has unknown kind {} (this host knows kinds 1-4; is the host older than "
                              "the plugin?)", i, c.kind));
    auto kind = static_cast<kiln_component_kind>(c.kind);
    if (!valid_name(c.name))
      return fail(fmt::format("component {} has an invalid name (letters, digits, '_', '-', '.' only)", i));
    if (!c.vtable) return fail(fmt::format("{} '{}' has no vtable", component_kind_name(kind), c.name));
    uint32_t vt_size = *static_cast<const uint32_t*>(c.vtable);  // every vtable starts with struct_size
    if (vt_size < min_vtable_size(kind))
      return fail(fmt::format("{} '{}' vtable is too small ({} bytes, need {})", component_kind_name(kind), c.name,
                              vt_size, min_vtable_size(kind)));
    auto clash = [&](const std::vector<Component>& v) {
      return std::find_if(v.begin(), v.end(), [&](const Component& o) { return o.kind == kind && o.name == c.name; });
    };
    if (auto it = clash(components_); it != components_.end())
      return fail(fmt::format("duplicate {} name '{}': already provided by {} ({}); remove one of the two or rename it",
                              component_kind_name(kind), c.name, plugins_[it->plugin].name,
                              plugins_[it->plugin].file));
    if (clash(added) != added.end())
      return fail(fmt::format("duplicate {} name '{}' inside the plugin", component_kind_name(kind), c.name));
    Component comp{kind, c.name, c.description ? c.description : "", c.vtable, {}, plugins_.size()};
    if (kind == KILN_COMPONENT_MODEL && c.model_types)
      for (const char* const* t = c.model_types; *t; ++t) comp.model_types.emplace_back(*t);
    added.push_back(std::move(comp));
  }
  plugins_.push_back({d->plugin_name, d->plugin_version ? d->plugin_version : "", file, d->abi_major, d->abi_minor});
  for (auto& c : added) components_.push_back(std::move(c));
  return true;
}

bool PluginRegistry::load_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(path, ec)) return refuse(path, "file not found (check plugins.paths in the config)");
  for (const auto& p : plugins_)
    if (p.file == path) return true;  // already loaded
  // RTLD_LOCAL keeps each plugin's symbols private; RTLD_NOW surfaces missing symbols here, not mid-request.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    const char* e = dlerror();
    return refuse(path, fmt::format("cannot load: {}", e ? e : "dlopen failed"));
  }
  auto entry = reinterpret_cast<kiln_plugin_get_descriptor_fn>(dlsym(handle, KILN_PLUGIN_ENTRY_SYMBOL));
  if (!entry) {
    dlclose(handle);  // safe: none of its code has run
    return refuse(path, fmt::format("not a kiln plugin (no '{}' symbol exported)", KILN_PLUGIN_ENTRY_SYMBOL));
  }
  std::string reason;
  if (!add_descriptor(entry(KILN_ABI_MAJOR, KILN_ABI_MINOR), path, &reason)) {
    // Keep the handle: the plugin's code ran (static constructors), so unloading is not known safe.
    return refuse(path, reason);
  }
  const PluginInfo& info = plugins_.back();
  log::debug("[plugin] loaded {} {} (ABI {}.{}) from {}", info.name, info.version, info.abi_major, info.abi_minor, path);
  return true;
}

void PluginRegistry::load_dirs(const std::vector<std::string>& dirs) {
  namespace fs = std::filesystem;
  for (const auto& dir : dirs) {
    std::error_code ec;
    if (!fs::is_directory(dir, ec)) {
      refuse(dir, "plugin folder not found");
      continue;
    }
    std::vector<std::string> files;
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".so") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) load_file(f);
  }
}

bool PluginRegistry::register_static(kiln_plugin_get_descriptor_fn entry, const std::string& origin) {
  std::string reason;
  if (!add_descriptor(entry(KILN_ABI_MAJOR, KILN_ABI_MINOR), origin, &reason)) return refuse(origin, reason);
  return true;
}

const Component* PluginRegistry::find(kiln_component_kind kind, std::string_view name) const {
  for (const auto& c : components_)
    if (c.kind == kind && c.name == name) return &c;
  return nullptr;
}

const Component* PluginRegistry::find_model_type(std::string_view model_type) const {
  for (const auto& c : components_)
    if (c.kind == KILN_COMPONENT_MODEL)
      for (const auto& t : c.model_types)
        if (t == model_type) return &c;
  return nullptr;
}

std::vector<std::string> PluginRegistry::names(kiln_component_kind kind) const {
  std::vector<std::string> out;
  for (const auto& c : components_)
    if (c.kind == kind) out.push_back(c.name);
  std::sort(out.begin(), out.end());
  return out;
}

std::string executable_dir() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : p.parent_path().string();
}

std::vector<std::string> plugin_search_dirs(const PluginsConfig* config) {
  std::vector<std::string> dirs;
  if (config) dirs = config->paths;
  std::string beside = executable_dir() + "/plugins";
  std::error_code ec;
  if (std::filesystem::is_directory(beside, ec)) dirs.push_back(beside);
  return dirs;
}

}  // namespace kiln
