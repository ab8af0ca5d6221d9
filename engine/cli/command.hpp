// kiln's subcommands register themselves: each cmd_<name>.cpp defines one static Command, so adding
// a subcommand touches no shared file. `kiln <name> --help` prints the command's help text.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace kiln::cli {

struct Command {
  const char* name;     ///< e.g. "plugins", or "config check" for a two-word command
  const char* summary;  ///< one line for `kiln --help`
  const char* help;     ///< full usage text
  int (*run)(const std::vector<std::string>& args);  ///< args after the command name
};

/** Registers at static-initialisation time; returns true so it can initialise a static. */
bool register_command(const Command& c);
const std::vector<Command>& commands();

/** Minimal option parser: --key value, --key=value, --flag, positionals. Unknown options are errors. */
class Args {
 public:
  Args(const std::vector<std::string>& args, std::vector<std::string> value_options,
       std::vector<std::string> flag_options);
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool flag(std::string_view name) const;
  bool has(std::string_view name) const;
  std::string value(std::string_view name, const std::string& def = "") const;
  const std::vector<std::string>& positionals() const { return positionals_; }

 private:
  std::vector<std::pair<std::string, std::string>> values_;
  std::vector<std::string> flags_, positionals_;
  std::string error_;
};

/** Prints "kiln <cmd>: <message>" to stderr and returns the exit code 2 (usage) or 1 (failure). */
int usage_error(const char* command, const std::string& message);
int failure(const char* command, const std::string& message);

}  // namespace kiln::cli
