// The Hugging Face checkpoint as the exporters read it (export.hpp): names with or without a
// multimodal wrapper's prefix, values widened to f32 from the mapping, config keys with errors that
// name them, and the layout changes several architectures share.
#include <fmt/format.h>

#include "convert/export.hpp"
#include "core/convert.hpp"
#include "core/error.hpp"

namespace kiln::convert {

Source::Source(const model::Checkpoint& c) : ckpt_(c), config_(json::parse(c.config_json())) {}

const model::TensorInfo* Source::find(const std::string& name) const {
  if (const auto* t = ckpt_.find(name)) return t;
  if (name.rfind("model.", 0) == 0)  // a multimodal wrapper's language model
    return ckpt_.find("model.language_model." + name.substr(6));
  return nullptr;
}

std::vector<std::string> Source::text_tensors() const {
  bool wrapper = false;
  for (const model::TensorInfo& t : ckpt_.tensors()) wrapper = wrapper || t.name.rfind("model.language_model.", 0) == 0;
  const std::string prefix = wrapper ? "model.language_model." : "model.";
  std::vector<std::string> names;
  for (const model::TensorInfo& t : ckpt_.tensors()) {
    if (t.name.rfind(prefix, 0) == 0)
      names.push_back("model." + t.name.substr(prefix.size()));
    else if (t.name == "lm_head.weight")
      names.push_back(t.name);
  }
  return names;
}

const model::TensorInfo& Source::tensor(const std::string& name) const {
  const auto* t = find(name);
  if (!t) throw_error("[convert] {}: tensor {} is missing", ckpt_.path(), name);
  return *t;
}

std::vector<float> Source::values(const std::string& name) const {
  return model::tensor_to_f32(tensor(name));
}

std::vector<float> Source::rows(const std::string& name, int64_t first, int64_t n) const {
  const model::TensorInfo& t = tensor(name);
  const int64_t cols = t.shape.empty() ? 1 : t.shape.back();
  if (first < 0 || n < 0 || (first + n) * cols > t.numel())
    throw_error("[convert] tensor {}: rows {}..{} are outside its shape {}", name, first, first + n,
                model::shape_str(t.shape));
  std::vector<float> out(static_cast<size_t>(n * cols));
  const size_t row = row_bytes(t.dtype, cols);
  if (!to_f32(t.dtype, t.data + static_cast<size_t>(first) * row, n * cols, out.data()))
    throw_error("[convert] tensor {} in {} has type {}, which is not a floating-point type", name, t.file,
                dtype_name(t.dtype));
  return out;
}

void Source::expect_shape(const std::string& name, const std::vector<int64_t>& shape, const char* why) const {
  const model::TensorInfo& t = tensor(name);
  if (t.shape != shape)
    throw_error("[convert] {}: tensor {} is {}, where config.json ({}) makes it {}", ckpt_.path(), name,
                model::shape_str(t.shape), why, model::shape_str(shape));
}

OutTensor Source::as_is(const std::string& hf, const std::string& gguf) const {
  const model::TensorInfo& t = tensor(hf);
  return {gguf, t.shape, [this, hf] { return values(hf); }, t.dtype, false};
}

OutTensor Source::split_gate_up(const std::string& hf, const std::string& gguf, int64_t E, int64_t I, int64_t H,
                                bool up) const {
  expect_shape(hf, {E, 2 * I, H}, "num_experts, moe_intermediate_size, hidden_size");
  return {gguf,
          {E, I, H},
          [this, hf, E, I, up] {
            std::vector<float> o;
            for (int64_t e = 0; e < E; ++e) {
              const std::vector<float> part = rows(hf, e * 2 * I + (up ? I : 0), I);
              o.insert(o.end(), part.begin(), part.end());
            }
            return o;
          },
          tensor(hf).dtype,
          false};
}

OutTensor Source::stack_experts(const std::string& prefix, const std::string& proj, const std::string& gguf, int64_t E,
                                int64_t rows, int64_t cols) const {
  auto name = [=](int64_t e) { return prefix + "experts." + std::to_string(e) + "." + proj + ".weight"; };
  for (int64_t e = 0; e < E; ++e)
    expect_shape(name(e), {rows, cols}, "num_experts, moe_intermediate_size, hidden_size");
  return {gguf,
          {E, rows, cols},
          [this, name, E] {
            std::vector<float> o;
            for (int64_t e = 0; e < E; ++e) {
              const std::vector<float> v = values(name(e));
              o.insert(o.end(), v.begin(), v.end());
            }
            return o;
          },
          tensor(name(0)).dtype,
          false};
}

void Source::sparse_mlp(const std::string& m, const std::string& b, int64_t E, int64_t I, int64_t H,
                        std::vector<OutTensor>& out) const {
  OutTensor router = as_is(m + "gate.weight", b + "ffn_gate_inp.weight");
  router.keep_f32 = true;
  out.push_back(std::move(router));
  if (has(m + "experts.gate_up_proj")) {  // fused [E, 2I, H], gate rows first
    out.push_back(split_gate_up(m + "experts.gate_up_proj", b + "ffn_gate_exps.weight", E, I, H, false));
    out.push_back(split_gate_up(m + "experts.gate_up_proj", b + "ffn_up_exps.weight", E, I, H, true));
    expect_shape(m + "experts.down_proj", {E, H, I}, "num_experts, moe_intermediate_size, hidden_size");
    out.push_back(as_is(m + "experts.down_proj", b + "ffn_down_exps.weight"));
  } else {
    out.push_back(stack_experts(m, "gate_proj", b + "ffn_gate_exps.weight", E, I, H));
    out.push_back(stack_experts(m, "up_proj", b + "ffn_up_exps.weight", E, I, H));
    out.push_back(stack_experts(m, "down_proj", b + "ffn_down_exps.weight", E, H, I));
  }
}

const json& Source::need(const std::string& key, const json* obj, const char* where) const {
  const json& o = obj ? *obj : config_;
  const auto it = o.is_object() ? o.find(key) : o.end();
  if (it == o.end() || it->is_null())
    throw_error("[convert] {}: config.json has no '{}{}'", ckpt_.path(), where ? fmt::format("{}.", where) : "", key);
  return *it;
}

uint32_t Source::u32(const std::string& key) const {
  const json& v = need(key);
  if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX)
    throw_error("[convert] {}: config.json '{}' must be a non-negative integer, not {}", ckpt_.path(), key, v.dump());
  return v.get<uint32_t>();
}

float Source::number(const std::string& key) const {
  const json& v = need(key);
  if (!v.is_number())
    throw_error("[convert] {}: config.json '{}' must be a number, not {}", ckpt_.path(), key, v.dump());
  return v.get<float>();
}

}  // namespace kiln::convert
