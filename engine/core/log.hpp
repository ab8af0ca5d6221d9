// Logging: one line per event to stderr, "<time> <level> <message>". The level comes from the
// KILN_LOG environment variable (debug, info, warn, error, off) or set_level(); default info.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace kiln::log {

enum class Level { debug = 0, info = 1, warn = 2, error = 3, off = 4 };

Level level();
void set_level(Level l);
/** Parses "debug"/"info"/"warn"/"error"/"off"; returns false for anything else. */
bool parse_level(std::string_view s, Level* out);
void write(Level l, std::string_view message);

template <class... Args>
void debug(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::debug) write(Level::debug, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void info(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::info) write(Level::info, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::warn) write(Level::warn, fmt::format(f, std::forward<Args>(a)...));
}
template <class... Args>
void error(fmt::format_string<Args...> f, Args&&... a) {
  if (level() <= Level::error) write(Level::error, fmt::format(f, std::forward<Args>(a)...));
}

}  // namespace kiln::log
