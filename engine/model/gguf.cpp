#include "model/gguf.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace kiln::model {
namespace {

/** A float metadata value as an integer: truncated, and clamped (a cast out of range, NaN included,
 *  is undefined behaviour; a crafted file must not reach it). */
int64_t saturate_to_int(double v) {
  if (!(v == v)) return 0;
  if (v >= 9.2e18) return INT64_MAX;
  if (v <= -9.2e18) return INT64_MIN;
  return static_cast<int64_t>(v);
}


// ggml tensor type ids (ggml.h); only the ones kiln reads.
bool ggml_type_to_dtype(uint32_t t, DType* out) {
  switch (t) {
    case 0: *out = DType::f32; return true;
    case 1: *out = DType::f16; return true;
    case 2: *out = DType::q4_0; return true;
    case 3: *out = DType::q4_1; return true;
    case 6: *out = DType::q5_0; return true;
    case 7: *out = DType::q5_1; return true;
    case 8: *out = DType::q8_0; return true;
    case 10: *out = DType::q2_k; return true;
    case 11: *out = DType::q3_k; return true;
    case 12: *out = DType::q4_k; return true;
    case 13: *out = DType::q5_k; return true;
    case 14: *out = DType::q6_k; return true;
    case 20: *out = DType::iq4_nl; return true;
    case 23: *out = DType::iq4_xs; return true;
    case 24: *out = DType::i8; return true;
    case 25: *out = DType::i16; return true;
    case 26: *out = DType::i32; return true;
    case 27: *out = DType::i64; return true;
    case 28: *out = DType::f64; return true;
    case 30: *out = DType::bf16; return true;
    default: return false;
  }
}

const char* ggml_type_name(uint32_t t) {
  static const char* names[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K",
                                "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
                                "I8",   "I16",  "I32",  "I64",  "F64",  "IQ1_M", "BF16"};
  return t < sizeof(names) / sizeof(names[0]) ? names[t] : "unknown";
}

// Limits that no real model reaches; they stop a corrupt count from allocating gigabytes.
constexpr uint64_t kMaxString = 64ull << 20;
constexpr uint64_t kMaxArray = 64ull << 20;
constexpr uint64_t kMaxCount = 1ull << 24;

class Cursor {
 public:
  Cursor(const std::string& path, const std::byte* p, uint64_t size) : path_(path), p_(p), size_(size) {}
  uint64_t pos() const { return pos_; }
  void need(uint64_t n, const char* what) const {
    if (n > size_ - pos_)
      throw_error("[gguf] {}: file ends inside {} (offset {} of {} bytes); the file is truncated", path_, what, pos_,
                  size_);
  }
  template <class T>
  T read(const char* what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, p_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  std::string str(const char* what) {
    const uint64_t n = read<uint64_t>(what);
    if (n > kMaxString) throw_error("[gguf] {}: {} claims a {}-byte string; the file is corrupt", path_, what, n);
    need(n, what);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), n);
    pos_ += n;
    return s;
  }
  void skip(uint64_t n, const char* what) {
    need(n, what);
    pos_ += n;
  }

 private:
  const std::string& path_;
  const std::byte* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

double read_number(Cursor& c, GgufType t, int64_t* as_int, const char* what) {
  switch (t) {
    case GgufType::u8: return static_cast<double>(*as_int = c.read<uint8_t>(what));
    case GgufType::i8: return static_cast<double>(*as_int = c.read<int8_t>(what));
    case GgufType::u16: return static_cast<double>(*as_int = c.read<uint16_t>(what));
    case GgufType::i16: return static_cast<double>(*as_int = c.read<int16_t>(what));
    case GgufType::u32: return static_cast<double>(*as_int = c.read<uint32_t>(what));
    case GgufType::i32: return static_cast<double>(*as_int = c.read<int32_t>(what));
    case GgufType::u64: return static_cast<double>(*as_int = static_cast<int64_t>(c.read<uint64_t>(what)));
    case GgufType::i64: return static_cast<double>(*as_int = c.read<int64_t>(what));
    case GgufType::boolean: return static_cast<double>(*as_int = c.read<uint8_t>(what) ? 1 : 0);
    case GgufType::f32: {
      const double v = c.read<float>(what);
      *as_int = saturate_to_int(v);
      return v;
    }
    case GgufType::f64: {
      const double v = c.read<double>(what);
      *as_int = saturate_to_int(v);
      return v;
    }
    default: return 0;
  }
}

bool valid_type(uint32_t t) { return t <= 12; }

}  // namespace

