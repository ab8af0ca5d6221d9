#include "model/checkpoint.hpp"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "model/safetensors.hpp"

namespace kiln::model {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json_file(const fs::path& p, const char* what) {
  std::ifstream in(p);
  if (!in) throw_error("[model] cannot read {} ({})", p.string(), what);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded() || !j.is_object()) throw_error("[model] {} is not a JSON object; fix or re-download it", p.string());
  return j;
}

// eos_token_id may be a scalar or a list; both are collected (serving-hazards.md lesson (f)).
void collect_ids(const json& j, const char* key, std::vector<int64_t>* out) {
  auto it = j.find(key);
  if (it == j.end()) return;
  auto add = [&](const json& v) {
    if (v.is_number_integer() && std::find(out->begin(), out->end(), v.get<int64_t>()) == out->end())
      out->push_back(v.get<int64_t>());
  };
  if (it->is_array())
    for (const auto& v : *it) add(v);
  else
    add(*it);
}

template <class T>
void opt(const json& j, const char* key, std::optional<T>* out) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return;
  if constexpr (std::is_same_v<T, bool>) {
    if (it->is_boolean()) *out = it->get<bool>();
  } else {
    if (it->is_number()) *out = it->get<T>();
  }
}

json gguf_value_to_json(const GgufValue& v) {
  if (v.type == GgufType::string) return v.s;
  if (v.type == GgufType::array) {
    if (v.elem == GgufType::string) return v.strs;
    json a = json::array();
    const bool integral = v.elem != GgufType::f32 && v.elem != GgufType::f64;
    for (double d : v.nums) {
      if (v.elem == GgufType::boolean)
        a.push_back(d != 0);  // e.g. gemma4.attention.sliding_window_pattern
      else if (integral)
        a.push_back(static_cast<int64_t>(d));
      else
        a.push_back(d);
    }
    return a;
  }
  if (v.type == GgufType::boolean) return v.i != 0;
  if (v.type == GgufType::f32 || v.type == GgufType::f64) return v.f;
  return v.i;
}

}  // namespace

const TensorInfo* Checkpoint::find(std::string_view name) const {
  auto it = index_.find(std::string(name));
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const auto& t : tensors_) n += t.nbytes;
  return n;
}

std::vector<std::string> Checkpoint::files() const {
  std::vector<std::string> out;
  for (const auto& m : maps_) out.push_back(m->path());
  return out;
}

void Checkpoint::add_tensors(const std::vector<TensorInfo>& ts) {
  for (const auto& t : ts) {
    auto [it, inserted] = index_.emplace(t.name, tensors_.size());
    if (!inserted)
      throw_error("[model] tensor '{}' appears in both {} and {}; remove the stray file from the checkpoint", t.name,
                  tensors_[it->second].file, t.file);
    tensors_.push_back(t);
  }
}

Checkpoint Checkpoint::open(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_directory(p, ec)) return open_hf(path, "");
  if (!fs::exists(p, ec))
    throw_error("[model] {} does not exist; pass a Hugging Face model directory, a .gguf file, or a .safetensors file",
                path);
  if (p.extension() == ".gguf") return open_gguf(path);
  if (p.extension() == ".safetensors") return open_hf(p.parent_path().empty() ? "." : p.parent_path().string(), path);
  // Sniff the magic so a GGUF without the extension still opens.
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  in.read(magic, 4);
  if (in.gcount() == 4 && std::string_view(magic, 4) == "GGUF") return open_gguf(path);
  throw_error("[model] {} is neither a directory, a .gguf nor a .safetensors file", path);
}

Checkpoint Checkpoint::open_metadata(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(fs::path(path), ec)) return open_hf(path, "", false);
  Checkpoint c = open(path);  // a GGUF's metadata and vocabulary come with its tensor index
  c.tensors_.clear();
  return c;
}

