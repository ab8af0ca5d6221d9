// A model checkpoint as the host sees it, whatever its format: a Hugging Face directory
// (config.json [+ nested text_config], generation_config.json, *.safetensors single or sharded) or a
// GGUF file. Tensors stay memory-mapped; the plugin receives config_json + model_type and declares
// which tensors it needs (check_weights() validates them against this).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/gguf.hpp"
#include "model/mapped_file.hpp"
#include "model/quantized_checkpoint.hpp"
#include "model/tensor_info.hpp"

namespace kiln::model {

enum class CheckpointFormat { hf, gguf };

/** Defaults a checkpoint ships for generation (generation_config.json, or the GGUF tokenizer keys). */
struct GenerationDefaults {
  std::vector<int64_t> stop_tokens;    ///< union of every eos id found (config.json + generation_config.json)
  std::optional<int64_t> bos;
  std::optional<double> temperature, top_p, min_p, repetition_penalty;
  std::optional<int> top_k;
  std::optional<bool> do_sample;       ///< false: the checkpoint asks for greedy decoding
};

class Checkpoint {
 public:
  /**
   * Opens a Hugging Face directory, a `.gguf` file, or a `.safetensors` file with config.json beside
   * it. Throws HostError with a "[model]" / "[safetensors]" / "[gguf]" prefix saying what to fix.
   */
  static Checkpoint open(const std::string& path);
  /**
   * The metadata alone (config, generation defaults, tokenizer files, a GGUF's vocabulary), for a
   * server that only renders and tokenizes: a Hugging Face folder needs no weight files, and no
   * tensor is listed (tensors() is empty).
   */
  static Checkpoint open_metadata(const std::string& path);

  CheckpointFormat format() const { return format_; }
  const std::string& path() const { return path_; }
  /** HF: config.json (text_config merged over it for multimodal wrappers). GGUF: metadata as JSON. */
  const std::string& config_json() const { return config_json_; }
  /** HF: model_type (text_config's for wrappers). GGUF: general.architecture. */
  const std::string& model_type() const { return model_type_; }
  const GenerationDefaults& generation() const { return generation_; }
  /** GGUF only: the embedded tokenizer. */
  const std::optional<GgufVocab>& vocab() const { return vocab_; }
  /** HF only: tokenizer.json / tokenizer_config.json paths when present, else empty. */
  const std::string& tokenizer_json() const { return tokenizer_json_; }
  const std::string& tokenizer_config_json() const { return tokenizer_config_json_; }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find(std::string_view name) const;
  /** Bytes of all tensors (what would be uploaded if every one were used). */
  uint64_t total_bytes() const;
  /** The files holding tensors, for messages. */
  std::vector<std::string> files() const;
  /** HF checkpoints with a quantization_config: what unpacking it did ("awq int4 group 128: ..."); else empty. */
  const std::string& quantization() const { return quantization_; }
  /**
   * Frees the weights unpacked from a quantized checkpoint except those whose bytes are in `keep`
   * (imported by a device, read by the host): once a device holds its copy they are dead weight.
   * The freed tensors keep their names, types and shapes; their data becomes null.
   */
  void release_unpacked(const std::vector<const std::byte*>& keep);

 private:
  void add_tensors(const std::vector<TensorInfo>& ts);
  static Checkpoint open_hf(const std::string& dir, const std::string& single_file, bool tensors = true);
  static Checkpoint open_gguf(const std::string& file);

  CheckpointFormat format_ = CheckpointFormat::hf;
  std::string path_, config_json_, model_type_, tokenizer_json_, tokenizer_config_json_;
  GenerationDefaults generation_;
  std::optional<GgufVocab> vocab_;
  std::vector<std::shared_ptr<MappedFile>> maps_;
  OwnedBytes owned_;  ///< weights unpacked from a quantized checkpoint
  std::string quantization_;
  std::vector<TensorInfo> tensors_;
  std::unordered_map<std::string, size_t> index_;
};

/** What a plugin declares about one tensor (the host copy of kiln_tensor_decl). */
struct WeightDecl {
  std::string name;
  uint32_t dtype = KILN_DTYPE_ANY;     ///< kiln_dtype
  std::vector<int64_t> shape;          ///< outermost first (including the stacked dim); -1 = any
  bool optional = false;
  bool convert = false;                ///< any float storage is fine: the host converts to `dtype`
  uint32_t stack = 0;                  ///< >0: `name` has "{}", pieces 0..stack-1 stacked on a new outer dim
  bool host = false;                   ///< KILN_TENSOR_HOST: stays in host memory, rows gathered by the host

  static WeightDecl from_c(const kiln_tensor_decl& d);
};

/**
 * Resolves every declaration against the checkpoint: per declaration the tensors that make it up
 * (one, or `stack` pieces; empty for an absent optional tensor). Throws HostError listing every
 * mismatch: the tensor, the expected and found shape/dtype, and the file.
 */
std::vector<std::vector<const TensorInfo*>> check_weights(const Checkpoint& ckpt, const std::vector<WeightDecl>& decls);

}  // namespace kiln::model
