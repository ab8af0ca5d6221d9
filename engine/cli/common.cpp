#include "cli/common.hpp"

#include "core/log.hpp"

namespace kiln::cli {

Config load_config_or_empty(const std::string& path) {
  Config c = path.empty() ? Config{} : Config::load_file(path);
  log::Level l;
  if (c.log_level && log::parse_level(*c.log_level, &l) && !std::getenv("KILN_LOG")) log::set_level(l);
  return c;
}

void load_plugins(PluginRegistry& registry, const Config& config) {
  register_builtin_plugins(registry);
  registry.load_dirs(plugin_search_dirs(config.plugins ? &*config.plugins : nullptr));
}

}  // namespace kiln::cli
