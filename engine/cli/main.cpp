// kiln: the command-line entry point. Subcommands live in cmd_*.cpp and register themselves.
#include <fmt/format.h>

#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/version.hpp"

namespace {
void print_help() {
  fmt::print("kiln {} - an LLM serving engine with plugin architectures\n\n", kiln::cli::kVersion);
  fmt::print("usage: kiln <command> [options]   (kiln <command> --help for details)\n\ncommands:\n");
  for (const auto& c : kiln::cli::commands()) fmt::print("  {:<18} {}\n", c.name, c.summary);
  fmt::print("\noptions:\n  --version          print the version and plugin ABI\n  --help             this text\n");
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    print_help();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    fmt::print("kiln {} (plugin ABI {}.{})\n", kiln::cli::kVersion, KILN_ABI_MAJOR, KILN_ABI_MINOR);
    return 0;
  }
  // Longest match first so "config check" wins over a hypothetical "config".
  const kiln::cli::Command* best = nullptr;
  size_t best_words = 0;
  for (const auto& c : kiln::cli::commands()) {
    std::vector<std::string> words;
    std::string name = c.name;
    for (size_t p = 0, q; p <= name.size(); p = q + 1) {
      q = name.find(' ', p);
      if (q == std::string::npos) q = name.size();
      words.push_back(name.substr(p, q - p));
    }
    if (words.size() > args.size() || words.size() <= best_words) continue;
    if (std::equal(words.begin(), words.end(), args.begin())) best = &c, best_words = words.size();
  }
  if (!best) {
    fmt::print(stderr, "kiln: unknown command '{}'. Run 'kiln --help' for the list.\n", args[0]);
    return 2;
  }
  std::vector<std::string> rest(args.begin() + static_cast<long>(best_words), args.end());
  for (const auto& a : rest)
    if (a == "--help" || a == "-h") {
      fmt::print("{}", best->help);
      return 0;
    }
  try {
    return best->run(rest);
  } catch (const std::exception& e) {
    fmt::print(stderr, "kiln {}: {}\n", best->name, e.what());
    return 1;
  }
}
