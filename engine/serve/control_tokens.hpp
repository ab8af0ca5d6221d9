// Control tokens cannot be forged through a chat request. Text a request brings (message content,
// names, tool calls and results, tool definitions) is rendered by the chat template like any text,
// but a control token's text inside it must reach the tokenizer as characters, not as the control
// token: only the template's own text produces control tokens.
//
// Before rendering, every occurrence of a control token's text in the request's strings is wrapped
// in two Unicode noncharacters (U+FDD0 … U+FDD1; any the request holds become U+FFFD, and their
// \u-escaped spellings \ufffd), and so is a string's start that is the end of a control token and
// its end that is a token's start (two request strings printed side by side cannot join into one).
// Tool-call arguments sent as JSON text are parsed first (the renderer decodes their escapes). Templates
// copy request text through unchanged (or JSON-encode it, which keeps or \u-escapes the marks), so
// after rendering the marks show where request text put a control token's characters; they are
// removed (the render is then byte-identical to an unmarked one) and their ranges given to the
// tokenizer as text-only (text::EncodeOptions::text_only).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "template/chat_input.hpp"

namespace kiln::serve {

/** The chat with each control token's text in its strings (dict keys included) marked. */
ChatInput mark_control_tokens(const ChatInput& chat, const std::vector<std::string>& controls);

/** Removes the marks from a rendered prompt; returns the byte ranges they enclosed (sorted,
 *  disjoint). An unclosed mark covers what follows it up to `longest` bytes (the longest control
 *  token's text). */
std::vector<std::pair<std::size_t, std::size_t>> unmark_control_tokens(std::string& text, std::size_t longest = 64);

}  // namespace kiln::serve
