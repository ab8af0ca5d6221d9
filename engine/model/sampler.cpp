#include "model/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace kiln::model {

int32_t Sampler::sample(const float* logits, size_t n) {
  if (p_.temperature <= 0 || n == 1) return static_cast<int32_t>(std::max_element(logits, logits + n) - logits);
  std::vector<int32_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  size_t keep = p_.top_k > 0 ? std::min(n, static_cast<size_t>(p_.top_k)) : n;
  std::vector<double> prob(keep);
  const double mx = logits[idx[0]];
  double sum = 0;
  for (size_t i = 0; i < keep; ++i) sum += prob[i] = std::exp((logits[idx[i]] - mx) / p_.temperature);
  if (p_.top_p < 1.0) {
    double cum = 0;
    for (size_t i = 0; i < keep; ++i) {
      cum += prob[i] / sum;
      if (cum >= p_.top_p) {
        keep = i + 1;
        break;
      }
    }
    prob.resize(keep);
  }
  std::discrete_distribution<size_t> pick(prob.begin(), prob.end());
  return idx[pick(rng_)];
}

}  // namespace kiln::model
