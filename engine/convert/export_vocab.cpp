// The tokenizer as llama.cpp's converter writes it (convert_hf_to_gguf.py get_vocab_base /
// _set_vocab_gpt2 for byte-level BPE, Gemma4Model.set_vocab for Gemma 4's, gguf-py's SpecialVocab
// for merges, special ids, add_bos/add_eos and the chat template).
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "convert/export.hpp"
#include "core/error.hpp"

namespace kiln::convert {
namespace {

namespace fs = std::filesystem;

// llama.cpp's token types.
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kUnused = 5, kByte = 6;

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_error("[convert] cannot read {}", path);
  std::stringstream ss;
  ss << in.rdbuf();
  json j = json::parse(ss.str(), nullptr, false);
  if (j.is_discarded()) throw_error("[convert] {} is not valid JSON", path);
  return j;
}

/** llama.cpp's does_token_look_special. */
bool looks_special(const std::string& t) {
  auto wrapped = [&](const std::string& a, const std::string& b) {
    return t.size() >= a.size() + b.size() && t.rfind(a, 0) == 0 && t.compare(t.size() - b.size(), b.size(), b) == 0;
  };
  return t == "<pad>" || t == "<mask>" || t == "<2mass>" || t == "[@BOS@]" || wrapped("<|", "|>") ||
         wrapped("<\xEF\xBD\x9C", "\xEF\xBD\x9C>") || wrapped("<unused", ">");
}

bool is_byte_token(const std::string& t) {
  auto hex = [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; };
  return t.size() == 6 && t.rfind("<0x", 0) == 0 && hex(t[3]) && hex(t[4]) && t[5] == '>';
}

/** Gemma4Model.set_vocab's list: the markers Gemma 4's chat parser reads, kept USER_DEFINED so
    llama.cpp renders them in its output. */
bool gemma_visible(const std::string& t) {
  static const std::set<std::string> kVisible = {"<|channel>",       "<channel|>",       "<|tool_call>", "<tool_call|>",
                                                 "<|tool_response>", "<tool_response|>", "<|\"|>"};
  return kVisible.count(t) != 0;
}

/**
 * Whether the tokenizer adds BOS, as gguf-py's SpecialVocab reads it: tokenizer_config.json's
 * add_bos_token, else whether tokenizer.json's TemplateProcessing (alone or in a Sequence) starts a
 * single sequence with the BOS token. nullopt when neither says.
 */
std::optional<bool> adds_bos(const json& tok, const json& cfg, const std::string& bos) {
  if (cfg.contains("add_bos_token") && cfg["add_bos_token"].is_boolean()) return cfg["add_bos_token"].get<bool>();
  const json pp = tok.value("post_processor", json());
  std::vector<json> parts;
  if (pp.is_object() && pp.value("type", "") == "Sequence")
    parts = pp.value("processors", std::vector<json>{});
  else
    parts.push_back(pp);
  for (const json& p : parts)
    if (p.is_object() && p.value("type", "") == "TemplateProcessing") {
      const json single = p.value("single", json::array());
      return !single.empty() && single[0].contains("SpecialToken") && !bos.empty() &&
             single[0]["SpecialToken"].value("id", "") == bos;
    }
  return std::nullopt;
}

/** A special token of tokenizer_config.json (a string, or an object with "content"). */
std::string token_text(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return "";
}

}  // namespace

