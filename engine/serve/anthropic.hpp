// The Anthropic Messages API beside the OpenAI one: a /v1/messages body is checked and turned into
// the OpenAI chat body the rest of the server already serves (same limits, template, parsers and
// engine), and the engine's pieces are written back as Anthropic content blocks and stream events.
// nlohmann/json stays inside anthropic.cpp.
#pragma once

#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

#include "serve/openai.hpp"

namespace kiln::serve {

/** `{"type": "error", "error": {"type", "message"}}` with Anthropic's error type for the status. */
std::string anthropic_error_json(const ApiError& e);

/**
 * Real clients send regular expressions with escapes JSON lacks (`\s`, `\d`) inside tool schemas:
 * the body with each such backslash doubled (the character kept literally), and how many were
 * fixed. Only invalid escapes inside strings change; anything else malformed stays malformed.
 */
std::string tolerate_invalid_escapes(std::string_view body, size_t* fixed);

/**
 * A /v1/messages body as the OpenAI chat body (system first, tool_use as tool_calls, tool_result
 * as tool messages, thinking as enable_thinking), parsed by parse_request. Lines of the system
 * prompt matching `volatile_lines` are removed first (they would defeat prefix caching).
 */
std::optional<ApiRequest> parse_messages(std::string_view body, const ModelLookup& lookup,
                                         const ServerConfig::Limits& limits,
                                         const std::vector<std::regex>& volatile_lines, ApiError* error);

/** The OpenAI chat body of a /v1/messages body (what the template renders); throws on a refusal. */
std::string anthropic_chat_body(std::string_view body);

/** The rendered prompt's token count for /v1/messages/count_tokens (`{"input_tokens": N}`). */
std::optional<std::string> count_tokens(std::string_view body, const ModelLookup& lookup,
                                        const ServerConfig::Limits& limits,
                                        const std::vector<std::regex>& volatile_lines, ApiError* error);

/** Anthropic's answer from the engine's pieces: a message, or its stream of events. */
class MessagesWriter {
 public:
  MessagesWriter(const ApiRequest& req, std::string model_name);
  ~MessagesWriter();
  MessagesWriter(const MessagesWriter&) = delete;
  MessagesWriter& operator=(const MessagesWriter&) = delete;
  /** message_start (first call), then content_block_start / _delta / _stop events for the piece. */
  std::string stream_piece(const Piece& p);
  /** The last block's stop, message_delta (stop_reason, output usage) and message_stop. */
  std::string stream_end(const Usage& u);
  /** A ping event (keeps idle streams open through proxies). */
  static std::string ping();
  void absorb(const Piece& p);
  std::string final_body(const Usage& u) const;

 private:
  struct State;
  std::unique_ptr<State> st_;
};

}  // namespace kiln::serve
