// Parser events -> OpenAI streaming deltas and the final assistant message, in one place, so that
// what was streamed and what the message says can never differ (no end-of-stream "reconciliation"
// that could append arguments twice).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "parse/message.hpp"
#include "plugin/parser_host.hpp"

namespace kiln::parse {

/**
 * Tool-call ids. Parsers leave the id empty and the host assigns `call_` + 24 hex digits, unique
 * within the process for random ids; a fixed seed gives reproducible ids (tests, `kiln parse`).
 */
class CallIds {
 public:
  /** Seeded from std::random_device. */
  CallIds();
  explicit CallIds(uint64_t seed) : rng_(seed) {}
  std::string next();

 private:
  std::mt19937_64 rng_;
};

class EventMapper {
 public:
  explicit EventMapper(CallIds ids = CallIds()) : ids_(std::move(ids)) {}

  /**
   * Maps one event to a delta (none when all its text is held back, below) and records it in
   * message(). Throws HostError when the parser broke the event contract (arguments before a start,
   * indices out of order).
   */
  std::optional<Delta> on_event(const ParseEvent& event);

  /**
   * Text is sent only in whole UTF-8 characters (deltas reach the client as JSON, so a character
   * split across two parser deltas is held back until complete). Returns the deltas still held at
   * end of stream (incomplete characters, which the writers send as U+FFFD); call once after the
   * last event.
   */
  std::vector<Delta> flush();

  const AssistantMessage& message() const { return message_; }

  /**
   * End of stream: returns one line per tool call whose arguments are not a JSON object (a parser
   * bug; count and log it). The message is left as streamed: what the client received is final.
   */
  std::vector<std::string> check() const;

 private:
  std::optional<Delta> delta_for(int channel, const std::string& text, bool final);

  CallIds ids_;
  AssistantMessage message_;
  std::map<int, std::string> held_;  ///< per channel (-2 content, -1 reasoning, call index): partial UTF-8
};

}  // namespace kiln::parse
