// A chat request as a chat template renders it: the arguments of transformers'
// apply_chat_template, built once from the request body the server parsed. Messages, tools,
// documents and chat_template_kwargs are held as the template's own values (Python dicts and lists,
// in the client's key order), so nothing between the route and the template goes through JSON
// text again, and a template reads whatever keys it reads, as it would under transformers.
#pragma once

#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/value.hpp"

namespace kiln {

struct ChatInput {
  tmpl::Value messages = tmpl::Value::list({});  ///< dicts; tool-call arguments sent as JSON text parsed to dicts
  tmpl::Value tools = tmpl::Value::none();       ///< a list, or None
  tmpl::Value documents = tmpl::Value::none();   ///< a list, or None
  std::vector<std::pair<std::string, tmpl::Value>> kwargs;  ///< chat_template_kwargs, in order
  bool add_generation_prompt = true;
  bool continue_final_message = false;  ///< the prompt ends inside the last message (transformers' option)

  /**
   * From a parsed request body: `messages` (required, an array), `tools`, `documents`,
   * `chat_template_kwargs`, `add_generation_prompt` (default true, false when continuing) and
   * `continue_final_message`. Assistant tool-call arguments given as JSON text are parsed to
   * objects, as vLLM and llama.cpp do, so that templates can iterate over them. Throws
   * TemplateError (the client's 400) for a bad shape.
   */
  static ChatInput from_body(const nlohmann::ordered_json& body);
  /** The same from JSON text (the CLI and tests). */
  static ChatInput parse(std::string_view request_json);

  /** A copy with `f` applied to every string it holds, dict keys included (how the server marks
   *  control tokens in request text). */
  ChatInput map_strings(const std::function<std::string(const std::string&)>& f) const;
};

}  // namespace kiln
