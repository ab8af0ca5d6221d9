#include "sched/sampler.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace kiln::sched {

Sampler::Sampler(const SamplingParams& p, size_t n_vocab, const std::vector<int32_t>& prompt,
                 const uint64_t* sampleable)
    : p_(p), n_(n_vocab), sampleable_(sampleable), rng_(p.seed), count_(n_vocab, 0), work_(n_vocab), order_(n_vocab) {
  if (p_.repetition_penalty != 1) {
    seen_.assign(n_vocab, 0);
    for (int32_t t : prompt)
      if (t >= 0 && static_cast<size_t>(t) < n_) seen_[static_cast<size_t>(t)] = 1;
  }
}

void Sampler::process(std::vector<float>& x) const {
  for (const auto& [t, b] : p_.logit_bias)
    if (t >= 0 && static_cast<size_t>(t) < n_) x[static_cast<size_t>(t)] += b;
  if (p_.repetition_penalty != 1) {
    const float r = static_cast<float>(p_.repetition_penalty);
    for (size_t i = 0; i < n_; ++i)
      if (seen_[i]) x[i] = x[i] > 0 ? x[i] / r : x[i] * r;
  }
  if (p_.presence_penalty != 0 || p_.frequency_penalty != 0) {
    for (size_t i = 0; i < n_; ++i)
      if (count_[i]) x[i] -= static_cast<float>(p_.presence_penalty + p_.frequency_penalty * count_[i]);
  }
}

Sampled Sampler::sample(const float* logits, const uint64_t* allowed) {
  std::vector<float>& x = work_;
  std::copy(logits, logits + n_, x.begin());
  process(x);
  if (sampleable_ && allowed) {
    both_.resize((n_ + 63) / 64);
    for (size_t w = 0; w < both_.size(); ++w) both_[w] = allowed[w] & sampleable_[w];
    allowed = both_.data();
  } else if (sampleable_) {
    allowed = sampleable_;
  }
  size_t n_allowed = n_;
  if (allowed) {
    n_allowed = 0;
    constexpr float kNone = -std::numeric_limits<float>::infinity();
    for (size_t i = 0; i < n_; ++i) {
      const bool ok = (allowed[i >> 6] >> (i & 63)) & 1;
      n_allowed += ok;
      if (!ok) x[i] = kNone;
    }
    if (n_allowed == 0) throw std::runtime_error("the grammar allows no token of this model's vocabulary here");
  }
  const bool want_lp = p_.top_logprobs >= 0;
  const bool greedy = p_.temperature < 1e-5 || n_ == 1;  // a tinier temperature is greedy (and 1/T overflows)
  // Sorted best first (ties: lower id first), as far as needed; under a mask only the allowed
  // tokens are candidates (a JSON state allows a few hundred of 150k: sorting them alone is cheap).
  order_.resize(n_);
  if (allowed) {
    size_t k = 0;
    for (size_t i = 0; i < n_; ++i)
      if ((allowed[i >> 6] >> (i & 63)) & 1) order_[k++] = static_cast<int32_t>(i);
    order_.resize(k);
  } else {
    std::iota(order_.begin(), order_.end(), 0);
  }
  const auto better = [&](int32_t a, int32_t b) {
    const float xa = x[static_cast<size_t>(a)], xb = x[static_cast<size_t>(b)];
    return xa > xb || (xa == xb && a < b);
  };
  Sampled out;
  if (greedy) {
    out.token = *std::min_element(order_.begin(), order_.end(), better);
  } else {
    size_t keep = n_;
    if (p_.top_k > 0 && static_cast<size_t>(p_.top_k) < order_.size()) {
      keep = static_cast<size_t>(p_.top_k);
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep), order_.end(), better);
    } else {
      std::sort(order_.begin(), order_.end(), better);
    }
    keep = std::min(keep, order_.size());
    sorted_.resize(keep);
    for (size_t i = 0; i < keep; ++i) sorted_[i] = x[static_cast<size_t>(order_[i])];
    out = draw(order_.data(), sorted_.data(), keep);
  }
  if (greedy && want_lp) {
    // log-softmax of the processed logits at temperature 1.
    const float mx = x[static_cast<size_t>(out.token)];
    double sum = 0;
    for (size_t i = 0; i < n_; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
    const double lse = mx + std::log(sum);
    out.logprob = static_cast<float>(x[static_cast<size_t>(out.token)] - lse);
    const size_t k = std::min(order_.size(), static_cast<size_t>(p_.top_logprobs));
    if (k) {
      std::partial_sort(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(k), order_.end(), better);
      for (size_t i = 0; i < k; ++i) {
        const float v = x[static_cast<size_t>(order_[i])];
        if (std::isinf(v) && v < 0) break;
        out.top.push_back({order_[i], static_cast<float>(v - lse)});
      }
    }
  }
  record(out.token);
  return out;
}

