// Host-side errors. Inside the engine failures are exceptions whose message starts with a
// "[component]" prefix and says what to do; at the C ABI they become kiln_error.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace kiln {

class HostError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/** throw_error("[loader] {}: not a kiln plugin", path) */
template <class... Args>
[[noreturn]] void throw_error(fmt::format_string<Args...> f, Args&&... args) {
  throw HostError(fmt::format(f, std::forward<Args>(args)...));
}

}  // namespace kiln
