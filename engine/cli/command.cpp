#include "cli/command.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace kiln::cli {

std::vector<Command>& registry() {
  static std::vector<Command> cmds;
  return cmds;
}

bool register_command(const Command& c) {
  registry().push_back(c);
  return true;
}

const std::vector<Command>& commands() {
  auto& c = registry();
  std::sort(c.begin(), c.end(), [](const Command& a, const Command& b) { return std::string_view(a.name) < b.name; });
  return c;
}

Args::Args(const std::vector<std::string>& args, std::vector<std::string> value_options,
           std::vector<std::string> flag_options) {
  auto is = [](const std::vector<std::string>& v, const std::string& s) {
    return std::find(v.begin(), v.end(), s) != v.end();
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.size() > 2 && a.rfind("--", 0) == 0) {
      std::string key = a, val;
      bool inline_val = false;
      if (auto eq = a.find('='); eq != std::string::npos) {
        key = a.substr(0, eq);
        val = a.substr(eq + 1);
        inline_val = true;
      }
      if (is(flag_options, key) && !inline_val) {
        flags_.push_back(key);
      } else if (is(value_options, key)) {
        if (!inline_val) {
          if (i + 1 >= args.size()) {
            error_ = fmt::format("option {} needs a value", key);
            return;
          }
          val = args[++i];
        }
        values_.emplace_back(key, val);
      } else {
        error_ = fmt::format("unknown option '{}' (see --help)", key);
        return;
      }
    } else {
      positionals_.push_back(a);
    }
  }
}

bool Args::flag(std::string_view name) const { return std::find(flags_.begin(), flags_.end(), name) != flags_.end(); }
bool Args::has(std::string_view name) const {
  for (const auto& [k, v] : values_)
    if (k == name) return true;
  return false;
}
std::string Args::value(std::string_view name, const std::string& def) const {
  for (auto it = values_.rbegin(); it != values_.rend(); ++it)
    if (it->first == name) return it->second;
  return def;
}

int usage_error(const char* command, const std::string& message) {
  fmt::print(stderr, "kiln {}: {}\n", command, message);
  return 2;
}
int failure(const char* command, const std::string& message) {
  fmt::print(stderr, "kiln {}: {}\n", command, message);
  return 1;
}

}  // namespace kiln::cli
