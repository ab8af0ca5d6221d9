// Whether this test binary runs under a sanitizer: heavy randomized tests then run a fraction of
// their cases (the release build runs them all), keeping the sanitizer suites within CI's budget.
// KILN_TEST_FULL=1 in the environment (or -DKILN_TEST_FULL=ON) runs the full sizes under a
// sanitizer too (nightly-style runs).
#pragma once

#include <cstdlib>
#include <cstring>

namespace kiln::test {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

/** Heavy tests run their reduced sizes: under a sanitizer, unless asked for the full ones. */
inline bool reduced() {
  static const bool r = [] {
#ifdef KILN_TEST_FULL
    return false;  // configured with -DKILN_TEST_FULL=ON
#else
    const char* full = std::getenv("KILN_TEST_FULL");
    return kSanitized && !(full && std::strcmp(full, "1") == 0);
#endif
  }();
  return r;
}

}  // namespace kiln::test
