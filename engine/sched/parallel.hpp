// parallel_each(n, f): f(0..n-1) on TBB's workers, each index once, returning when all are done.
// The hand-offs are also made through our own atomics so ThreadSanitizer sees them: Debian's libtbb
// is not instrumented, and TBB's inlined scheduling code races by design under TSan. A TSan build
// therefore runs the loop inline, in order (what it checks is everything around it).
#pragma once

#include <atomic>
#include <cstddef>

#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define KILN_UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define KILN_UNDER_TSAN 1
#endif

#ifndef KILN_UNDER_TSAN
#include <tbb/parallel_for.h>
#endif

namespace kiln::sched {

template <class F>
void parallel_each(size_t n, F&& f) {
#ifdef KILN_UNDER_TSAN
  for (size_t i = 0; i < n; ++i) f(i);
#else
  if (n <= 1) {
    if (n) f(0);
    return;
  }
  std::atomic<size_t> sync{0};
  sync.store(0, std::memory_order_release);
  tbb::parallel_for(size_t{0}, n, [&](size_t i) {
    (void)sync.load(std::memory_order_acquire);
    f(i);
    sync.fetch_add(1, std::memory_order_acq_rel);
  });
  (void)sync.load(std::memory_order_acquire);
#endif
}

}  // namespace kiln::sched