void export_vocab(const model::Checkpoint& c, const Source& src, const std::string& arch, model::GgufWriter& w) {
  if (c.tokenizer_json().empty())
    throw_error(
        "[convert] {} has no tokenizer.json; llama.cpp needs the vocabulary inside the GGUF (copy the "
        "model's tokenizer files into the folder)",
        c.path());
  const json tok = read_json(c.tokenizer_json());
  const json cfg = c.tokenizer_config_json().empty() ? json::object() : read_json(c.tokenizer_config_json());
  const json& model = tok.at("model");
  if (model.value("type", "") != "BPE")
    throw_error("[convert] {}: tokenizer model '{}' cannot be converted yet (BPE only)", c.tokenizer_json(),
                model.value("type", ""));
  const bool gemma = arch == "gemma4";
  // Every other family here is byte-level BPE (GPT-2's byte alphabet): llama.cpp's "gpt2" model.
  const auto byte_level = [](const json& part) {
    return part.is_object() && part.dump().find("\"ByteLevel\"") != std::string::npos;
  };
  if (!gemma && !byte_level(tok.value("pre_tokenizer", json())) && !byte_level(tok.value("decoder", json())))
    throw_error(
        "[convert] {}: a BPE tokenizer without GPT-2's byte alphabet (SentencePiece-style, as Llama 2's) "
        "cannot be converted for {} yet",
        c.tokenizer_json(), arch);

  // Tokens by id: the model's vocabulary, the added tokens over it, "[PAD<id>]" in the gaps up to the
  // config's vocab_size (the embedding's rows).
  const auto rows = src.config().value("vocab_size", size_t{0});
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  auto put = [&](size_t id, const std::string& t, int32_t type) {
    if (rows && id >= rows)
      throw_error(
          "[convert] {} has token {} at id {}, beyond the model's vocab_size {} (the embedding's rows); "
          "llama.cpp refuses such a vocabulary: use the tokenizer that came with the checkpoint",
          c.tokenizer_json(), t, id, rows);
    if (tokens.size() <= id) {
      tokens.resize(id + 1);
      types.resize(id + 1, -1);
    }
    tokens[id] = t;
    types[id] = type;
  };
  for (auto it = model.at("vocab").begin(); it != model.at("vocab").end(); ++it)
    put(it.value().get<size_t>(), it.key(), gemma && is_byte_token(it.key()) ? kByte : kNormal);
  std::map<std::string, int64_t> added_ids;
  for (const json& a : tok.value("added_tokens", json::array())) {
    const std::string t = a.at("content").get<std::string>();
    const auto id = a.at("id").get<size_t>();
    added_ids[t] = static_cast<int64_t>(id);
    const bool special = a.value("special", false);
    int32_t type = special || looks_special(t) ? kControl : kUserDefined;
    std::string text = t;
    if (gemma) {
      type = gemma_visible(t) ? kUserDefined : special ? kControl : kNormal;
    } else if (type == kUserDefined) {  // llama.cpp matches user-defined tokens pre-normalized: "▁" as a space
      for (size_t at; (at = text.find("\xE2\x96\x81")) != std::string::npos;) text.replace(at, 3, " ");
    }
    put(id, text, type);
  }
  const size_t n_vocab = std::max(tokens.size(), rows);
  tokens.resize(n_vocab);
  types.resize(n_vocab, -1);
  for (size_t i = 0; i < n_vocab; ++i)
    if (types[i] < 0) tokens[i] = "[PAD" + std::to_string(i) + "]", types[i] = kUnused;

  std::vector<std::string> merges;
  for (const json& m : model.value("merges", json::array())) {
    if (m.is_string())
      merges.push_back(m.get<std::string>());
    else if (m.is_array() && m.size() == 2)
      merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
  }

  if (gemma) {
    w.add_string("tokenizer.ggml.model", "gemma4");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_f32s("tokenizer.ggml.scores", std::vector<float>(tokens.size(), -1000.0f));
    w.add_i32s("tokenizer.ggml.token_type", types);
  } else {
    w.add_string("tokenizer.ggml.model", "gpt2");
    // The pre-tokenizer llama.cpp names by the tokenizer's hash: Qwen3.5's own, Llama 3's for llama,
    // Qwen2's for the other Qwen families.
    w.add_string("tokenizer.ggml.pre", arch == "qwen35" || arch == "qwen35moe" ? "qwen35"
                                       : arch == "llama"                       ? "llama-bpe"
                                                                               : "qwen2");
    w.add_strings("tokenizer.ggml.tokens", tokens);
    w.add_i32s("tokenizer.ggml.token_type", types);
  }
  w.add_strings("tokenizer.ggml.merges", merges);

  // Special ids: tokenizer_config.json's named tokens, else config.json's ids.
  const json& cfg_all = src.config();
  for (const auto& [typ, key] : {std::pair{"bos", "bos_token_id"},
                                 {"eos", "eos_token_id"},
                                 {"unk", "unknown_token_id"},
                                 {"pad", "padding_token_id"}}) {
    int64_t id = -1;
    if (auto it = added_ids.find(token_text(cfg.value(std::string(typ) + "_token", json()))); it != added_ids.end())
      id = it->second;
    else if (const json v = cfg_all.value(std::string(typ) + "_token_id", json()); v.is_number_unsigned())
      id = v.get<int64_t>();
    else if (v.is_array() && !v.empty() && v[0].is_number_unsigned())
      id = v[0].get<int64_t>();
    if (id >= 0) w.add_u32(std::string("tokenizer.ggml.") + key, static_cast<uint32_t>(id));
  }
  if (gemma) {
    w.add_bool("tokenizer.ggml.add_space_prefix", false);
    w.add_bool("tokenizer.ggml.add_bos_token", true);  // llama.cpp forces it for Gemma 4
  } else {
    if (const auto bos = adds_bos(tok, cfg, token_text(cfg.value("bos_token", json()))))
      w.add_bool("tokenizer.ggml.add_bos_token", *bos);
    if (cfg.contains("add_eos_token") && cfg["add_eos_token"].is_boolean())
      w.add_bool("tokenizer.ggml.add_eos_token", cfg["add_eos_token"].get<bool>());
  }
  // The chat template: chat_template.jinja beside the tokenizer, else tokenizer_config.json's.
  const fs::path jinja = fs::path(c.tokenizer_json()).parent_path() / "chat_template.jinja";
  if (std::ifstream in(jinja, std::ios::binary); in) {
    std::stringstream ss;
    ss << in.rdbuf();
    w.add_string("tokenizer.chat_template", ss.str());
  } else if (cfg.contains("chat_template") && cfg["chat_template"].is_string()) {
    w.add_string("tokenizer.chat_template", cfg["chat_template"].get<std::string>());
  }
}

}  // namespace kiln::convert
