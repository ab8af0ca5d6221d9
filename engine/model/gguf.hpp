// Reader for GGUF v2/v3 files (llama.cpp's single-file checkpoints): typed metadata, tensor table
// and the tokenizer vocabulary embedded in the metadata. Dims are reversed on read so shapes are
// outermost-first like Hugging Face's (GGUF's ne[0] is the row length). Every length and offset is
// bounds-checked: a malformed file is an error naming it, never a crash.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/mapped_file.hpp"
#include "model/tensor_info.hpp"

namespace kiln::model {

/** GGUF metadata value types (gguf_type in the spec). */
enum class GgufType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};

struct GgufValue {
  GgufType type = GgufType::u32;
  GgufType elem = GgufType::u32;   ///< arrays: element type
  int64_t i = 0;                   ///< integer / bool scalars (u64 above 2^63 wraps; never seen in models)
  double f = 0;                    ///< every numeric scalar, also as double
  std::string s;                   ///< strings
  std::vector<double> nums;        ///< numeric / bool arrays
  std::vector<std::string> strs;   ///< string arrays

  bool is_number() const { return type != GgufType::string && type != GgufType::array; }
};

/** The tokenizer embedded in a GGUF (keys tokenizer.ggml.*), ready to map onto kiln_text's tokenizer. */
struct GgufVocab {
  std::string model;               ///< "llama" (SentencePiece-style), "gpt2" (byte-level BPE), "gemma4"
  std::string pre;                 ///< pre-tokenizer name for BPE ("qwen2", "llama-bpe", ...), may be empty
  std::vector<std::string> tokens;
  std::vector<float> scores;       ///< SentencePiece scores (empty for BPE)
  std::vector<int32_t> token_types;///< 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte
  std::vector<std::string> merges;  ///< BPE merges "a b" (empty for llama's SentencePiece)
  int64_t bos = -1, eos = -1, unk = -1, pad = -1;
  std::vector<int64_t> eos_ids;    ///< eos plus tokenizer.ggml.eot_token_id / eom when present
  std::optional<bool> add_bos, add_eos;
  std::string chat_template;       ///< tokenizer.chat_template, may be empty

  bool is_sentencepiece() const { return model == "llama"; }
  bool is_bpe() const { return model == "gpt2"; }
  bool is_sentencepiece_bpe() const { return model == "gemma4"; }  ///< SentencePiece pieces, BPE merges
};

class GgufFile {
 public:
  /** Maps and validates `path`; throws HostError("[gguf] <path>: ..."). */
  static GgufFile open(const std::string& path);

  uint32_t version() const { return version_; }
  const std::map<std::string, GgufValue>& metadata() const { return kv_; }
  const GgufValue* find(const std::string& key) const;
  std::string architecture() const;  ///< general.architecture ("" when absent)
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::shared_ptr<MappedFile>& mapping() const { return map_; }
  /** The embedded vocabulary, or nullopt when tokenizer.ggml.tokens is absent. */
  std::optional<GgufVocab> vocab() const;

 private:
  std::shared_ptr<MappedFile> map_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<TensorInfo> tensors_;
};

/** The ggml type id (ggml.h) GGUF files store `t` under, for the types kiln reads; nullopt for others. */
std::optional<uint32_t> ggml_type_of(DType t);

}  // namespace kiln::model
