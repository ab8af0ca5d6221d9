// schema_coverage: how many of JSONSchemaBench's real-world schemas kiln compiles, per subset, and
// the first reason for each refusal (keyword, format, or message), most common first.
//
//   schema_coverage DIR [--top N]
// DIR holds the benchmark's data/ folders (Github_easy, Glaiveai2K, Kubernetes, ...), one schema per
// .json file: `fetch github:guidance-ai/jsonschemabench`, then `git archive HEAD data | tar -x -C DIR`.
// Schemas compile as a server compiles a json_schema response_format without strict (JSON Schema's
// own semantics). Nothing here is timed: bench_grammar measures speed.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "grammar/json_schema.hpp"

namespace fs = std::filesystem;
using kiln::grammar::GrammarError;

namespace {

/** A refusal's bucket: the keyword or format it names, else the start of its message. */
std::string reason(const std::string& m) {
  for (const char* q : {"keyword '", "format '"})
    if (auto k = m.find(q); k != std::string::npos) return m.substr(k, m.find('\'', k + std::strlen(q)) - k + 1);
  return m.substr(0, std::min<size_t>(m.size(), 70));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    fmt::print(stderr, "usage: schema_coverage DIR [--top N]\n");
    return 2;
  }
  const fs::path dir = fs::path(argv[1]) / (fs::exists(fs::path(argv[1]) / "data") ? "data" : "");
  const int top = argc > 3 && std::string(argv[2]) == "--top" ? std::stoi(argv[3]) : 15;
  std::map<std::string, std::pair<int, int>> subsets;  // compiled, total
  std::map<std::string, int> reasons;
  int compiled = 0, total = 0;
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file() && e.path().extension() == ".json") files.push_back(e.path());
  std::sort(files.begin(), files.end());
  kiln::grammar::SchemaOptions opts;
  opts.strict = false;
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    auto& [ok, n] = subsets[f.parent_path().filename().string()];
    ++n;
    ++total;
    try {
      kiln::grammar::schema_to_grammar(ss.str(), opts);
      ++ok;
      ++compiled;
    } catch (const GrammarError& e) {
      ++reasons[reason(e.what())];
    } catch (const std::exception& e) {
      ++reasons[reason(e.what())];
    }
  }
  fmt::print("| subset | compiled | schemas | share |\n| --- | ---: | ---: | ---: |\n");
  for (const auto& [name, c] : subsets)
    fmt::print("| {} | {} | {} | {:.1f} % |\n", name, c.first, c.second, 100.0 * c.first / std::max(1, c.second));
  fmt::print("| all | {} | {} | {:.1f} % |\n\nfirst refusal reasons:\n", compiled, total,
             100.0 * compiled / std::max(1, total));
  std::vector<std::pair<int, std::string>> by;
  for (const auto& [r, n] : reasons) by.emplace_back(n, r);
  std::sort(by.rbegin(), by.rend());
  for (int i = 0; i < top && i < static_cast<int>(by.size()); ++i) fmt::print("{:6}  {}\n", by[i].first, by[i].second);
  return 0;
}
