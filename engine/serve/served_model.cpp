#include "serve/served_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "core/log.hpp"
#include "model/gguf_tokenizer.hpp"
#include "parse/pipeline.hpp"
#include "plugin/registry.hpp"
#include "serve/control_tokens.hpp"
#include "text/utf8.hpp"

namespace kiln::serve {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw_error("[serve] cannot read chat template {}", path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

/** tokenizer_config-like JSON for a GGUF's special tokens (what its template refers to). */
std::string gguf_special_tokens(const model::GgufVocab& v) {
  nlohmann::json cfg = nlohmann::json::object();
  if (v.bos >= 0) cfg["bos_token"] = v.tokens[static_cast<size_t>(v.bos)];
  if (v.eos >= 0) cfg["eos_token"] = v.tokens[static_cast<size_t>(v.eos)];
  return cfg.dump();
}

}  // namespace

model::HostOptions host_options(const ModelConfig& config, const BackendConfig& backend) {
  model::HostOptions o;
  o.device = backend.kind;
  if (backend.kind == "vulkan" && !backend.device.empty()) o.device = "vulkan:" + backend.device;
  o.allow_cpu_fallback = backend.allow_cpu_fallback;
  o.cache = config.cache;
  o.max_context = static_cast<uint32_t>(config.max_context);
  o.max_seqs = static_cast<uint32_t>(config.max_seqs);
  o.max_batch_tokens = static_cast<uint32_t>(config.max_batch_tokens);
  o.prefix_snapshots = config.cache.prefix_caching;
  return o;
}

ServedModel::ServedModel(const ModelConfig& config, const BackendConfig& backend, const PluginRegistry& registry)
    : config_(config) {
  model::Checkpoint ck = model::Checkpoint::open(config.path);
  const std::string arch = config.arch == "auto" ? ck.model_type() : config.arch;
  const Component* comp = registry.find_model_type(arch);
  if (!comp)
    throw_error("[serve] model '{}': no model plugin serves model type '{}' (see: kiln plugins)", config.name, arch);
  read_text_side(ck, registry);
  arch_ = arch;
  host_ = std::make_unique<model::ModelHost>(std::move(ck), *comp, host_options(config, backend));
  n_vocab_ = host_->limits().n_vocab;
  max_context_ = host_->limits().max_context;
  const cache::CacheLayout& layout = host_->cache().layout();
  cache_tokens_ = host_->limits().max_context;
  for (const cache::KvGroup& g : layout.groups)
    if (g.kind == KILN_CACHE_FULL_KV)
      cache_tokens_ = std::min<uint64_t>(cache_tokens_, uint64_t{g.n_blocks} * layout.block_tokens);
  grammars_ = std::make_unique<GrammarCache>(tokenizer(), n_vocab(), stop_ids_);
  mask_untokenized_rows();
  created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  log::info("[serve] model '{}' ({}) on {}: context {}, {} sequences, cache holds {} tokens per sequence", config.name,
            arch, host_->device().info().name, max_context(), host_->limits().max_seqs, cache_tokens_);
}

void ServedModel::read_text_side(const model::Checkpoint& ck, const PluginRegistry& registry) {
  const model::GenerationDefaults gen = ck.generation();
  // Tokenizer and chat template, before the checkpoint moves into the host.
  if (!ck.tokenizer_json().empty())
    tokenizer_ = text::Tokenizer::from_dir(std::filesystem::path(ck.tokenizer_json()).parent_path().string());
  else if (ck.vocab())
    tokenizer_ = model::gguf_tokenizer(*ck.vocab());
  if (ck.format() == model::CheckpointFormat::hf) {
    const std::filesystem::path dir = std::filesystem::is_directory(ck.path())
                                          ? std::filesystem::path(ck.path())
                                          : std::filesystem::path(ck.path()).parent_path();
    if (!config_.chat_template.empty()) {
      const std::string cfg_path = (dir / "tokenizer_config.json").string();
      const std::string cfg = std::filesystem::exists(cfg_path) ? read_text(cfg_path) : "";
      template_ = ChatTemplate::from_config(cfg, read_text(config_.chat_template));
    } else {
      try {
        template_ = ChatTemplate::from_model_dir(dir);
      } catch (const HostError& e) {
        log::warn("[serve] model '{}': {}; chat requests will be refused (set chat_template in the YAML)", config_.name,
                  e.what());
      }
    }
  } else if (ck.vocab()) {
    const std::string special = gguf_special_tokens(*ck.vocab());
    if (!config_.chat_template.empty())
      template_ = ChatTemplate::from_config(special, read_text(config_.chat_template));
    else if (!ck.vocab()->chat_template.empty())
      template_ = ChatTemplate::from_config(special, ck.vocab()->chat_template);
    else
      log::info(
          "[serve] model '{}': the GGUF embeds no chat template; chat requests will be refused (set "
          "chat_template in the YAML)",
          config_.name);
  }
  if (!config_.reasoning_parser.empty())
    reasoning_ = &parse::find_parser(registry, KILN_COMPONENT_REASONING_PARSER, config_.reasoning_parser);
  if (!config_.tool_parser.empty())
    tools_ = &parse::find_parser(registry, KILN_COMPONENT_TOOL_PARSER, config_.tool_parser);
  if (tokenizer_) controls_ = tokenizer_->special_token_texts();
  for (const std::string& c : controls_) longest_control_ = std::max(longest_control_, c.size());
  for (int64_t id : gen.stop_tokens) stop_ids_.push_back(static_cast<int32_t>(id));
  if (tokenizer_ && tokenizer_->eos_id() &&
      std::find(stop_ids_.begin(), stop_ids_.end(), *tokenizer_->eos_id()) == stop_ids_.end())
    stop_ids_.push_back(*tokenizer_->eos_id());

  // Defaults: the YAML's sampling section, then generation_config.json (which only applies when it
  // asks to sample), then greedy.
  const SamplingConfig& s = config_.sampling;
  const bool sample = gen.do_sample.value_or(false);
  defaults_.temperature = s.temperature.value_or(sample ? gen.temperature.value_or(1.0) : 0.0);
  defaults_.top_p = s.top_p.value_or(sample ? gen.top_p.value_or(1.0) : 1.0);
  defaults_.top_k = s.top_k.value_or(sample ? gen.top_k.value_or(0) : 0);
  defaults_.min_p = s.min_p.value_or(sample ? gen.min_p.value_or(0.0) : 0.0);
  defaults_.repetition_penalty = s.repetition_penalty.value_or(gen.repetition_penalty.value_or(1.0));
  defaults_.presence_penalty = s.presence_penalty.value_or(0.0);
  defaults_.frequency_penalty = s.frequency_penalty.value_or(0.0);
  if (s.seed) defaults_.seed = *s.seed;
  if (s.max_tokens) default_max_tokens_ = static_cast<uint32_t>(*s.max_tokens);
}

void ServedModel::mask_untokenized_rows() {
  if (tokenizer_) {
    // Qwen and Gemma pad the output layer past the tokenizer's last id (151,936 rows for 151,669
    // ids): those rows have logits like any other, but no text, so they are never sampled.
    std::vector<uint64_t> ok((n_vocab() + 63) / 64, 0);
    uint32_t masked = 0;
    for (uint32_t id = 0; id < n_vocab(); ++id) {
      if (!tokenizer_->id_to_token(static_cast<text::TokenId>(id)).empty())
        ok[id >> 6] |= uint64_t{1} << (id & 63);
      else
        ++masked;
    }
    if (masked) {
      sampleable_ = std::move(ok);
      log::info(
          "[serve] model '{}': {} of the output layer's {} rows have no token in the tokenizer; they are "
          "never sampled",
          config_.name, masked, n_vocab());
    }
  }
}

ServedModel::ServedModel(const ModelConfig& config, const PluginRegistry& registry) : config_(config) {
  const model::Checkpoint ck = model::Checkpoint::open_metadata(config.path);
  arch_ = config.arch == "auto" ? ck.model_type() : config.arch;
  read_text_side(ck, registry);
  // The model plugin reads these from the same metadata; without it: the output rows
  // (vocab_size, a GGUF's <arch>.vocab_size, else the tokenizer's size) and the context (the YAML's,
  // else the checkpoint's capped at 8192, as the host does).
  const nlohmann::json meta = nlohmann::json::parse(ck.config_json(), nullptr, false);
  const auto number = [&](std::initializer_list<std::string> keys) -> uint64_t {
    for (const std::string& k : keys)
      if (meta.is_object() && meta.contains(k) && meta[k].is_number_unsigned()) return meta[k].get<uint64_t>();
    return 0;
  };
  n_vocab_ = static_cast<uint32_t>(number({"vocab_size", arch_ + ".vocab_size"}));
  if (!n_vocab_ && ck.vocab()) n_vocab_ = static_cast<uint32_t>(ck.vocab()->tokens.size());
  if (!n_vocab_ && tokenizer_) n_vocab_ = static_cast<uint32_t>(tokenizer_->vocab_size());
  const uint64_t ctx = number({"max_position_embeddings", arch_ + ".context_length"});
  max_context_ = config.max_context > 0 ? static_cast<uint32_t>(config.max_context)
                                        : static_cast<uint32_t>(std::min<uint64_t>(ctx ? ctx : 8192, 8192));
  cache_tokens_ = max_context_;
  mask_untokenized_rows();
  created_ =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  log::info("[serve] model '{}' ({}): render only (no weights, no device); vocabulary {}, context {}", config.name,
            arch_, n_vocab_, max_context_);
}

bool ServedModel::parsers_read_control_tokens() const {
  // Gemma 4's reasoning channel and tool calls are control tokens (docs/parsers.md); the parsers
  // kiln ships for other models read ordinary text. A plugin cannot declare this yet.
  const auto reads = [](const Component* c) { return c && c->name == "gemma4"; };
  return reads(reasoning_) || reads(tools_);
}

std::string ServedModel::description() const {
  const std::string d =
      fmt::format("{} ({}) from {}{}", config_.name, arch_, config_.path, host_ ? "" : " (render only)");
  return config_.description.empty() ? d : config_.description + " — " + d;
}

std::vector<int32_t> ServedModel::encode(std::string_view text, bool add_special) const {
  if (!tokenizer_) throw_error("[serve] model '{}' has no tokenizer; send token ids", config_.name);
  text::EncodeOptions eo;
  eo.add_special = add_special;
  return tokenizer_->encode(text, eo);
}

std::vector<int32_t> ServedModel::encode_chat(const ChatInput& chat, std::string* rendered) const {
  if (!template_) throw_error("[serve] model '{}' has no chat template", config_.name);
  if (!tokenizer_) throw_error("[serve] model '{}' has no tokenizer; send token ids", config_.name);
  const bool guard = !config_.parse_special_in_content && !controls_.empty();
  std::string text = guard ? template_->render(mark_control_tokens(chat, controls_)) : template_->render(chat);
  text::EncodeOptions eo;
  if (guard) {
    eo.text_only = unmark_control_tokens(text, longest_control_);
    // The tokenizer drops text-only ranges from text it must repair: fail closed instead.
    if (!text::utf8::is_valid(text))
      throw_error(
          "[serve] the rendered prompt is not valid UTF-8; the request's text cannot be kept apart from "
          "the template's control tokens");
  }
  std::vector<int32_t> ids = tokenizer_->encode(text, eo);
  if (rendered) *rendered = std::move(text);
  return ids;
}

}  // namespace kiln::serve
