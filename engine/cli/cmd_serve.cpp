// kiln serve: the OpenAI-compatible HTTP server. Not built yet: this checks the configuration and
// plugins and then says plainly what is missing, rather than pretending to serve.
#include <fmt/format.h>

#include "cli/command.hpp"
#include "cli/common.hpp"

namespace kiln::cli {
namespace {

int run(const std::vector<std::string>& argv) {
  Args args(argv, {"--config"}, {});
  if (!args.ok()) return usage_error("serve", args.error());
  Config config = load_config_or_empty(args.value("--config"));
  PluginRegistry registry;
  load_plugins(registry, config);
  fmt::print(stderr, "kiln serve: configuration {} is valid; {} plugin component(s) available.\n",
             config.file.empty() ? "(none)" : config.file, registry.components().size());
  for (const auto& m : config.models) fmt::print(stderr, "kiln serve: model '{}' at {}\n", m.name, m.path);
  fmt::print(stderr,
             "kiln serve: the HTTP server is not built yet; nothing is listening. Serving (the\n"
             "            OpenAI-compatible API) arrives with the serving work.\n");
  if (!config.models.empty())
    fmt::print(stderr, "kiln serve: meanwhile, try: kiln generate --model {} --prompt \"Once upon a time\" "
                       "--max-tokens 64\n",
               config.models.front().path);
  return 3;
}

const bool registered = register_command({
    "serve",
    "serve models over an OpenAI-compatible HTTP API (not built yet)",
    "usage: kiln serve --config FILE\n\n"
    "Starts the HTTP server for the models in FILE. The server is not built yet: this command\n"
    "validates the configuration and plugins, reports what is missing and exits with status 3.\n",
    &run,
});

}  // namespace
}  // namespace kiln::cli
