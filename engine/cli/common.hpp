// Helpers shared by subcommands: configuration and plugin registry set-up.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/config.hpp"
#include "plugin/registry.hpp"

namespace kiln::cli {

/** Loads --config FILE if given (applying its log level), else an empty configuration. */
Config load_config_or_empty(const std::string& path);

/** Built-in plugins, then the YAML plugin paths, then <exe dir>/plugins. */
void load_plugins(PluginRegistry& registry, const Config& config);

/** "1,5,7" -> ids (each in [0, INT32_MAX]); false for empty or malformed lists. */
bool parse_id_list(const std::string& text, std::vector<int32_t>* out);

}  // namespace kiln::cli