const GgufValue* GgufFile::find(const std::string& key) const {
  auto it = kv_.find(key);
  return it == kv_.end() ? nullptr : &it->second;
}

std::string GgufFile::architecture() const {
  const GgufValue* v = find("general.architecture");
  return v && v->type == GgufType::string ? v->s : std::string();
}

GgufFile GgufFile::open(const std::string& path) {
  GgufFile f;
  f.map_ = MappedFile::open(path, "gguf");
  Cursor c(path, f.map_->data(), f.map_->size());
  char magic[4];
  c.need(4, "the magic");
  std::memcpy(magic, f.map_->data(), 4);
  if (std::memcmp(magic, "GGUF", 4) != 0)
    throw_error("[gguf] {}: not a GGUF file (no 'GGUF' magic at the start)", path);
  c.skip(4, "the magic");
  f.version_ = c.read<uint32_t>("the version");
  if (f.version_ < 2 || f.version_ > 3)
    throw_error("[gguf] {}: GGUF version {} is not supported (kiln reads versions 2 and 3); re-convert with a "
                "current llama.cpp",
                path, f.version_);
  const uint64_t n_tensors = c.read<uint64_t>("the tensor count");
  const uint64_t n_kv = c.read<uint64_t>("the metadata count");
  if (n_tensors > kMaxCount || n_kv > kMaxCount)
    throw_error("[gguf] {}: header claims {} tensors and {} metadata keys; the file is corrupt", path, n_tensors,
                n_kv);

  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = c.str("a metadata key");
    const uint32_t type = c.read<uint32_t>("a metadata type");
    if (!valid_type(type)) throw_error("[gguf] {}: metadata '{}' has unknown type {}; the file is corrupt", path, key, type);
    GgufValue v;
    v.type = static_cast<GgufType>(type);
    if (v.type == GgufType::string) {
      v.s = c.str("a metadata string");
    } else if (v.type == GgufType::array) {
      const uint32_t et = c.read<uint32_t>("an array type");
      const uint64_t n = c.read<uint64_t>("an array length");
      if (!valid_type(et) || et == static_cast<uint32_t>(GgufType::array) || n > kMaxArray)
        throw_error("[gguf] {}: metadata array '{}' (element type {}, {} elements) is malformed", path, key, et, n);
      v.elem = static_cast<GgufType>(et);
      if (v.elem == GgufType::string) {
        v.strs.reserve(static_cast<size_t>(n));
        for (uint64_t i = 0; i < n; ++i) v.strs.push_back(c.str("an array string"));
      } else {
        c.need(n, "an array");  // at least one byte per element: rejects absurd counts before reserving
        v.nums.reserve(static_cast<size_t>(n));
        int64_t ignored;
        for (uint64_t i = 0; i < n; ++i) v.nums.push_back(read_number(c, v.elem, &ignored, "an array element"));
      }
    } else {
      v.f = read_number(c, v.type, &v.i, "a metadata value");
    }
    f.kv_[std::move(key)] = std::move(v);
  }

  uint64_t alignment = 32;
  if (const GgufValue* a = f.find("general.alignment"); a && a->is_number()) {
    if (a->i <= 0 || (a->i & (a->i - 1)) != 0)
      throw_error("[gguf] {}: general.alignment {} is not a power of two", path, a->i);
    alignment = static_cast<uint64_t>(a->i);
  }

  struct Raw {
    uint64_t offset;
  };
  std::vector<Raw> raw;
  for (uint64_t t = 0; t < n_tensors; ++t) {
    TensorInfo ti;
    ti.name = c.str("a tensor name");
    ti.file = path;
    const uint32_t nd = c.read<uint32_t>("a tensor rank");
    if (nd == 0 || nd > 4) throw_error("[gguf] {}: tensor '{}' has {} dims (1 to 4 allowed)", path, ti.name, nd);
    std::vector<int64_t> ne(nd);
    for (uint32_t d = 0; d < nd; ++d) {
      const uint64_t v = c.read<uint64_t>("a tensor dim");
      if (v > (1ull << 40)) throw_error("[gguf] {}: tensor '{}' has dim {}; the file is corrupt", path, ti.name, v);
      ne[d] = static_cast<int64_t>(v);
    }
    ti.shape.assign(ne.rbegin(), ne.rend());
    const uint32_t gt = c.read<uint32_t>("a tensor type");
    if (!ggml_type_to_dtype(gt, &ti.dtype))
      throw_error("[gguf] {}: tensor '{}' has type {} ({}), which kiln does not read yet (it reads F32, F16, BF16, "
                  "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K to Q6_K, IQ4_NL and IQ4_XS); requantize the model to one of those",
                  path, ti.name, ggml_type_name(gt), gt);
    raw.push_back({c.read<uint64_t>("a tensor offset")});
    f.tensors_.push_back(std::move(ti));
  }

  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  const uint64_t size = f.map_->size();
  if (data_start > size && n_tensors > 0)
    throw_error("[gguf] {}: the data section starts at {} past the end of the file ({} bytes); the file is truncated",
                path, data_start, size);
  for (size_t t = 0; t < f.tensors_.size(); ++t) {
    TensorInfo& ti = f.tensors_[t];
    int64_t n = 0;
    if (!checked_numel(ti.shape, &n)) throw_error("[gguf] {}: tensor '{}' shape overflows", path, ti.name);
    const auto bytes = dtype_bytes(ti.dtype, n);
    if (!bytes || ti.shape.back() % quant_block(ti.dtype))
      throw_error("[gguf] {}: tensor '{}' {} has rows of {} values, not a whole number of its {}-value blocks", path,
                  ti.name, dtype_name(ti.dtype), ti.shape.back(), quant_block(ti.dtype));
    const uint64_t off = raw[t].offset;
    if (off > size - data_start || *bytes > size - data_start - off)
      throw_error("[gguf] {}: tensor '{}' ({} bytes at data offset {}) runs past the end of the file; the file is "
                  "truncated",
                  path, ti.name, *bytes, off);
    ti.data = f.map_->data() + data_start + off;
    ti.nbytes = *bytes;
  }
  return f;
}

