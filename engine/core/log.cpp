#include "core/log.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <mutex>

namespace kiln::log {
namespace {
Level initial_level() {
  Level l = Level::info;
  if (const char* env = std::getenv("KILN_LOG")) parse_level(env, &l);
  return l;
}
std::atomic<Level>& current() {
  static std::atomic<Level> lvl{initial_level()};
  return lvl;
}
constexpr const char* kNames[] = {"debug", "info", "warn", "error", "off"};
}  // namespace

Level level() { return current().load(std::memory_order_relaxed); }
void set_level(Level l) { current().store(l, std::memory_order_relaxed); }

bool parse_level(std::string_view s, Level* out) {
  for (int i = 0; i <= static_cast<int>(Level::off); ++i)
    if (s == kNames[i]) {
      *out = static_cast<Level>(i);
      return true;
    }
  return false;
}

void write(Level l, std::string_view message) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  // One fwrite per line so concurrent threads never interleave within a line.
  std::string line = fmt::format("{:02}:{:02}:{:02}.{:03} {:<5} {}\n", tm.tm_hour, tm.tm_min, tm.tm_sec, ms,
                                 kNames[static_cast<int>(l)], message);
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace kiln::log