Checkpoint Checkpoint::open_gguf(const std::string& file) {
  Checkpoint c;
  c.format_ = CheckpointFormat::gguf;
  c.path_ = file;
  GgufFile g = GgufFile::open(file);
  c.model_type_ = g.architecture();
  if (c.model_type_.empty())
    throw_error("[gguf] {}: no general.architecture in the metadata; cannot tell which model plugin to use", file);
  json cfg = json::object();
  for (const auto& [k, v] : g.metadata()) {
    // The vocabulary arrays are large and belong to the tokenizer, not the model configuration.
    // Only their lengths stay ("<key>.count"), which is how a plugin learns the vocabulary size.
    if (k.rfind("tokenizer.", 0) == 0 && v.type == GgufType::array) {
      cfg[k + ".count"] = v.elem == GgufType::string ? v.strs.size() : v.nums.size();
      continue;
    }
    if (k == "tokenizer.chat_template") continue;
    cfg[k] = gguf_value_to_json(v);
  }
  c.config_json_ = cfg.dump();
  c.vocab_ = g.vocab();
  if (c.vocab_) {
    c.generation_.stop_tokens = c.vocab_->eos_ids;
    if (c.vocab_->bos >= 0) c.generation_.bos = c.vocab_->bos;
  }
  c.maps_.push_back(g.mapping());
  c.add_tensors(g.tensors());
  return c;
}

