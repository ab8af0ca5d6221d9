// kiln plugins: every plugin found (kind, name, ABI, file) and every refused one with its reason.
#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/common.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--config", "--load"}, {});
  if (!args.ok()) return usage_error("plugins", args.error());
  if (!args.positionals().empty()) return usage_error("plugins", "unexpected argument '" + args.positionals()[0] + "'");
  Config config = load_config_or_empty(args.value("--config"));
  PluginRegistry registry;
  load_plugins(registry, config);
  if (args.has("--load")) registry.load_file(args.value("--load"));

  fmt::print("{:<17} {:<16} {:<14} {:<6} {}\n", "KIND", "NAME", "PLUGIN", "ABI", "FILE");
  for (const auto& c : registry.components()) {
    const PluginInfo& p = registry.plugins()[c.plugin];
    fmt::print("{:<17} {:<16} {:<14} {:<6} {}\n", component_kind_name(c.kind), c.name, p.name,
               fmt::format("{}.{}", p.abi_major, p.abi_minor), p.file);
  }
  if (registry.components().empty()) fmt::print("(no plugins found)\n");
  for (const auto& r : registry.refused()) fmt::print(stderr, "refused {}: {}\n", r.file, r.reason);
  return registry.refused().empty() ? 0 : 1;
}

const bool registered = register_command({
    "plugins",
    "list the plugins found and the ones refused (with the reason)",
    "usage: kiln plugins [--config FILE] [--load PLUGIN.so]\n\n"
    "Lists every plugin component kiln can use: built-in ones, those in the config's plugins.paths,\n"
    "and those in the plugins/ folder beside the kiln executable. Refused plugins are printed to\n"
    "stderr, one line each with the reason, and make the exit status 1.\n\n"
    "  --config FILE   a kiln YAML config (only its plugins: section is needed)\n"
    "  --load FILE     also load this one plugin file\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