std::optional<GgufVocab> GgufFile::vocab() const {
  const GgufValue* tokens = find("tokenizer.ggml.tokens");
  if (!tokens || tokens->type != GgufType::array || tokens->elem != GgufType::string) return std::nullopt;
  GgufVocab v;
  v.tokens = tokens->strs;
  auto str = [&](const char* k) {
    const GgufValue* x = find(k);
    return x && x->type == GgufType::string ? x->s : std::string();
  };
  auto id = [&](const char* k) -> int64_t {
    const GgufValue* x = find(k);
    return x && x->is_number() ? x->i : -1;
  };
  auto flag = [&](const char* k) -> std::optional<bool> {
    const GgufValue* x = find(k);
    if (!x || !x->is_number()) return std::nullopt;
    return x->i != 0;
  };
  v.model = str("tokenizer.ggml.model");
  v.pre = str("tokenizer.ggml.pre");
  v.chat_template = str("tokenizer.chat_template");
  if (const GgufValue* s = find("tokenizer.ggml.scores"); s && s->type == GgufType::array)
    for (double d : s->nums) v.scores.push_back(static_cast<float>(d));
  if (const GgufValue* s = find("tokenizer.ggml.token_type"); s && s->type == GgufType::array)
    for (double d : s->nums) v.token_types.push_back(static_cast<int32_t>(d));
  if (const GgufValue* s = find("tokenizer.ggml.merges"); s && s->type == GgufType::array) v.merges = s->strs;
  v.bos = id("tokenizer.ggml.bos_token_id");
  v.eos = id("tokenizer.ggml.eos_token_id");
  v.unk = id("tokenizer.ggml.unknown_token_id");
  v.pad = id("tokenizer.ggml.padding_token_id");
  for (const char* k : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id"}) {
    const int64_t e = id(k);
    if (e >= 0 && std::find(v.eos_ids.begin(), v.eos_ids.end(), e) == v.eos_ids.end()) v.eos_ids.push_back(e);
  }
  // Converters write UINT32_MAX for "none"; any id outside the vocabulary means absent.
  const auto n_tok = static_cast<int64_t>(v.tokens.size());
  for (int64_t* x : {&v.bos, &v.eos, &v.unk, &v.pad})
    if (*x >= n_tok) *x = -1;
  std::erase_if(v.eos_ids, [&](int64_t e) { return e >= n_tok; });
  v.add_bos = flag("tokenizer.ggml.add_bos_token");
  v.add_eos = flag("tokenizer.ggml.add_eos_token");
  const size_t n = v.tokens.size();
  if ((!v.scores.empty() && v.scores.size() != n) || (!v.token_types.empty() && v.token_types.size() != n))
    throw_error("[gguf] {}: tokenizer has {} tokens but {} scores and {} token types; the file is corrupt",
                map_->path(), n, v.scores.size(), v.token_types.size());
  return v;
}

std::optional<uint32_t> ggml_type_of(DType t) {
  for (uint32_t id = 0; id < 64; ++id)
    if (DType d; ggml_type_to_dtype(id, &d) && d == t) return id;
  return std::nullopt;
}

}  // namespace kiln::model
