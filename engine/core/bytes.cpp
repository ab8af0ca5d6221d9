#include "core/bytes.hpp"

#include <fmt/format.h>

namespace kiln {

std::string format_bytes(uint64_t b) {
  if (b >= (1ull << 30)) return fmt::format("{:.1f} GiB", static_cast<double>(b) / (1ull << 30));
  if (b >= (1ull << 20)) return fmt::format("{:.1f} MiB", static_cast<double>(b) / (1ull << 20));
  if (b >= (1ull << 10)) return fmt::format("{:.1f} KiB", static_cast<double>(b) / (1ull << 10));
  return fmt::format("{} B", b);
}

}  // namespace kiln
