#include "model/checkpoint_writer.hpp"

#include <fmt/format.h>

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/convert.hpp"
#include "core/error.hpp"
#include "model/gguf.hpp"

namespace kiln::model {
namespace {

template <class T>
void put(std::vector<uint8_t>& out, T v) {
  const auto* p = reinterpret_cast<const uint8_t*>(&v);
  out.insert(out.end(), p, p + sizeof(T));
}
void put_str(std::vector<uint8_t>& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

uint32_t ggml_type(DType t) {
  const auto id = ggml_type_of(t);
  if (!id) throw_error("[gguf] cannot write {} tensors", dtype_name(t));
  return *id;
}

const char* st_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::f64:
      return "F64";
    case DType::i64:
      return "I64";
    case DType::i32:
      return "I32";
    case DType::i16:
      return "I16";
    case DType::i8:
      return "I8";
    case DType::u8:
      return "U8";
    case DType::boolean:
      return "BOOL";
    default:
      throw_error("[safetensors] cannot write {} tensors", dtype_name(t));
  }
}

}  // namespace

std::vector<uint8_t> encode_f32(const std::vector<float>& v, DType dtype) {
  const auto n = static_cast<int64_t>(v.size());
  std::vector<uint8_t> out(dtype_bytes(dtype, n).value_or(0));
  if (!from_f32(dtype, v.data(), n, out.data()))
    throw_error("[model] cannot encode f32 values as {}", dtype_name(dtype));
  return out;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw_error("[model] cannot write {}", path);
}

void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  write_safetensors(path, tensors, metadata, {});
}

void write_safetensors(const std::string& path, const std::vector<WriterTensor>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::map<std::string, std::string>& stored_as) {
  nlohmann::json h = nlohmann::json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const auto& t : tensors) {
    const auto as = stored_as.find(t.name);
    h[t.name] = {{"dtype", as != stored_as.end() ? as->second : std::string(st_dtype(t.dtype))},
                 {"shape", t.shape},
                 {"data_offsets", {off, off + t.bytes.size()}}};
    off += t.bytes.size();
  }
  std::string header = h.dump();
  while ((header.size() + 8) % 8) header += ' ';  // the format pads the header with spaces to 8 bytes
  std::vector<uint8_t> out;
  put<uint64_t>(out, header.size());
  out.insert(out.end(), header.begin(), header.end());
  for (const auto& t : tensors) out.insert(out.end(), t.bytes.begin(), t.bytes.end());
  write_file(path, out);
}

void GgufWriter::add_string(const std::string& k, const std::string& v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 8);
  put_str(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_u32(const std::string& k, uint32_t v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 4);
  put<uint32_t>(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_i32(const std::string& k, int32_t v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 5);
  put<int32_t>(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_f32(const std::string& k, float v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 6);
  put<float>(kv_, v);
  ++n_kv_;
}
void GgufWriter::add_bool(const std::string& k, bool v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 7);
  put<uint8_t>(kv_, v ? 1 : 0);
  ++n_kv_;
}
void GgufWriter::add_strings(const std::string& k, const std::vector<std::string>& v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 9);
  put<uint32_t>(kv_, 8);
  put<uint64_t>(kv_, v.size());
  for (const auto& s : v) put_str(kv_, s);
  ++n_kv_;
}
void GgufWriter::add_f32s(const std::string& k, const std::vector<float>& v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 9);
  put<uint32_t>(kv_, 6);
  put<uint64_t>(kv_, v.size());
  for (float f : v) put<float>(kv_, f);
  ++n_kv_;
}
void GgufWriter::add_i32s(const std::string& k, const std::vector<int32_t>& v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 9);
  put<uint32_t>(kv_, 5);
  put<uint64_t>(kv_, v.size());
  for (int32_t x : v) put<int32_t>(kv_, x);
  ++n_kv_;
}
void GgufWriter::add_bools(const std::string& k, const std::vector<bool>& v) {
  put_str(kv_, k);
  put<uint32_t>(kv_, 9);
  put<uint32_t>(kv_, 7);
  put<uint64_t>(kv_, v.size());
  for (bool b : v) put<uint8_t>(kv_, b ? 1 : 0);
  ++n_kv_;
}
void GgufWriter::add_tensor(WriterTensor t) {
  const size_t n = t.bytes.size();
  tensors_.push_back({std::move(t), nullptr, n});
}

