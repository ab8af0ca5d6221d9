// Rendering an OpenAI chat-completions request with a model's chat template, as transformers'
// apply_chat_template(tokenize=False) does. Used by `kiln template` and the server.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "template/chat_input.hpp"
#include "template/template.hpp"

namespace kiln {

class ChatTemplate {
 public:
  /** Template from DIR/chat_template.jinja if present, else DIR/chat_template.json, else
   *  tokenizer_config.json's chat_template (a string, or a list of {name, template}); special
   *  tokens from tokenizer_config.json. Throws HostError when there is no template, and
   *  TemplateError(Syntax) when it does not parse. */
  static ChatTemplate from_model_dir(const std::filesystem::path& dir);

  /** From tokenizer_config.json text ("" for none) and an optional template text that overrides
   *  the config's. */
  static ChatTemplate from_config(std::string_view tokenizer_config_json, std::string_view template_text = {});

  /** Renders a request body: messages, tools, chat_template_kwargs, add_generation_prompt
   *  (default true), continue_final_message (prompt cut right after the last message's text, as
   *  transformers does; add_generation_prompt then defaults to false). Assistant tool-call
   *  arguments given as JSON strings are parsed to objects.
   *  Throws TemplateError: a bad request or a template failure, both HTTP 400. */
  std::string render_request(std::string_view request_json, const TemplateLimits& limits = {}) const;

  /** Renders a request the server parsed (see ChatInput). Throws TemplateError. */
  std::string render(const ChatInput& chat, const TemplateLimits& limits = {}) const;

  /** Where the template came from, for messages ("DIR/chat_template.jinja", ...). */
  const std::string& origin() const { return origin_; }

 private:
  std::shared_ptr<const Template> default_, tool_use_;
  /** bos_token, eos_token, ... as strings */
  std::shared_ptr<const std::vector<std::pair<std::string, tmpl::Value>>> special_ =
      std::make_shared<const std::vector<std::pair<std::string, tmpl::Value>>>();
  std::string origin_;
};

}  // namespace kiln
