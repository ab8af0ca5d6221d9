// Per-request token sampling: logits processing (logit_bias, repetition / presence / frequency
// penalties), then greedy at temperature 0, else temperature, top-k, top-p and min-p over a softmax,
// drawn from the request's own seeded RNG. A sampler belongs to one sequence: the same parameters and
// seed give the same tokens whatever else shares the batch.
#pragma once

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

namespace kiln::sched {

struct SamplingParams {
  double temperature = 0;  ///< below 1e-5: greedy (ties to the lower id)
  double top_p = 1.0;
  int top_k = 0;                  ///< 0: all
  double min_p = 0;               ///< drop tokens below min_p * p(most likely)
  double presence_penalty = 0;    ///< OpenAI: minus this from every token generated at least once
  double frequency_penalty = 0;   ///< OpenAI: minus this times the token's count in the output
  double repetition_penalty = 1;  ///< transformers: logits of prompt and output tokens / (or *) this
  std::vector<std::pair<int32_t, float>> logit_bias;  ///< added to the logit (-100 bans, 100 forces)
  uint64_t seed = 0;
  int top_logprobs = -1;  ///< -1: no logprobs; 0..20: the sampled token's and this many alternatives
};

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct Sampled {
  int32_t token = 0;
  float logprob = 0;              ///< in the distribution sampled from (when logprobs were asked for)
  std::vector<TokenLogprob> top;  ///< the most likely tokens of that distribution, best first
};

class Sampler {
 public:
  /**
   * `prompt` seeds the repetition penalty (transformers applies it to prompt and output).
   * `sampleable` (bit t of word t/64, n_vocab bits; null: every id) are the ids this sampler may
   * ever pick: a model whose output layer has rows its tokenizer cannot decode (a padded
   * vocabulary) masks them for every request. It must outlive the sampler.
   */
  Sampler(const SamplingParams& p, size_t n_vocab, const std::vector<int32_t>& prompt = {},
          const uint64_t* sampleable = nullptr);

  /**
   * Picks the next token from `logits` (n_vocab values) and records it as generated. Logprobs are
   * those of the distribution the token was drawn from: after bias, penalties and temperature, with
   * tokens cut by top-k / top-p / min-p at -inf; greedy decoding reports the softmax at temperature 1
   * of the processed logits.
   */
  Sampled sample(const float* logits) { return sample(logits, nullptr); }
  /** As above, over the tokens whose bit is set in `allowed` (a grammar's mask: bit t of word t/64)
   *  and in `sampleable` only; the others are at -inf before everything else. Throws
   *  std::runtime_error when the masks allow no token. */
  Sampled sample(const float* logits, const uint64_t* allowed);

  /**
   * How many of a row's best logits this sampler needs to pick exactly as sample(logits) would,
   * with no grammar mask: 1 greedy, top_k when sampling with one; 0 when it needs the whole row
   * (logit bias, penalties, greedy logprobs, sampling without top_k). A caller asking the device
   * for candidates adds the ids `sampleable` excludes (they may rank among the best).
   */
  size_t candidates_needed() const;
  /**
   * Picks from a row's `k` best ids and their logits (value descending, ties to the lower id, as
   * the device's TOP_K gives them), with k at least candidates_needed() plus the unsampleable ids
   * (or all n_vocab): the same token, logprobs and RNG draw as sample(logits). Throws
   * std::logic_error when this sampler needs the whole row.
   */
  Sampled sample_candidates(const int32_t* ids, const float* logits, size_t k);

  const SamplingParams& params() const { return p_; }

 private:
  void process(std::vector<float>& x) const;
  /** Temperature sampling over `keep` ids sorted best first, `val[i]` the logit of `order[i]`. */
  Sampled draw(const int32_t* order, const float* val, size_t keep);
  void record(int32_t token);

  SamplingParams p_;
  size_t n_;
  const uint64_t* sampleable_;
  std::vector<uint64_t> both_;  ///< sampleable_ and a grammar's mask
  std::mt19937_64 rng_;
  std::vector<uint32_t> count_;  ///< per token: times generated
  std::vector<uint8_t> seen_;    ///< per token: in the prompt or generated (repetition penalty)
  std::vector<float> work_;
  std::vector<int32_t> order_;
  std::vector<float> sorted_;  ///< logits of order_'s first `keep` ids
};

}  // namespace kiln::sched
