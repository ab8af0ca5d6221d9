// What the checkpoint generators share: a tensor whose values are generated when it is written,
// values seeded by the tensor's name (order-independent, so goldens survive a reordering), and
// small file helpers.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "convert/gguf_convert.hpp"
#include "model/checkpoint_writer.hpp"

namespace kiln::test {

/** One tensor under its Hugging Face name (without the text model's prefix). */
struct GenTensor {
  std::string name;
  std::vector<int64_t> shape;
  bool matrix = true;  ///< stored in the spec's dtype (else f32)
  /** The values, generated when written (a benchmark-sized model never sits in memory as f32). */
  std::function<std::vector<float>()> values;
};

inline uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

/** n values uniform in [lo, hi) from a generator seeded by `key` (xorshift64). */
inline std::vector<float> uniform(const std::string& key, size_t n, float lo, float hi) {
  uint64_t x = fnv1a(key) | 1;
  std::vector<float> v(n);
  for (float& f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = lo + (hi - lo) * static_cast<float>((x >> 40) * (1.0 / 16777216.0));
  }
  return v;
}

inline size_t numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return static_cast<size_t>(n);
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& path, const std::string& text) {
  model::write_file(path, std::vector<uint8_t>(text.begin(), text.end()));
}

/**
 * A generated checkpoint as GGUF: its Hugging Face folder, written beside `path` by `write_hf` (a
 * block format's matrices as f32 values), through `kiln convert` (that format as the file type),
 * with a placeholder vocabulary of `vocab` tokens (the generated folders have no tokenizer files).
 */
inline void gguf_through_convert(const std::function<void(DType matrices, const std::string& dir)>& write_hf,
                                 DType dtype, const std::string& name, int vocab, uint32_t bos, uint32_t eos,
                                 const std::string& path) {
  const std::string dir = path + ".hf";
  write_hf(is_quantized(dtype) ? DType::f32 : dtype, dir);
  convert::ConvertOptions o;
  o.type = is_quantized(dtype) ? dtype_name(dtype) : "auto";
  o.name = name;
  o.vocab = [&](model::GgufWriter& w) { model::add_placeholder_vocab(w, vocab, bos, eos); };
  convert::convert_to_gguf(dir, path, o);
  std::filesystem::remove_all(dir);
}

}  // namespace kiln::test
