// kiln config check FILE: validate a configuration and print the effective one.
#include <fmt/format.h>

#include "cli/command.hpp"
#include "core/config.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {}, {"--quiet"});
  if (!args.ok()) return usage_error("config check", args.error());
  if (args.positionals().size() != 1) return usage_error("config check", "expected exactly one FILE (see --help)");
  try {
    Config c = Config::load_file(args.positionals()[0]);
    if (!args.flag("--quiet")) fmt::print("# effective configuration of {}\n{}", c.file, c.to_yaml());
    return 0;
  } catch (const ConfigError& e) {
    fmt::print(stderr, "{}\n", e.what());
    return 1;
  }
}

const bool registered = register_command({
    "config check",
    "validate a YAML config and print the effective configuration",
    "usage: kiln config check FILE [--quiet]\n\n"
    "Validates FILE against kiln's configuration schema. Errors name file:line:column and the\n"
    "expected form. On success prints the configuration with every default filled in.\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