size_t GgufWriter::add_tensor(std::string name, DType dtype, std::vector<int64_t> shape,
                              std::function<std::vector<uint8_t>()> produce) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const auto b = dtype_bytes(dtype, n);
  if (!b) throw_error("[gguf] tensor {}: {} values are not whole {} blocks", name, n, dtype_name(dtype));
  tensors_.push_back({{std::move(name), dtype, std::move(shape), {}}, std::move(produce), static_cast<size_t>(*b)});
  return static_cast<size_t>(*b);
}

std::vector<uint8_t> GgufWriter::made(const Entry& e) {
  std::vector<uint8_t> b = e.produce();
  if (b.size() != e.size)
    throw_error("[gguf] tensor {}: made {} bytes where {} takes {}", e.t.name, b.size(), dtype_name(e.t.dtype), e.size);
  return b;
}

std::vector<uint8_t> GgufWriter::header() const {
  std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, n_kv_);
  out.insert(out.end(), kv_.begin(), kv_.end());
  uint64_t off = 0;
  for (const auto& [t, produce, size] : tensors_) {
    put_str(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<uint64_t>(out, static_cast<uint64_t>(*it));
    put<uint32_t>(out, ggml_type(t.dtype));
    put<uint64_t>(out, off);
    off += (size + kAlign - 1) / kAlign * kAlign;
  }
  out.resize((out.size() + kAlign - 1) / kAlign * kAlign, 0);
  return out;
}

std::vector<uint8_t> GgufWriter::bytes() const {
  std::vector<uint8_t> out = header();
  for (const auto& e : tensors_) {
    const std::vector<uint8_t> b = e.produce ? made(e) : e.t.bytes;
    out.insert(out.end(), b.begin(), b.end());
    out.resize((out.size() + kAlign - 1) / kAlign * kAlign, 0);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  // Streamed: a benchmark model is gigabytes, so the file is never assembled in memory.
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  const auto h = header();
  out.write(reinterpret_cast<const char*>(h.data()), static_cast<std::streamsize>(h.size()));
  const char zeros[kAlign] = {};
  for (const auto& e : tensors_) {
    const std::vector<uint8_t> m = e.produce ? made(e) : std::vector<uint8_t>{};
    const std::vector<uint8_t>& b = e.produce ? m : e.t.bytes;
    out.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
    const size_t pad = (kAlign - b.size() % kAlign) % kAlign;
    out.write(zeros, static_cast<std::streamsize>(pad));
  }
  if (!out) throw_error("[gguf] cannot write {}", path);
}

void add_placeholder_vocab(GgufWriter& w, int n_vocab, uint32_t bos, uint32_t eos) {
  std::vector<std::string> tokens;
  std::vector<int32_t> types;  // llama.cpp token types: 1 normal, 2 unknown, 3 control, 6 byte
  int next_byte = 0;
  for (int i = 0; i < n_vocab; ++i) {
    if (i == 0) {
      tokens.push_back("<unk>"), types.push_back(2);
    } else if (static_cast<uint32_t>(i) == bos) {
      tokens.push_back("<s>"), types.push_back(3);
    } else if (static_cast<uint32_t>(i) == eos) {
      tokens.push_back("</s>"), types.push_back(3);
    } else if (next_byte < 256) {
      tokens.push_back(fmt::format("<0x{:02X}>", next_byte++)), types.push_back(6);
    } else {
      tokens.push_back(fmt::format("\u2581t{}", i)), types.push_back(1);
    }
  }
  std::vector<float> scores(tokens.size());
  for (size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
  w.add_string("tokenizer.ggml.model", "llama");
  w.add_strings("tokenizer.ggml.tokens", tokens);
  w.add_f32s("tokenizer.ggml.scores", scores);
  w.add_i32s("tokenizer.ggml.token_type", types);
  w.add_u32("tokenizer.ggml.unknown_token_id", 0);
  w.add_u32("tokenizer.ggml.bos_token_id", bos);
  w.add_u32("tokenizer.ggml.eos_token_id", eos);
}

}  // namespace kiln::model