Sampled Sampler::draw(const int32_t* order, const float* val, size_t keep) {
  const double inv_t = 1.0 / p_.temperature;
  std::vector<double> prob(keep);
  const double mx = val[0];
  for (size_t i = 0; i < keep; ++i) prob[i] = std::exp((val[i] - mx) * inv_t);
  if (p_.min_p > 0) {
    const double floor = p_.min_p * prob[0];
    size_t k = 1;
    while (k < keep && prob[k] >= floor) ++k;
    keep = k;
  }
  if (p_.top_p < 1.0) {
    double total = 0, cum = 0;
    for (size_t i = 0; i < keep; ++i) total += prob[i];
    for (size_t i = 0; i < keep; ++i) {
      cum += prob[i];
      if (cum >= p_.top_p * total) {
        keep = i + 1;
        break;
      }
    }
  }
  prob.resize(keep);
  const double sum = std::accumulate(prob.begin(), prob.end(), 0.0);
  // One uniform draw per token from the request's own stream.
  const double u = std::uniform_real_distribution<double>(0.0, sum)(rng_);
  double cum = 0;
  size_t pick = keep - 1;
  for (size_t i = 0; i < keep; ++i) {
    cum += prob[i];
    if (u < cum) {
      pick = i;
      break;
    }
  }
  Sampled out;
  out.token = order[pick];
  if (p_.top_logprobs >= 0) {
    out.logprob = static_cast<float>(std::log(prob[pick] / sum));
    const size_t k = std::min(keep, static_cast<size_t>(p_.top_logprobs));
    for (size_t i = 0; i < k; ++i) out.top.push_back({order[i], static_cast<float>(std::log(prob[i] / sum))});
  }
  return out;
}

void Sampler::record(int32_t token) {
  const size_t t = static_cast<size_t>(token);
  ++count_[t];
  if (!seen_.empty()) seen_[t] = 1;
}

size_t Sampler::candidates_needed() const {
  if (!p_.logit_bias.empty() || p_.repetition_penalty != 1 || p_.presence_penalty != 0 || p_.frequency_penalty != 0)
    return 0;
  if (p_.temperature < 1e-5 || n_ == 1) return p_.top_logprobs >= 0 ? 0 : 1;  // greedy logprobs: the whole softmax
  return p_.top_k > 0 ? static_cast<size_t>(p_.top_k) : 0;
}

Sampled Sampler::sample_candidates(const int32_t* ids, const float* logits, size_t k) {
  const size_t need = candidates_needed();
  if (need == 0) throw std::logic_error("this sampler needs the whole logits row, not candidates");
  // The candidates come sorted as `better` orders them; the unsampleable ones drop out.
  order_.clear();
  sorted_.clear();
  for (size_t i = 0; i < k; ++i) {
    const auto t = static_cast<size_t>(ids[i]);
    if (t >= n_ || (sampleable_ && !((sampleable_[t >> 6] >> (t & 63)) & 1))) continue;
    order_.push_back(ids[i]);
    sorted_.push_back(logits[i]);
  }
  if (order_.empty()) throw std::runtime_error("no sampleable token among the candidates");
  Sampled out;
  const bool greedy = p_.temperature < 1e-5 || n_ == 1;
  if (greedy)
    out.token = order_[0];
  else
    out = draw(order_.data(), sorted_.data(), std::min(need, order_.size()));
  record(out.token);
  return out;
}

}  // namespace kiln::sched
