// This machine's limits, measured in-process: STREAM-style triad bandwidth and FMA peak.
#pragma once

namespace kiln::bench {

/** Best-of-`reps` STREAM triad a = b + s·c over three arrays of `mib` MiB each, all threads, GB/s
 *  (bytes counted as 3 arrays per pass, STREAM convention). */
double triad_gbs(int mib = 256, int reps = 5);
/** Best-of-`reps` fp32 FMA throughput with independent register-resident chains, all threads,
 *  GFLOP/s (an FMA counts 2). */
double fma_peak_gflops(int reps = 5);

}  // namespace kiln::bench
