// What `kiln convert` asks of each architecture (one file each: export_<arch>.cpp): from a Hugging
// Face checkpoint, the GGUF metadata and the tensors as llama.cpp's converter writes them
// (convert_hf_to_gguf.py and its conversion/*.py), each tensor's values made only when the file is
// written. Internal to engine/convert.
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/checkpoint.hpp"
#include "model/checkpoint_writer.hpp"

namespace kiln::convert {

using nlohmann::json;

/** One tensor of the GGUF being written. Its `values` read the Source, which must outlive the write. */
struct OutTensor {
  std::string name;            ///< llama.cpp's GGUF name
  std::vector<int64_t> shape;  ///< outermost first
  std::function<std::vector<float>()> values;
  DType source = DType::f32;  ///< the checkpoint's storage type (a float-typed file keeps it)
  /** llama.cpp's converter keeps it in F32 whatever the file type (routers, convs; 1-D tensors,
   *  norms and names not ending in ".weight" always). */
  bool keep_f32 = false;
};

/** The Hugging Face checkpoint being converted: its text config and tensors by name. */
class Source {
 public:
  explicit Source(const model::Checkpoint& c);
  const json& config() const { return config_; }
  /** The text model's tensor names as a text model spells them ("model.layers.0...": a multimodal
   *  wrapper's "model.language_model." prefix taken off, its other towers left out), and lm_head. */
  std::vector<std::string> text_tensors() const;
  /** `name` as a text model spells it ("model.layers.0..."), found also under a multimodal
   *  wrapper's "model.language_model." prefix. */
  bool has(const std::string& name) const { return find(name) != nullptr; }
  const model::TensorInfo& tensor(const std::string& name) const;
  /** The tensor's values as f32; throws naming it when it is missing or not a float tensor. */
  std::vector<float> values(const std::string& name) const;
  /** Rows [first, first + n) of the tensor seen as [rows, last dim], as f32, read from the mapping
   *  alone (a split of a fused tensor never widens the whole of it). */
  std::vector<float> rows(const std::string& name, int64_t first, int64_t n) const;
  /** Throws, naming the tensor, both shapes and `why` (the config keys they come from), unless
   *  the tensor has `shape`: the layout changes index by the config's sizes. */
  void expect_shape(const std::string& name, const std::vector<int64_t>& shape, const char* why) const;
  /** An OutTensor carrying `hf` unchanged under the GGUF name `gguf`. */
  OutTensor as_is(const std::string& hf, const std::string& gguf) const;
  /** The gate (or up) half of a fused experts.gate_up_proj [E, 2I, H] (gate rows first), as
   *  llama.cpp splits it into ffn_gate_exps / ffn_up_exps [E, I, H]. */
  OutTensor split_gate_up(const std::string& hf, const std::string& gguf, int64_t E, int64_t I, int64_t H,
                          bool up) const;
  /** Per-expert tensors `<prefix>experts.<e>.<proj>.weight` [rows, cols] stacked into [E, rows, cols]. */
  OutTensor stack_experts(const std::string& prefix, const std::string& proj, const std::string& gguf, int64_t E,
                          int64_t rows, int64_t cols) const;
  /** A Qwen-style sparse MLP under `mlp` ("model.layers.<l>.mlp."): its router (kept F32, as
   *  llama.cpp keeps routers) and its E experts of width I as blk.<l>.ffn_{gate,up,down}_exps, from
   *  fused experts.gate_up_proj / down_proj or from one tensor per expert. */
  void sparse_mlp(const std::string& mlp, const std::string& blk, int64_t E, int64_t I, int64_t H,
                  std::vector<OutTensor>& out) const;
  /** A config key that must be there (throws naming it, inside `where` when given: "rope_parameters");
   *  `obj` defaults to the text config. */
  const json& need(const std::string& key, const json* obj = nullptr, const char* where = nullptr) const;
  uint32_t u32(const std::string& key) const;
  float number(const std::string& key) const;

 private:
  const model::TensorInfo* find(const std::string& name) const;
  const model::Checkpoint& ckpt_;
  json config_;
};

/** What an architecture contributes. */
struct Export {
  std::string arch;  ///< general.architecture
  std::vector<OutTensor> tensors;
  /** For the quantization mixes (llama.cpp's llama_tensor_get_type): layers, query and KV heads of
   *  layer 0, experts (0 for a dense model), and whether llama.cpp sizes the model as a "70B" (80
   *  layers of llama with grouped KV heads, or of qwen2), whose attn_v gets one more step. */
  int n_layer = 0, n_head = 0, n_head_kv = 0, n_expert = 0;
  bool size_70b = false;
};

/** Writes the architecture's metadata keys into `w` and returns its tensors. */
using Exporter = Export (*)(const Source& src, model::GgufWriter& w);

Export export_llama(const Source& src, model::GgufWriter& w);
Export export_qwen3_5(const Source& src, model::GgufWriter& w);
Export export_gemma4(const Source& src, model::GgufWriter& w);

/** The exporter for a checkpoint's model_type; throws listing the ones there are. */
Exporter exporter_for(const std::string& model_type);

/** tokenizer.json (+ tokenizer_config.json, chat template) of the checkpoint as tokenizer.ggml.*
 *  keys, the way llama.cpp's converter writes them for `arch`. */
void export_vocab(const model::Checkpoint& c, const Source& src, const std::string& arch, model::GgufWriter& w);

}  // namespace kiln::convert
