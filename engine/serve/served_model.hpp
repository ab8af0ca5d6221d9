// One configured model, assembled once from its YAML entry and shared by `kiln serve` and
// `kiln generate`: the model host on its device, the tokenizer, the chat template, generation
// defaults (YAML over generation_config.json), the stop ids and the tool-call / reasoning parsers.
// After construction it is immutable except for the host, which only the model's engine thread
// drives; everything else may be read from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"
#include "model/model_host.hpp"
#include "sched/sampler.hpp"
#include "serve/constraints.hpp"
#include "template/chat_render.hpp"
#include "text/tokenizer.hpp"

namespace kiln {
class PluginRegistry;
struct Component;
}  // namespace kiln

namespace kiln::serve {

class ServedModel {
 public:
  /** Loads the checkpoint onto the backend's device; throws HostError / ConfigError saying what to fix. */
  ServedModel(const ModelConfig& config, const BackendConfig& backend, const PluginRegistry& registry);
  /**
   * Render-only (kiln serve --render-only, a router's tokenizer sidecar): the tokenizer, template,
   * parsers and request defaults from the checkpoint's metadata, no weights (a Hugging Face folder
   * may have none) and no device. host() must not be called.
   */
  ServedModel(const ModelConfig& config, const PluginRegistry& registry);
  bool render_only() const { return !host_; }

  const std::string& name() const { return config_.name; }
  const ModelConfig& config() const { return config_; }
  model::ModelHost& host() { return *host_; }
  const model::ModelHost& host() const { return *host_; }
  /** Null when the checkpoint has neither tokenizer.json nor an embedded vocabulary (ids only). */
  const text::Tokenizer* tokenizer() const { return tokenizer_ ? &*tokenizer_ : nullptr; }
  /** Null when neither the model nor the YAML gives a chat template (chat requests get 400). */
  const ChatTemplate* chat_template() const { return template_ ? &*template_ : nullptr; }
  const Component* reasoning_parser() const { return reasoning_; }
  const Component* tool_parser() const { return tools_; }
  /** The parsers read control tokens as text (Gemma 4's <|channel>, <|tool_call>, <|"|>): chat
   *  output then keeps them rather than dropping them as skip_special_tokens would. */
  bool parsers_read_control_tokens() const;
  /** Compiled grammars of constrained requests (thread-safe). */
  GrammarCache& grammars() const { return *grammars_; }

  uint32_t n_vocab() const { return n_vocab_; }
  /** The ids a request may be given (bit t of word t/64), or null for all of them: output rows the
   *  tokenizer has no token for (a padded vocabulary) are never sampled. Computed once. */
  const uint64_t* sampleable() const { return sampleable_.empty() ? nullptr : sampleable_.data(); }
  uint32_t max_context() const { return max_context_; }
  /** Tokens the KV cache can hold for one sequence alone (a request beyond it can never run). */
  uint64_t cache_token_capacity() const { return cache_tokens_; }
  /** eos ids of config.json and generation_config.json (or the GGUF's), all stop generation. */
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  /** Request defaults: YAML sampling over generation_config.json; greedy when neither asks to sample. */
  const sched::SamplingParams& default_sampling() const { return defaults_; }
  uint32_t default_max_tokens() const { return default_max_tokens_; }
  /** Seconds since the epoch when loaded (the `created` of /v1/models). */
  int64_t created() const { return created_; }
  /** Where the weights came from and what the model is, for /v1/models and logs. */
  std::string description() const;

  /** Encodes prompt text; add_special applies the tokenizer's post-processor (e.g. a leading BOS).
   *  Control tokens written in the text are recognised: the client writes the whole prompt. */
  std::vector<int32_t> encode(std::string_view text, bool add_special) const;
  /**
   * Renders a chat request (OpenAI body JSON) with the chat template and encodes it. Control tokens
   * come only from the template: written in request text they are characters (serve/control_tokens.hpp),
   * unless the YAML's parse_special_in_content says otherwise. `rendered` gets the prompt text.
   * Throws TemplateError (a 400) or HostError.
   */
  std::vector<int32_t> encode_chat(const ChatInput& chat, std::string* rendered = nullptr) const;

 private:
  /** What both constructors read from the checkpoint: tokenizer, template, parsers, defaults. */
  void read_text_side(const model::Checkpoint& ck, const PluginRegistry& registry);
  /** The padded output rows no token has (sampleable_). */
  void mask_untokenized_rows();

  ModelConfig config_;
  std::unique_ptr<model::ModelHost> host_;
  std::string arch_;
  uint32_t n_vocab_ = 0, max_context_ = 0;
  std::optional<text::Tokenizer> tokenizer_;
  std::optional<ChatTemplate> template_;
  const Component* reasoning_ = nullptr;
  const Component* tools_ = nullptr;
  std::vector<int32_t> stop_ids_;
  std::unique_ptr<GrammarCache> grammars_;
  std::vector<uint64_t> sampleable_;   ///< empty: every id
  std::vector<std::string> controls_;  ///< the tokenizer's special tokens' texts
  size_t longest_control_ = 1;         ///< bytes of the longest of them
  sched::SamplingParams defaults_;
  uint32_t default_max_tokens_ = 256;
  uint64_t cache_tokens_ = 0;
  int64_t created_ = 0;
};

/** The model host's options for a YAML model entry on a YAML backend (one set of defaults). */
model::HostOptions host_options(const ModelConfig& config, const BackendConfig& backend);

}  // namespace kiln::serve
