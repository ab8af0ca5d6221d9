// A Qwen3-shaped GGUF with random weights (xorshift, fast), written by the benchmarks themselves so
// that they need no download: bench_model measures decode against the roofline on it, bench_serve
// serves it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kiln::bench {

struct Shape {  // Qwen3-0.6B's shape by default
  int layers = 28, D = 1024, H = 16, KV = 8, Dh = 128, F = 3072, V = 151936;
};

/** n values uniform in [-scale/2, scale/2), the same for the same seed. */
std::vector<float> random_values(size_t n, uint64_t seed, float scale);

/** Writes the model with a placeholder vocabulary (llama.cpp loads it); returns the weight bytes
 *  read per decoded token (matrices incl. the output). */
uint64_t write_qwen3(const std::string& path, const Shape& s, DType t);

}  // namespace kiln::bench
