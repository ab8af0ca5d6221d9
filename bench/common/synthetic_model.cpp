#include "synthetic_model.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include "model/checkpoint_writer.hpp"

namespace kiln::bench {

// Random weights, generated fast (xorshift) and encoded to the requested type.
std::vector<float> random_values(size_t n, uint64_t seed, float scale) {
  std::vector<float> v(n);
  tbb::parallel_for(tbb::blocked_range<size_t>(0, n, 1 << 16), [&](const tbb::blocked_range<size_t>& r) {
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + r.begin() + 1;
    for (size_t i = r.begin(); i < r.end(); ++i) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      v[i] = scale * (static_cast<float>(x >> 40) / static_cast<float>(1 << 24) - 0.5f);
    }
  });
  return v;
}

/** Writes the model; returns the bytes of weights read per decoded token (matrices incl. lm_head). */
uint64_t write_qwen3(const std::string& path, const Shape& s, DType t) {
  model::GgufWriter w;
  w.add_string("general.architecture", "qwen3");
  w.add_u32("qwen3.block_count", static_cast<uint32_t>(s.layers));
  w.add_u32("qwen3.embedding_length", static_cast<uint32_t>(s.D));
  w.add_u32("qwen3.feed_forward_length", static_cast<uint32_t>(s.F));
  w.add_u32("qwen3.attention.head_count", static_cast<uint32_t>(s.H));
  w.add_u32("qwen3.attention.head_count_kv", static_cast<uint32_t>(s.KV));
  w.add_u32("qwen3.attention.key_length", static_cast<uint32_t>(s.Dh));
  w.add_u32("qwen3.attention.value_length", static_cast<uint32_t>(s.Dh));  // llama.cpp assumes 64 without it
  w.add_u32("qwen3.context_length", 4096);
  w.add_u32("qwen3.vocab_size", static_cast<uint32_t>(s.V));
  w.add_f32("qwen3.attention.layer_norm_rms_epsilon", 1e-6f);
  w.add_f32("qwen3.rope.freq_base", 1e6f);
  model::add_placeholder_vocab(w, s.V);
  uint64_t per_token = 0, seed = 1;
  auto mat = [&](const std::string& name, int64_t rows, int64_t cols, bool counts = true) {
    auto bytes = model::encode_f32(random_values(static_cast<size_t>(rows * cols), seed++, 0.05f), t);
    if (counts) per_token += bytes.size();
    w.add_tensor({name, t, {rows, cols}, std::move(bytes)});
  };
  auto vec = [&](const std::string& name, int64_t n) {
    std::vector<float> ones(static_cast<size_t>(n), 1.0f);
    w.add_tensor({name, DType::f32, {n}, model::encode_f32(ones, DType::f32)});
  };
  mat("token_embd.weight", s.V, s.D, false);  // one row gathered per token
  mat("output.weight", s.V, s.D);
  vec("output_norm.weight", s.D);
  for (int l = 0; l < s.layers; ++l) {
    const std::string p = "blk." + std::to_string(l) + ".";
    vec(p + "attn_norm.weight", s.D);
    vec(p + "ffn_norm.weight", s.D);
    vec(p + "attn_q_norm.weight", s.Dh);
    vec(p + "attn_k_norm.weight", s.Dh);
    mat(p + "attn_q.weight", s.H * s.Dh, s.D);
    mat(p + "attn_k.weight", s.KV * s.Dh, s.D);
    mat(p + "attn_v.weight", s.KV * s.Dh, s.D);
    mat(p + "attn_output.weight", s.D, s.H * s.Dh);
    mat(p + "ffn_gate.weight", s.F, s.D);
    mat(p + "ffn_up.weight", s.F, s.D);
    mat(p + "ffn_down.weight", s.D, s.F);
  }
  w.write(path);
  return per_token;
}

}  // namespace kiln::bench
