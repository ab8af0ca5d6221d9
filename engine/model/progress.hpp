// A one-line progress bar on stderr for long loads. Drawn only when stderr is a terminal and the
// work is large enough to be worth watching; otherwise silent (logs and CI stay clean).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace kiln::model {

class Progress {
 public:
  /** `min_bytes`: below this total no bar is drawn. */
  Progress(std::string label, uint64_t total_bytes, uint64_t min_bytes = 256ull << 20);
  ~Progress();
  void advance(uint64_t bytes);
  void finish();
  bool visible() const { return visible_; }

 private:
  void draw(bool final_line);
  std::string label_;
  uint64_t total_, done_ = 0;
  bool visible_, finished_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace kiln::model
