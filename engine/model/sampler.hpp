// Token sampling for `kiln generate`: greedy at temperature 0, otherwise temperature, top-k, top-p
// over a softmax, drawn from the request's own seeded RNG (same seed, same tokens).
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace kiln::model {

struct SamplingParams {
  double temperature = 0;  ///< 0: greedy (ties to the lower id)
  double top_p = 1.0;
  int top_k = 0;           ///< 0: all
  uint64_t seed = 0;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p) : p_(p), rng_(p.seed) {}
  int32_t sample(const float* logits, size_t n);

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace kiln::model