Checkpoint Checkpoint::open_hf(const std::string& dir_str, const std::string& single_file, bool tensors) {
  Checkpoint c;
  c.format_ = CheckpointFormat::hf;
  const fs::path dir(dir_str);
  c.path_ = single_file.empty() ? dir_str : single_file;
  const fs::path cfg_path = dir / "config.json";
  std::error_code ec;
  if (!fs::exists(cfg_path, ec))
    throw_error("[model] {} has no config.json; a Hugging Face checkpoint needs config.json beside the weights",
                dir_str);
  json cfg = read_json_file(cfg_path, "config.json");
  json text = cfg;
  // Multimodal wrappers (Gemma 3/4, Qwen-VL style) nest the language model's config; the text model
  // is what kiln serves, so its keys win and the wrapper's fill only what it lacks.
  if (auto tc = cfg.find("text_config"); tc != cfg.end() && tc->is_object()) {
    text = *tc;
    for (auto it = cfg.begin(); it != cfg.end(); ++it) {
      const std::string& k = it.key();
      if (k == "text_config" || k == "vision_config" || k == "audio_config" || k == "model_type" ||
          k == "architectures")
        continue;
      if (!text.contains(k)) text[k] = it.value();
    }
  }
  if (!text.contains("model_type") || !text["model_type"].is_string())
    throw_error("[model] {}: no model_type string (in text_config for multimodal wrappers)", cfg_path.string());
  c.model_type_ = text["model_type"].get<std::string>();
  c.config_json_ = text.dump();

  collect_ids(cfg, "eos_token_id", &c.generation_.stop_tokens);
  collect_ids(text, "eos_token_id", &c.generation_.stop_tokens);
  if (auto b = text.find("bos_token_id"); b != text.end() && b->is_number_integer()) c.generation_.bos = b->get<int64_t>();
  if (fs::exists(dir / "generation_config.json", ec)) {
    json g = read_json_file(dir / "generation_config.json", "generation_config.json");
    collect_ids(g, "eos_token_id", &c.generation_.stop_tokens);
    if (auto b = g.find("bos_token_id"); b != g.end() && b->is_number_integer()) c.generation_.bos = b->get<int64_t>();
    opt(g, "temperature", &c.generation_.temperature);
    opt(g, "top_p", &c.generation_.top_p);
    opt(g, "min_p", &c.generation_.min_p);
    opt(g, "repetition_penalty", &c.generation_.repetition_penalty);
    opt(g, "top_k", &c.generation_.top_k);
    opt(g, "do_sample", &c.generation_.do_sample);
  }
  if (fs::exists(dir / "tokenizer.json", ec)) c.tokenizer_json_ = (dir / "tokenizer.json").string();
  if (fs::exists(dir / "tokenizer_config.json", ec)) c.tokenizer_config_json_ = (dir / "tokenizer_config.json").string();
  if (!tensors) return c;

  std::vector<std::string> files;
  std::map<std::string, std::string> weight_map;  // tensor -> shard, from the index
  const fs::path index = dir / "model.safetensors.index.json";
  if (!single_file.empty()) {
    files.push_back(single_file);
  } else if (fs::exists(index, ec)) {
    json idx = read_json_file(index, "safetensors index");
    auto wm = idx.find("weight_map");
    if (wm == idx.end() || !wm->is_object())
      throw_error("[safetensors] {}: no weight_map object; the index is corrupt", index.string());
    std::set<std::string> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) throw_error("[safetensors] {}: weight_map['{}'] is not a file name", index.string(), it.key());
      const std::string shard = it.value().get<std::string>();
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos)
        throw_error("[safetensors] {}: shard name '{}' leaves the directory", index.string(), shard);
      weight_map[it.key()] = (dir / shard).string();
      shards.insert(shard);
    }
    for (const auto& s : shards) {
      if (!fs::exists(dir / s, ec))
        throw_error("[safetensors] {}: shard {} listed in the index is missing; finish the download", dir_str, s);
      files.push_back((dir / s).string());
    }
  } else if (fs::exists(dir / "model.safetensors", ec)) {
    files.push_back((dir / "model.safetensors").string());
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec))
      if (e.path().extension() == ".safetensors") files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    if (files.size() != 1)
      throw_error("[model] {}: {} .safetensors files and no model.safetensors.index.json; name the weights file "
                  "(--model DIR/FILE.safetensors) or add the index",
                  dir_str, files.size());
  }
  for (const auto& f : files) {
    SafetensorsFile st = SafetensorsFile::open(f);
    c.maps_.push_back(st.mapping());
    c.add_tensors(st.tensors());
  }
  for (const auto& [name, shard] : weight_map) {
    const TensorInfo* t = c.find(name);
    if (!t) throw_error("[safetensors] the index lists tensor '{}' in {}, but that file does not hold it", name, shard);
    if (fs::path(t->file) != fs::path(shard))
      throw_error("[safetensors] the index puts tensor '{}' in {}, but it was found in {}", name, shard, t->file);
  }
  if (auto q = cfg.find("quantization_config"); q != cfg.end()) {
    // The quantized linears become the weights plugins ask for (model/quantized_checkpoint.hpp).
    std::string torch_dtype = "bfloat16";  // what the unpacked weights that need rounding become
    for (const json* j : {&cfg, &text})
      for (const char* k : {"torch_dtype", "dtype"})
        if (auto d = j->find(k); d != j->end() && d->is_string()) torch_dtype = d->get<std::string>();
    std::vector<TensorInfo> ts =
        unpack_quantized(q->dump(), torch_dtype, std::move(c.tensors_), &c.owned_, &c.quantization_);
    c.tensors_.clear();
    c.index_.clear();
    c.add_tensors(ts);
    log::info("[model] {}: {}", dir_str, c.quantization_);
  } else {
    for (const TensorInfo& t : c.tensors_)
      if (!t.stored.empty())
        throw_error(
            "[safetensors] tensor '{}' in {} is {}, but config.json has no quantization_config saying how "
            "to scale it; the checkpoint is incomplete",
            t.name, t.file, t.stored);
  }
  return c;
}

void Checkpoint::release_unpacked(const std::vector<const std::byte*>& keep) {
  const std::set<const std::byte*> kept(keep.begin(), keep.end());
  std::set<const std::byte*> gone;
  for (auto& b : owned_)
    if (!kept.count(b->data())) gone.insert(b->data()), b.reset();
  std::erase(owned_, nullptr);
  for (TensorInfo& t : tensors_)
    if (gone.count(t.data)) t.data = nullptr;
}

