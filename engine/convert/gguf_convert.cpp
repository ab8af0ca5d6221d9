#include "convert/gguf_convert.hpp"

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>

#include "convert/export.hpp"
#include "convert/quant_mix.hpp"
#include "core/convert.hpp"
#include "core/error.hpp"
#include "core/ggml_quantize.hpp"

namespace kiln::convert {

Exporter exporter_for(const std::string& model_type) {
  static const std::pair<const char*, Exporter> kArchs[] = {
      {"llama", export_llama},         {"qwen2", export_llama},
      {"qwen3", export_llama},         {"qwen3_moe", export_llama},
      {"qwen3_5", export_qwen3_5},     {"qwen3_5_text", export_qwen3_5},
      {"qwen3_5_moe", export_qwen3_5}, {"qwen3_5_moe_text", export_qwen3_5},
      {"qwen3_next", export_qwen3_5},  {"gemma4", export_gemma4},
      {"gemma4_text", export_gemma4}};
  std::string known;
  for (const auto& [t, e] : kArchs) {
    if (model_type == t) return e;
    known += (known.empty() ? "" : ", ") + std::string(t);
  }
  throw_error("[convert] model_type '{}' cannot be converted yet (kiln convert knows {})", model_type, known);
}

std::vector<std::string> convert_types() {
  return file_type_names();
}

namespace {

/** The float type a tensor keeps in an "auto" file: the checkpoint's, where GGUF has it. */
DType float_type(DType source) {
  return source == DType::f16 || source == DType::bf16 || source == DType::f32 ? source : DType::f16;
}

/** The file type of an "auto" file as llama.cpp records it: that of most of its matrices. */
uint32_t auto_ftype(const std::vector<DType>& formats) {
  const auto bf = std::count(formats.begin(), formats.end(), DType::bf16);
  const auto h = std::count(formats.begin(), formats.end(), DType::f16);
  return bf && bf >= h ? 32 : h ? 1 : 0;
}

/** `v` stored as `d`: the block formats quantized on every core (blocks are independent, so the
    bytes are the same in any order), the float types converted. */
std::vector<uint8_t> encode(DType d, const std::vector<float>& v, const std::string& name) {
  const auto n = static_cast<int64_t>(v.size());
  std::vector<uint8_t> b(row_bytes(d, n));
  bool ok = true;
  if (is_quantized(d) && n % quant_block(d) == 0) {
    const int64_t qk = quant_block(d), bb = quant_block_bytes(d);
    std::atomic<bool> all{true};
    tbb::parallel_for(tbb::blocked_range<int64_t>(0, n / qk, 64), [&](const tbb::blocked_range<int64_t>& r) {
      if (!quantize_blocks(d, v.data() + r.begin() * qk, (r.end() - r.begin()) * qk, b.data() + r.begin() * bb))
        all = false;
    });
    ok = all;
  } else {
    ok = from_f32(d, v.data(), n, b.data());
  }
  if (!ok) throw_error("[convert] tensor {}: cannot store its values as {}", name, dtype_name(d));
  return b;
}

/** Writes `out` by way of `out`.part, renamed when complete: a failed conversion leaves no file
    that looks finished. */
void write_atomically(const model::GgufWriter& w, const std::string& out) {
  const std::string part = out + ".part";
  if (!std::ofstream(part, std::ios::binary))  // fail before hours of quantizing, not after
    throw_error("[convert] cannot write {} (does its folder exist and allow writing?)", part);
  try {
    w.write(part);
  } catch (...) {
    std::error_code ec;
    std::filesystem::remove(part, ec);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(part, out, ec);
  if (ec) throw_error("[convert] cannot rename {} to {}: {}", part, out, ec.message());
}

ConvertSummary convert(const model::Checkpoint& ckpt, const std::string& out, const ConvertOptions& o,
                       const FileType& ft) {
  const Source src(ckpt);
  model::GgufWriter w;
  const Export ex = exporter_for(ckpt.model_type())(src, w);
  std::string name = o.name;
  if (name.empty())
    name = std::filesystem::weakly_canonical(std::filesystem::absolute(ckpt.path())).filename().string();
  // Each tensor's format: as the converter writes it for the float types; for llama-quantize's,
  // its mix over the tensors it quantizes, visited in its order (by name).
  std::vector<DType> formats(ex.tensors.size());
  for (size_t i = 0; i < ex.tensors.size(); ++i) {
    const OutTensor& t = ex.tensors[i];
    const int64_t row = t.shape.empty() ? 1 : t.shape.back();
    // llama.cpp's converter keeps 1-D tensors, norms and what does not end in ".weight" in F32.
    const bool weight = t.name.size() > 7 && t.name.compare(t.name.size() - 7, 7, ".weight") == 0;
    const bool norm = weight && t.name.size() > 12 && t.name.compare(t.name.size() - 12, 12, "_norm.weight") == 0;
    DType d = t.keep_f32 || t.shape.size() < 2 || !weight || norm ? DType::f32 : float_type(t.source);
    if (!ft.quantize && ft.ftype >= 0 && d != DType::f32)  // f32, f16, bf16, q8_0 (f16 for rows q8_0 cannot hold)
      d = ft.base == DType::q8_0 && row % quant_block(DType::q8_0) ? DType::f16 : ft.base;
    formats[i] = d;
  }
  if (ft.quantize) {
    std::vector<std::string> names;
    for (const OutTensor& t : ex.tensors) names.push_back(t.name);
    std::vector<size_t> order(ex.tensors.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return names[a] < names[b]; });
    Mix mix(ft, names, ex.n_layer, ex.n_head, ex.n_head_kv, ex.n_expert, ex.size_70b);
    for (size_t i : order) {
      const OutTensor& t = ex.tensors[i];
      if (quantizable(t.name, t.shape.size())) formats[i] = mix.pick(t.name, t.shape.back());
    }
  }

  w.add_string("general.name", name);
  w.add_u32("general.file_type", ft.ftype >= 0 ? static_cast<uint32_t>(ft.ftype) : auto_ftype(formats));
  if (ft.quantize) w.add_u32("general.quantization_version", 2);  // ggml's GGML_QNT_VERSION
  if (o.vocab)
    o.vocab(w);
  else
    export_vocab(ckpt, src, ex.arch, w);

  ConvertSummary s;
  s.arch = ex.arch;
  for (size_t i = 0; i < ex.tensors.size(); ++i) {
    const OutTensor& t = ex.tensors[i];
    const DType d = formats[i];
    s.bytes +=
        w.add_tensor(t.name, d, t.shape, [values = t.values, d, name = t.name] { return encode(d, values(), name); });
    ++s.formats[dtype_name(d)];
  }
  s.tensors = ex.tensors.size();
  write_atomically(w, out);
  return s;
}

}  // namespace

ConvertSummary convert_to_gguf(const std::string& hf_dir, const std::string& out, const ConvertOptions& o) {
  const auto ft = file_type(o.type);
  if (!ft) {
    std::string names;
    for (const auto& n : file_type_names()) names += (names.empty() ? "" : ", ") + n;
    throw_error("[convert] unknown type '{}' (one of {})", o.type, names);
  }
  const auto ckpt = model::Checkpoint::open(hf_dir);
  if (ckpt.format() != model::CheckpointFormat::hf)
    throw_error("[convert] {} is already a GGUF file; convert reads a Hugging Face checkpoint folder", hf_dir);
  try {
    return convert(ckpt, out, o, *ft);
  } catch (const nlohmann::json::exception& e) {  // a key of the wrong type in the checkpoint's JSON files
    throw_error("[convert] {}: config.json or the tokenizer files: {}", hf_dir, e.what());
  }
}

}  // namespace kiln::convert
