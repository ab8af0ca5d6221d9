#include "cli/common.hpp"

#include "core/log.hpp"

#include <climits>
#include <cstdlib>

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

bool parse_id_list(const std::string& text, std::vector<int32_t>* out) {
  size_t i = 0;
  while (i < text.size()) {
    size_t end = text.find(',', i);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(i, end - i);
    try {
      size_t used = 0;
      const long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) return false;
      out->push_back(static_cast<int32_t>(v));
    } catch (...) {
      return false;
    }
    i = end + 1;
  }
  return !out->empty();
}

}  // namespace kiln::cli