WeightDecl WeightDecl::from_c(const kiln_tensor_decl& d) {
  WeightDecl w;
  w.name = d.name ? d.name : "";
  w.dtype = d.dtype;
  for (uint32_t i = 0; i < d.ndim && i < KILN_MAX_DIMS; ++i) w.shape.push_back(d.shape[i]);
  w.optional = d.optional != 0;
  w.convert = d.convert != 0;
  w.stack = d.stack;
  w.host = (d.flags & KILN_TENSOR_HOST) != 0;
  return w;
}

namespace {

std::string piece_name(const std::string& pattern, uint32_t i) {
  std::string n = pattern;
  const size_t at = n.find("{}");
  if (at != std::string::npos) n.replace(at, 2, std::to_string(i));
  return n;
}

bool is_float_storage(DType t) {
  return t == DType::f32 || t == DType::f16 || t == DType::bf16 || t == DType::f64 || is_quantized(t);
}

}  // namespace

std::vector<std::vector<const TensorInfo*>> check_weights(const Checkpoint& ckpt, const std::vector<WeightDecl>& decls) {
  std::vector<std::vector<const TensorInfo*>> out;
  std::vector<std::string> errors;
  for (const auto& d : decls) {
    out.emplace_back();
    auto& pieces = out.back();
    // A stacked declaration is checked piece by piece against its shape without the stacked dim.
    std::vector<int64_t> want = d.shape;
    if (d.stack) {
      if (d.name.find("{}") == std::string::npos || want.empty() || (want[0] >= 0 && want[0] != d.stack)) {
        errors.push_back(fmt::format("tensor '{}': a stacked declaration needs '{{}}' in the name and a leading dim "
                                     "of {} (the plugin is wrong)",
                                     d.name, d.stack));
        continue;
      }
      want.erase(want.begin());
    }
    const uint32_t n = d.stack ? d.stack : 1;
    std::vector<std::string> missing;
    for (uint32_t i = 0; i < n; ++i) {
      const std::string name = d.stack ? piece_name(d.name, i) : d.name;
      const TensorInfo* t = ckpt.find(name);
      if (!t) {
        missing.push_back(name);
        continue;
      }
      pieces.push_back(t);
      bool shape_ok = t->shape.size() == want.size();
      for (size_t k = 0; shape_ok && k < want.size(); ++k) shape_ok = want[k] < 0 || want[k] == t->shape[k];
      const bool dtype_ok = d.dtype == KILN_DTYPE_ANY ||
                            (d.convert ? is_float_storage(t->dtype)
                                       : static_cast<uint32_t>(to_kiln(t->dtype)) == d.dtype);
      if (!shape_ok || !dtype_ok)
        errors.push_back(fmt::format("tensor '{}': expected {} {}, found {} {} in {}", name, shape_str(want),
                                     kiln_dtype_name(d.dtype), shape_str(t->shape), dtype_name(t->dtype), t->file));
      else if (!pieces.empty() && (t->dtype != pieces[0]->dtype || t->shape != pieces[0]->shape))
        errors.push_back(fmt::format("tensor '{}' is {} {} but '{}' is {} {}; stacked pieces must agree", name,
                                     dtype_name(t->dtype), shape_str(t->shape), pieces[0]->name,
                                     dtype_name(pieces[0]->dtype), shape_str(pieces[0]->shape)));
    }
    if (missing.size() == n && d.optional) {
      pieces.clear();
      continue;
    }
    for (const auto& m : missing)
      errors.push_back(fmt::format("tensor '{}' (expected {} {}) is missing from {}", m, shape_str(want),
                                   kiln_dtype_name(d.dtype), ckpt.path()));
  }
  if (!errors.empty()) {
    std::string msg = fmt::format("[model] the checkpoint does not match what the '{}' model plugin expects ({} "
                                  "problem{}):",
                                  ckpt.model_type(), errors.size(), errors.size() == 1 ? "" : "s");
    const size_t shown = std::min<size_t>(errors.size(), 20);
    for (size_t i = 0; i < shown; ++i) msg += "\n  " + errors[i];
    if (shown < errors.size()) msg += fmt::format("\n  ... and {} more", errors.size() - shown);
    throw HostError(msg);
  }
  return out;
}

}  // namespace kiln::model
