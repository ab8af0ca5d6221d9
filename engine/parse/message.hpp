// An OpenAI assistant message as assembled from parser events, its JSON, and the client-side
// application of streaming deltas (what an OpenAI client does with `choices[0].delta`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::parse {

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  ///< JSON object text, exactly the concatenated argument fragments
  bool operator==(const ToolCall&) const = default;
};

struct AssistantMessage {
  std::string content;            ///< "" is written as null
  std::string reasoning_content;  ///< "" is written as null
  std::vector<ToolCall> tool_calls;
  bool operator==(const AssistantMessage&) const = default;
};

/**
 * `{"role": "assistant", "content": ..., "reasoning_content": ..., "tool_calls": [{"id", "type":
 * "function", "function": {"name", "arguments"}}]}`; empty strings are null and `tool_calls` is left
 * out when there are none (as OpenAI does). indent < 0: one line.
 */
std::string message_json(const AssistantMessage& message, int indent = -1);

/** "tool_calls" when the message has calls, else "length" when generation was cut, else "stop". */
const char* finish_reason(const AssistantMessage& message, bool length_limited = false);

/**
 * One streaming delta of an assistant message, before any wire format: the writers turn it into an
 * OpenAI `choices[].delta` or Anthropic content-block events. Text is whole UTF-8 characters except
 * at the end of a stream (see EventMapper::flush).
 */
struct Delta {
  enum class Kind : uint8_t { content, reasoning, call_start, call_arguments };
  Kind kind = Kind::content;
  std::string text;      ///< content or reasoning text, or a fragment of a call's arguments
  uint32_t call = 0;     ///< call_start, call_arguments: the call's index (0, 1, 2, ...)
  std::string id, name;  ///< call_start: the call's id and function name
  bool operator==(const Delta&) const = default;
};

/**
 * The OpenAI `choices[].delta` object of a delta, as JSON text: `{"content": ...}`,
 * `{"reasoning_content": ...}`, `{"tool_calls": [{"index", "id", "type": "function", "function":
 * {"name", "arguments": ""}}]}` for a call start, `{"tool_calls": [{"index", "function":
 * {"arguments"}}]}` for a fragment. Invalid UTF-8 becomes U+FFFD.
 */
std::string delta_json(const Delta& delta);

/** Folds a delta into a message (what a client does with the delta's JSON). */
void apply_delta(const Delta& delta, AssistantMessage& message);

/**
 * Applies one streaming delta (the JSON object text of `choices[0].delta`) the way an OpenAI client
 * does: content and reasoning_content append, a tool_calls entry with a new index opens a call (id,
 * name), later entries append to `arguments`. Throws HostError for a delta that is not such an object.
 */
void apply_delta(std::string_view delta_json, AssistantMessage& message);

}  // namespace kiln::parse
