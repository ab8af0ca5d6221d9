// Plugin loading and registries by kind and name.
//
// Plugins are dlopen'ed with RTLD_NOW | RTLD_LOCAL and never unloaded: a handle stays open for the
// life of the process, so no graph task or fence callback can outlive the code it runs. Every
// failure refuses that plugin with one clear line (kept in refused()) and never crashes the host.
#pragma once

#include <kiln/kiln_plugin.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln {

struct PluginsConfig;

/** One registered component (a model, reasoning parser or tool-call parser). */
struct Component {
  kiln_component_kind kind;
  std::string name;
  std::string description;
  const void* vtable;                    ///< the kind's vtable, owned by the plugin
  std::vector<std::string> model_types;  ///< models only
  size_t plugin;                         ///< index into PluginRegistry::plugins()
};

struct PluginInfo {
  std::string name, version;
  std::string file;                      ///< path, or "<static>" for linked-in plugins
  uint16_t abi_major = 0, abi_minor = 0;
};

struct RefusedPlugin {
  std::string file;
  std::string reason;                    ///< one line, says what to do
};

const char* component_kind_name(kiln_component_kind kind);
/** "model", "reasoning-parser", "tool-parser" -> kind; false when unknown. */
bool parse_component_kind(std::string_view s, kiln_component_kind* out);

class PluginRegistry {
 public:
  struct Options {
    /** Oldest plugin ABI minor this host accepts (same major). */
    uint16_t min_abi_minor = 0;
  };
  PluginRegistry() : PluginRegistry(Options{}) {}
  explicit PluginRegistry(Options options);

  /** dlopen()s one plugin file. On failure records it in refused() and returns false. */
  bool load_file(const std::string& path);
  /** Loads every `*.so` directly inside each folder, in name order. Missing folders are refused. */
  void load_dirs(const std::vector<std::string>& dirs);
  /** Registers a plugin linked into the host (built with KILN_PLUGIN_STATIC). */
  bool register_static(kiln_plugin_get_descriptor_fn entry, const std::string& origin);

  const Component* find(kiln_component_kind kind, std::string_view name) const;
  /** The model component that serves a config.json `model_type`, or nullptr. */
  const Component* find_model_type(std::string_view model_type) const;
  /** Names registered for a kind (for "unknown name, choose one of ..." errors). */
  std::vector<std::string> names(kiln_component_kind kind) const;

  const std::vector<PluginInfo>& plugins() const { return plugins_; }
  const std::vector<Component>& components() const { return components_; }
  const std::vector<RefusedPlugin>& refused() const { return refused_; }

 private:
  bool add_descriptor(const kiln_plugin_descriptor* d, const std::string& file, std::string* reason);
  bool refuse(const std::string& file, std::string reason);

  Options options_;
  std::vector<PluginInfo> plugins_;
  std::vector<Component> components_;
  std::vector<RefusedPlugin> refused_;
};

/** Folder holding the running executable. */
std::string executable_dir();
/** Plugin search path: the YAML paths first, then `<exe dir>/plugins`. */
std::vector<std::string> plugin_search_dirs(const PluginsConfig* config);
/** Registers the plugins linked statically into this binary (KILN_STATIC_PLUGINS builds). */
void register_builtin_plugins(PluginRegistry& registry);

}  // namespace kiln
