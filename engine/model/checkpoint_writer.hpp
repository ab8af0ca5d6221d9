// Writers for small safetensors and GGUF files. The project generates its own test and benchmark
// checkpoints with these (random-weight models, malformed files) instead of downloading any.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace kiln::model {

struct WriterTensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<int64_t> shape;  ///< outermost first
  std::vector<uint8_t> bytes;  ///< already in `dtype`'s storage layout
};

/** Encodes F32 values as `dtype` (F32/F16/BF16/Q8_0/Q4_0). */
std::vector<uint8_t> encode_f32(const std::vector<float>& values, DType dtype);

/** Writes a .safetensors file; throws HostError on I/O failure. */
void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
/** As above, with the file's dtype name for the tensors `stored_as` names (types DType has none of:
 *  "F8_E4M3" for bytes given as u8). */
void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::map<std::string, std::string>& stored_as);

/** Builds a GGUF v3 file: metadata in insertion order, then tensors (dims reversed to ggml's order). */
class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& v);
  void add_u32(const std::string& key, uint32_t v);
  void add_i32(const std::string& key, int32_t v);
  void add_f32(const std::string& key, float v);
  void add_bool(const std::string& key, bool v);
  void add_strings(const std::string& key, const std::vector<std::string>& v);
  void add_f32s(const std::string& key, const std::vector<float>& v);
  void add_i32s(const std::string& key, const std::vector<int32_t>& v);
  void add_bools(const std::string& key, const std::vector<bool>& v);
  void add_tensor(WriterTensor t);
  /** A tensor whose bytes `produce` makes when the file is written, so a converter holds one tensor
   *  at a time; it must return exactly the bytes `dtype` and `shape` take. Returns that size. */
  size_t add_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                    std::function<std::vector<uint8_t>()> produce);
  /** The file as bytes (alignment 32). */
  std::vector<uint8_t> bytes() const;
  /** Writes the file, streaming the tensors (a produced tensor is made, written and dropped). */
  void write(const std::string& path) const;
  size_t tensor_count() const { return tensors_.size(); }

 private:
  static constexpr size_t kAlign = 32;
  std::vector<uint8_t> header() const;
  std::vector<uint8_t> kv_;
  uint64_t n_kv_ = 0;
  struct Entry {
    WriterTensor t;
    std::function<std::vector<uint8_t>()> produce;  ///< set: t.bytes is made by it when written
    size_t size = 0;                                ///< bytes in the file
  };
  static std::vector<uint8_t> made(const Entry& e);
  std::vector<Entry> tensors_;
};

/**
 * A made-up SentencePiece vocabulary of `n_vocab` tokens for generated models: <unk>, then `bos` and
 * `eos` as control tokens where they fall, the 256 byte tokens (so any text has a spelling), then
 * placeholder pieces. llama.cpp refuses a GGUF without tokenizer.ggml.model and sizes the embedding
 * from the token list; kiln reads the same vocabulary.
 */
void add_placeholder_vocab(GgufWriter& w, int n_vocab, uint32_t bos = 1, uint32_t eos = 2);

void write_file(const std::string& path, const std::vector<uint8_t>& bytes);

}  // namespace kiln::model
