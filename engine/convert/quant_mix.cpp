#include "convert/quant_mix.hpp"

#include <algorithm>
#include <cctype>
#include <cstdio>

#include "core/error.hpp"

namespace kiln::convert {
namespace {

// llama.h's llama_ftype values of the types below.
enum Ftype : int {
  kAuto = -1,
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ8_0 = 7,
  kQ5_0 = 8,
  kQ5_1 = 9,
  kQ2_K = 10,
  kQ3_K_S = 11,
  kQ3_K_M = 12,
  kQ3_K_L = 13,
  kQ4_K_S = 14,
  kQ4_K_M = 15,
  kQ5_K_S = 16,
  kQ5_K_M = 17,
  kQ6_K = 18,
  kIQ4_NL = 25,
  kIQ4_XS = 30,
  kBF16 = 32,
};

const FileType kTypes[] = {
    {"auto", kAuto, DType::f32, false},       {"f32", kF32, DType::f32, false},
    {"f16", kF16, DType::f16, false},         {"bf16", kBF16, DType::bf16, false},
    {"q8_0", kQ8_0, DType::q8_0, false},      {"Q4_0", kQ4_0, DType::q4_0, true},
    {"Q4_1", kQ4_1, DType::q4_1, true},       {"Q5_0", kQ5_0, DType::q5_0, true},
    {"Q5_1", kQ5_1, DType::q5_1, true},       {"Q2_K", kQ2_K, DType::q2_k, true},
    {"Q3_K_S", kQ3_K_S, DType::q3_k, true},   {"Q3_K_M", kQ3_K_M, DType::q3_k, true},
    {"Q3_K_L", kQ3_K_L, DType::q3_k, true},   {"Q4_K_S", kQ4_K_S, DType::q4_k, true},
    {"Q4_K_M", kQ4_K_M, DType::q4_k, true},   {"Q5_K_S", kQ5_K_S, DType::q5_k, true},
    {"Q5_K_M", kQ5_K_M, DType::q5_k, true},   {"Q6_K", kQ6_K, DType::q6_k, true},
    {"IQ4_NL", kIQ4_NL, DType::iq4_nl, true}, {"IQ4_XS", kIQ4_XS, DType::iq4_xs, true},
};

bool has(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

/** llama.cpp's use_more_bits: the first and last eighth of the layers, and every third between. */
bool use_more_bits(int i, int n) {
  return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

}  // namespace

std::optional<FileType> file_type(const std::string& name) {
  auto lower = [](std::string s) {
    for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return s;
  };
  for (const FileType& t : kTypes)
    if (lower(t.name) == lower(name)) return t;
  return std::nullopt;
}

std::vector<std::string> file_type_names() {
  std::vector<std::string> v;
  for (const FileType& t : kTypes) v.emplace_back(t.name);
  return v;
}

bool quantizable(const std::string& name, size_t n_dims) {
  if (name.size() < 6 || name.compare(name.size() - 6, 6, "weight") != 0) return false;
  if (n_dims < 2) return false;
  for (const char* keep :
       {"_norm.weight", "ffn_gate_inp.weight", "ffn_gate_tid2eid.weight", "altup", "laurel", "per_layer_model_proj",
        "ssm_conv1d", "shortconv.conv.weight", "indexer.k_proj.weight", "indexer.q_proj.weight", "attn_rel_b.weight",
        ".position_embd", ".rel_pos", ".patch_embd", ".patch_merger"})
    if (has(name, keep)) return false;
  return name != "position_embd.weight" && name != "token_types.weight";
}

Mix::Mix(const FileType& t, const std::vector<std::string>& names, int n_layer, int n_head, int n_head_kv, int n_expert,
         bool size_70b)
    : ftype_(t.ftype),
      base_(t.base),
      n_layer_(n_layer),
      n_gqa_(n_head_kv ? n_head / n_head_kv : 0),
      n_expert_(std::max(1, n_expert)),
      size_70b_(size_70b) {
  for (const std::string& n : names) {
    if (has(n, "attn_v.weight") || has(n, "attn_qkv.weight") || has(n, "attn_kv_b.weight")) ++n_attention_wv_;
    if (n == "output.weight") has_output_ = true;
  }
}

DType Mix::pick(const std::string& name, int64_t row) {
  const int f = ftype_;
  DType t = base_;
  const bool moe8 = n_expert_ == 8;
  // llama.cpp's tensor categories, matched in its order.
  const bool output = name == "output.weight";
  const bool embd = name == "token_embd.weight" || name == "per_layer_token_embd.weight";
  const bool attn_v =
      !output && !embd && (has(name, "attn_qkv.weight") || has(name, "attn_kv_b.weight") || has(name, "attn_v.weight"));
  if (output || (!has_output_ && embd)) {  // a tied embedding is quantized as the output
    t = row % quant_block(t) ? DType::q8_0 : t != DType::q8_0 ? DType::q6_k : t;
  } else if (embd) {
    // llama.cpp changes these only for the i-quants and the ternary types.
  } else if (attn_v) {  // attn_v, and the fused projections that hold it
    if (f == kQ2_K)
      t = n_gqa_ >= 4 ? DType::q4_k : DType::q3_k;
    else if (f == kQ3_K_M)
      t = i_attention_wv_ < 2 ? DType::q5_k : DType::q4_k;
    else if (f == kQ3_K_L)
      t = DType::q5_k;
    else if ((f == kIQ4_NL || f == kIQ4_XS) && n_gqa_ >= 4)
      t = DType::q5_k;
    else if ((f == kQ4_K_M || f == kQ5_K_M) && use_more_bits(i_attention_wv_, n_attention_wv_))
      t = DType::q6_k;
    else if (f == kQ4_K_S && i_attention_wv_ < 4)
      t = DType::q5_k;
    // 8 query heads share each attn_v row: more bits cost little there.
    if (size_70b_ && (t == DType::q3_k || t == DType::q4_k)) t = DType::q5_k;
    if (moe8) t = DType::q8_0;
    ++i_attention_wv_;
  } else if (has(name, "attn_k.weight")) {
    if (moe8) t = DType::q8_0;
  } else if (has(name, "attn_q.weight")) {
    // changed only for the i-quants
  } else if (has(name, "attn_output.weight")) {
    if (moe8) {
      if (f == kQ2_K || f == kQ3_K_S || f == kQ3_K_M || f == kQ4_K_S || f == kQ4_K_M || f == kIQ4_NL || f == kIQ4_XS)
        t = DType::q5_k;
    } else if (f == kQ2_K) {
      t = DType::q3_k;
    } else if (f == kQ3_K_M) {
      t = DType::q4_k;
    } else if (f == kQ3_K_L) {
      t = DType::q5_k;
    }
  } else if (!has(name, "ffn_up") && !has(name, "ffn_gate") && has(name, "ffn_down")) {
    int i = i_ffn_down_;
    if (n_expert_ > 1 && std::sscanf(name.c_str(), "blk.%d.", &i) != 1)
      throw_error("[convert] cannot read the layer of tensor {}", name);
    const int n = n_layer_;
    if (f == kQ2_K)
      t = DType::q3_k;
    else if (f == kQ3_K_M)
      t = i < n / 16 ? DType::q5_k : DType::q4_k;
    else if (f == kQ3_K_L)
      t = DType::q5_k;
    else if (f == kQ4_K_M) {
      if (use_more_bits(i, n)) t = DType::q6_k;
    } else if (i < n / 8 && (f == kIQ4_NL || f == kIQ4_XS))
      t = DType::q5_k;
    else if (f == kQ5_K_M && use_more_bits(i, n))
      t = DType::q6_k;
    else if (f == kQ4_K_S && i < n / 8)
      t = DType::q5_k;
    ++i_ffn_down_;
  }
  if (row % quant_block(t) == 0) return t;
  // Rows that are not whole blocks of the type picked: llama.cpp's fallbacks.
  DType fb;
  switch (t) {
    case DType::q4_k:
      fb = DType::q5_0;
      break;
    case DType::q5_k:
      fb = DType::q5_1;
      break;
    case DType::q6_k:
      fb = DType::q8_0;
      break;
    case DType::q2_k:
    case DType::q3_k:
      fb = DType::q4_0;
      break;
    case DType::iq4_xs:
      fb = DType::iq4_nl;
      break;
    default:
      throw_error("[convert] tensor {}: rows of {} values are not whole blocks of {} ({})", name, row, quant_block(t),
                  dtype_name(t));
  }
  return row % quant_block(fb) ? DType::f16 : fb;
}

}  // namespace kiln::convert
