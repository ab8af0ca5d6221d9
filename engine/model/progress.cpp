#include "model/progress.hpp"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

#include "core/bytes.hpp"

namespace kiln::model {

Progress::Progress(std::string label, uint64_t total_bytes, uint64_t min_bytes)
    : label_(std::move(label)),
      total_(total_bytes),
      visible_(total_bytes >= min_bytes && isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

Progress::~Progress() { finish(); }

void Progress::advance(uint64_t bytes) {
  done_ += bytes;
  if (!visible_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(100) && done_ < total_) return;
  last_draw_ = now;
  draw(false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  if (visible_) draw(true);
}

void Progress::draw(bool final_line) {
  const double frac = total_ ? static_cast<double>(done_) / static_cast<double>(total_) : 1.0;
  const int width = 30;
  const int filled = static_cast<int>(frac * width + 0.5);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  std::string bar(static_cast<size_t>(filled), '#');
  bar.resize(width, '.');
  fmt::print(stderr, "\r{} [{}] {:3.0f}%  {} / {}  {:.1f}s{}", label_, bar, frac * 100, format_bytes(done_),
             format_bytes(total_), secs, final_line ? "\n" : "");
  std::fflush(stderr);
}

}  // namespace kiln::model
