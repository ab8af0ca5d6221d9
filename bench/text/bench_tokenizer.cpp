// bench_text: single-thread encode MB/s on war-and-peace with the Qwen3 tokenizer (and Gemma 3),
// tokenizer.json load time, and the ratio to the @lenml/tokenizers JS oracle timed in the same run.
//   build-text/bin/bench_text [--repeat N] [--no-oracle] [--model qwen3|gemma3]
// Files: $KILN_FIXTURES (default ../shared/fixtures) and $KILN_ORACLE_DIR (default .cache/oracle).
#include <fmt/format.h>
#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "source_paths.hpp"
#include "text/stream_decoder.hpp"
#include "text/tokenizer.hpp"

namespace fs = std::filesystem;
using kiln::text::Tokenizer;
using Clock = std::chrono::steady_clock;

namespace {

std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return std::move(ss).str();
}

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// CPU time of this thread: on a shared, oversubscribed machine wall time mostly measures the
// neighbours, so throughput is reported per CPU-second (what one dedicated thread would do).
double thread_cpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Returns the JS oracle's encode time for `corpus` in seconds, or a negative value when unavailable.
double oracle_seconds(const fs::path& oracle, const fs::path& model, const fs::path& corpus_file) {
  if (std::system("node --version > /dev/null 2>&1") != 0 || !fs::exists(oracle / "node_modules" / "@lenml" / "tokenizers")) return -1;
  fs::path req = fs::temp_directory_path() / fmt::format("kiln-bench-text-{}.json", ::getpid());
  fs::path out = fs::temp_directory_path() / fmt::format("kiln-bench-text-{}.out", ::getpid());
  {
    std::ofstream f(req);
    f << nlohmann::json({{"dir", model.string()}, {"bench", read_file(corpus_file)}}).dump();
  }
  std::string cmd = fmt::format("KILN_ORACLE_DIR='{}' node '{}/tools/oracle/tokenize.mjs' < '{}' > '{}'", oracle.string(),
                                KILN_SOURCE_DIR, req.string(), out.string());
  int rc = std::system(cmd.c_str());
  std::string reply = read_file(out);
  fs::remove(req);
  fs::remove(out);
  if (rc != 0) return -1;
  return nlohmann::json::parse(reply).value("bench_seconds", -1.0);
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 3;
  bool oracle = true;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc) repeat = std::max(1, std::atoi(argv[++i]));
    else if (a == "--no-oracle") oracle = false;
    else if (a == "--model" && i + 1 < argc) only = argv[++i];
    else { fmt::print(stderr, "usage: bench_text [--repeat N] [--no-oracle] [--model qwen3|gemma3]\n"); return 2; }
  }
  fs::path fixtures = std::getenv("KILN_FIXTURES") ? fs::path(std::getenv("KILN_FIXTURES")) : fs::path(KILN_SOURCE_DIR) / ".." / "shared" / "fixtures";
  fs::path oracle_dir = std::getenv("KILN_ORACLE_DIR") ? fs::path(std::getenv("KILN_ORACLE_DIR")) : fs::path(KILN_SOURCE_DIR) / ".cache" / "oracle";
  fs::path corpus_file = fixtures / "corpora" / "war-and-peace.txt";
  std::string corpus = read_file(corpus_file);
  if (corpus.empty()) { fmt::print(stderr, "bench_text: missing {}\n", corpus_file.string()); return 1; }

  fmt::print("war-and-peace.txt: {:.2f} MB; MB/s per CPU-second of one thread (wall-clock MB/s in brackets)\n",
             static_cast<double>(corpus.size()) / 1e6);
  fmt::print("{:<8} {:>14} {:>22} {:>22} {:>10} {:>12} {:>10} {:>10}\n", "model", "load s (wall)", "encode MB/s cold",
             "encode MB/s warm", "tokens", "JS MB/s", "ratio", "dec MB/s");
  for (const char* pkg : {"qwen3", "gemma3"}) {
    if (!only.empty() && only != pkg) continue;
    fs::path model = oracle_dir / "node_modules" / "@lenml" / (std::string("tokenizer-") + pkg) / "models";
    if (!fs::exists(model / "tokenizer.json")) { fmt::print("{:<8} missing {} (run scripts/setup.sh)\n", pkg, model.string()); continue; }
    auto t0 = Clock::now();
    double c0 = thread_cpu();
    Tokenizer tok = Tokenizer::from_dir(model.string());
    double load_cpu = thread_cpu() - c0, load = seconds_since(t0);
    // Cold: the first encode, with an empty word cache. Warm: best of the repeats (the steady state
    // of a server, whose per-thread cache already holds the common words).
    double cold = 0, cold_wall = 0, warm = 1e9, warm_wall = 1e9;
    std::size_t ntok = 0;
    for (int r = 0; r <= repeat; ++r) {
      t0 = Clock::now();
      c0 = thread_cpu();
      auto ids = tok.encode(corpus);
      double cpu = thread_cpu() - c0, wall = seconds_since(t0);
      if (r == 0) { cold = cpu; cold_wall = wall; }
      else { warm = std::min(warm, cpu); warm_wall = std::min(warm_wall, wall); }
      ntok = ids.size();
    }
    auto ids = tok.encode(corpus);
    c0 = thread_cpu();
    std::string text = tok.decode(ids);
    double dec = thread_cpu() - c0;
    double mb = static_cast<double>(corpus.size()) / 1e6;
    double js = oracle ? oracle_seconds(oracle_dir, model, corpus_file) : -1;
    fmt::print("{:<8} {:>14} {:>22} {:>22} {:>10} {:>12} {:>10} {:>10.1f}\n", pkg, fmt::format("{:.3f} ({:.3f})", load_cpu, load),
               fmt::format("{:.1f} ({:.1f})", mb / cold, mb / cold_wall), fmt::format("{:.1f} ({:.1f})", mb / warm, mb / warm_wall), ntok,
               js > 0 ? fmt::format("{:.2f}", mb / js) : "n/a", js > 0 ? fmt::format("{:.0f}x", js / cold) : "n/a", mb / dec);
    if (text != corpus) fmt::print("  warning: decode(encode(corpus)) differs from the corpus\n");
  }
  return 0;
}
