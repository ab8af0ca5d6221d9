// Helpers shared by subcommands: configuration and plugin registry set-up.
#pragma once

#include <optional>
#include <string>

#include "core/config.hpp"
#include "plugin/registry.hpp"

namespace kiln::cli {

/** Loads --config FILE if given (applying its log level), else an empty configuration. */
Config load_config_or_empty(const std::string& path);

/** Built-in plugins, then the YAML plugin paths, then <exe dir>/plugins. */
void load_plugins(PluginRegistry& registry, const Config& config);

}  // namespace kiln::cli
