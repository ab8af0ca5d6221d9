// The file types `kiln convert` writes and, for llama-quantize's types (Q4_K_M, Q6_K, ...), the
// format of each tensor as llama.cpp picks it (llama-quant.cpp: which tensors it quantizes at all,
// llama_tensor_get_type's per-tensor mix, and its fallbacks for rows that are not whole blocks).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kiln::convert {

struct FileType {
  const char* name;  ///< as llama.cpp spells it: "f16", "bf16", "Q4_K_M", ...
  int ftype;         ///< llama_ftype (general.file_type); -1 for "auto"
  DType base;        ///< the format of most matrices (f32 for "auto": the checkpoint's own)
  bool quantize;     ///< llama-quantize's type: per-tensor mix applied over a float file
};

/** By name (case-insensitive); nullopt for an unknown one. */
std::optional<FileType> file_type(const std::string& name);
/** Every name file_type accepts, for help and errors. */
std::vector<std::string> file_type_names();

/** llama-quantize's rule for whether a tensor is quantized at all (else it stays as it is). */
bool quantizable(const std::string& name, size_t n_dims);

/**
 * llama_tensor_get_type for one file type over one model: call pick() for the quantizable tensors
 * in the order llama.cpp visits them (sorted by name: its counters of attn_v and ffn_down tensors
 * choose which get more bits).
 */
class Mix {
 public:
  /** `names`: every tensor of the file (it counts attention tensors and looks for output.weight);
   *  `size_70b`: llama.cpp sizes the model as a 70B (one more step for attn_v). */
  Mix(const FileType& t, const std::vector<std::string>& names, int n_layer, int n_head, int n_head_kv, int n_expert,
      bool size_70b);
  /** The format of tensor `name` whose rows hold `row` values. */
  DType pick(const std::string& name, int64_t row);

 private:
  int ftype_;
  DType base_;
  int n_layer_, n_gqa_, n_expert_;
  bool size_70b_;
  int n_attention_wv_ = 0, i_attention_wv_ = 0, i_ffn_down_ = 0;
  bool has_output_ = false;
};

}  // namespace kiln::convert
