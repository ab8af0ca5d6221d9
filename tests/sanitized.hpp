// Whether this test binary runs under a sanitizer: heavy randomized tests then run a fraction of
// their cases (the release build runs them all), keeping the sanitizer suites within CI's budget.
#pragma once

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

}  // namespace kiln::test
