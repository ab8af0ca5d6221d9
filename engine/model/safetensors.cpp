#include "model/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <cstring>

#include "core/error.hpp"

namespace kiln::model {
namespace {

// Header sizes above this are refused: real headers are a few MiB even for 1000-shard models, and a
// corrupt length must not make us parse gigabytes.
constexpr uint64_t kMaxHeader = 256ull << 20;

bool parse_dtype(const std::string& s, DType* out) {
  static const std::pair<const char*, DType> table[] = {
      {"F32", DType::f32}, {"F16", DType::f16}, {"BF16", DType::bf16}, {"F64", DType::f64},
      {"I64", DType::i64}, {"I32", DType::i32}, {"I16", DType::i16},   {"I8", DType::i8},
      {"U8", DType::u8},   {"BOOL", DType::boolean}};
  for (const auto& [name, t] : table)
    if (s == name) {
      *out = t;
      return true;
    }
  return false;
}

}  // namespace

SafetensorsFile SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  f.map_ = MappedFile::open(path, "safetensors");
  const uint64_t size = f.map_->size();
  if (size < 8) throw_error("[safetensors] {}: file is {} bytes, too short for a header; re-download it", path, size);
  uint64_t hlen;
  std::memcpy(&hlen, f.map_->data(), 8);
  if (hlen > size - 8 || hlen > kMaxHeader)
    throw_error("[safetensors] {}: header length {} exceeds the file ({} bytes); the file is truncated or not "
                "safetensors",
                path, hlen, size);
  const char* hbegin = reinterpret_cast<const char*>(f.map_->data() + 8);
  nlohmann::json header = nlohmann::json::parse(hbegin, hbegin + hlen, nullptr, false);
  if (header.is_discarded() || !header.is_object())
    throw_error("[safetensors] {}: the header is not a JSON object; the file is corrupt or not safetensors", path);
  const std::byte* data = f.map_->data() + 8 + hlen;
  const uint64_t data_size = size - 8 - hlen;

  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (v.is_object())
        for (auto m = v.begin(); m != v.end(); ++m)
          if (m.value().is_string()) f.metadata_[m.key()] = m.value().get<std::string>();
      continue;
    }
    auto bad = [&](const std::string& what) {
      throw_error("[safetensors] {}: tensor '{}': {}; the file is corrupt", path, name, what);
    };
    if (!v.is_object()) bad("entry is not an object");
    const auto dt = v.find("dtype");
    const auto sh = v.find("shape");
    const auto off = v.find("data_offsets");
    if (dt == v.end() || !dt->is_string()) bad("missing string 'dtype'");
    if (sh == v.end() || !sh->is_array()) bad("missing array 'shape'");
    if (off == v.end() || !off->is_array() || off->size() != 2) bad("missing 'data_offsets' [begin, end]");
    TensorInfo t;
    t.name = name;
    t.file = path;
    if (dt->get<std::string>() == "F8_E4M3") {
      t.dtype = DType::u8;  // bytes until the quantization_config's scales make weights of them
      t.stored = "F8_E4M3";
    } else if (!parse_dtype(dt->get<std::string>(), &t.dtype)) {
      throw_error(
          "[safetensors] {}: tensor '{}' has dtype {}, which kiln does not read (F32, F16, BF16, F64, "
          "I64, I32, I16, I8, U8, BOOL, and F8_E4M3 with a quantization_config); convert the checkpoint",
          path, name, dt->get<std::string>());
    }
    for (const auto& d : *sh) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) bad("shape has a non-integer or negative dimension");
      t.shape.push_back(d.get<int64_t>());
    }
    if (t.shape.size() > 8) bad("more than 8 dimensions");
    if (!(*off)[0].is_number_unsigned() || !(*off)[1].is_number_unsigned()) bad("data_offsets are not unsigned");
    const uint64_t begin = (*off)[0].get<uint64_t>(), end = (*off)[1].get<uint64_t>();
    if (begin > end || end > data_size)
      throw_error("[safetensors] {}: tensor '{}' has bytes [{}, {}) but the data section holds {} bytes; the file "
                  "is truncated",
                  path, name, begin, end, data_size);
    int64_t n = 0;
    if (!checked_numel(t.shape, &n)) bad("shape " + shape_str(t.shape) + " overflows");
    const auto want = dtype_bytes(t.dtype, n);
    if (!want || *want != end - begin)
      throw_error("[safetensors] {}: tensor '{}' {} {} needs {} bytes but data_offsets give {}; the file is corrupt",
                  path, name, dtype_name(t.dtype), shape_str(t.shape), want ? *want : 0, end - begin);
    t.data = data + begin;
    t.nbytes = end - begin;
    f.tensors_.push_back(std::move(t));
  }
  return f;
}

}  // namespace kiln::model
