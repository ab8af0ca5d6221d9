// A generation request between the HTTP layer and a model's engine. The HTTP thread fills the
// inputs, hands the request to Engine::submit and then only reads what the engine publishes through
// the request's channel (a mutex and a condition variable): whether preparation succeeded, then the
// pieces of output of each choice. Per-request state that the engine mutates (samplers, decoders,
// parsers) lives in the engine's Choice objects, never here.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "parse/message.hpp"
#include "plugin/parser_host.hpp"
#include "sched/sampler.hpp"
#include "serve/constraints.hpp"

namespace kiln {
struct ChatInput;
}

namespace kiln::serve {

/** Why a choice ended (none: it goes on). */
enum class Finish : uint8_t { none, stop, length, tool_calls, error };

/** OpenAI's finish_reason: "stop", "length", "tool_calls" ("error" and "" for the others). */
const char* finish_reason(Finish f);

/** One piece of output of one choice. */
struct Piece {
  uint32_t choice = 0;
  std::string text;                      ///< raw text delta (completions)
  std::vector<parse::Delta> deltas;      ///< chat: content, reasoning and tool-call deltas
  std::vector<sched::Sampled> logprobs;  ///< the tokens behind this piece (when logprobs were asked for)
  std::vector<int32_t> token_ids;        ///< the same tokens' ids (when return_token_ids was asked for)
  Finish finish = Finish::none;          ///< set on the choice's last piece: stop, length, tool_calls
  std::string stop_sequence;             ///< the stop string that ended the choice (on its last piece)
  std::string error;                     ///< the choice failed (a server error; the message says why)
};

struct Usage {
  uint64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
};

struct GenRequest {
  // ---- inputs (written before Engine::submit, read-only afterwards)
  std::string id;
  bool chat = false;
  std::shared_ptr<const ChatInput> chat_input;   ///< chat: what the template renders
  std::vector<std::string> prompt_texts;         ///< completions: prompts as text ...
  std::vector<std::vector<int32_t>> prompt_ids;  ///< ... or as token ids
  uint32_t n = 1;                                ///< choices per prompt
  sched::SamplingParams sampling;                ///< seed: choice i of prompt p uses seed + p * n + i
  std::optional<uint32_t> max_tokens;            ///< none: up to the context (and the model's default)
  uint32_t max_prompt_tokens = 0;                ///< server.limits (0: the context)
  uint32_t max_output_tokens = 0;                ///< server.limits.max_tokens, which caps the default too (0: none)
  std::vector<std::string> stop;
  std::string cache_salt;  ///< requests share cached prefixes only with the same salt (vLLM's cache_salt)
  std::vector<int32_t> stop_ids;
  bool ignore_eos = false;
  bool skip_special = true;
  bool return_token_ids = false;  ///< vLLM's: the prompt's and each choice's token ids in the answer
  ParserRequest parser;       ///< thinking mode and tools for the parsers
  bool parse_tools = true;    ///< false: tool_choice none (no tool-call parsing)
  ConstraintSpec constraint;  ///< response_format / tool_choice / grammar fields: the output's grammar
  std::chrono::steady_clock::time_point arrival = std::chrono::steady_clock::now();
  std::atomic<bool> cancelled{false};  ///< set by the HTTP side when the client went away

  // ---- published by the engine (under mu)
  std::mutex mu;
  std::condition_variable cv;
  bool prepared = false;
  std::string prepare_error, prepare_param;  ///< a 400: what is wrong, and the field
  std::string prepare_code;                  ///< the 400's OpenAI error code (context_length_exceeded), or ""
  /** context_length_exceeded: the prompt's tokens, the max_tokens that overflowed (0: the prompt
   *  alone did) and the limit (Anthropic's route words its own message from them). */
  uint64_t overflow_prompt = 0, overflow_output = 0, overflow_limit = 0;
  std::vector<std::vector<int32_t>> prompt_token_ids;  ///< return_token_ids: each prompt's ids, as encoded
  std::deque<Piece> pieces;
  uint32_t choices_total = 0, choices_done = 0;
  Usage usage;

  enum class Prepared { ok, refused, timed_out };
  /** Waits until preparation is over; `refused` copies out the 400's message, field and code. */
  Prepared wait_prepared(std::chrono::milliseconds timeout, std::string* error, std::string* param,
                         std::string* code = nullptr);
  /** Waits up to `timeout` for pieces; moves them out. Returns false when every choice is done and
   *  nothing is left. */
  bool next(std::vector<Piece>& out, std::chrono::milliseconds timeout);
  void push(Piece p);
  /** Every choice is done: the answer is complete, though the engine may hold the request until its
   *  next step releases the sequence (a cancel then finds nothing to cancel). */
  bool finished();
};

}  // namespace kiln::serve
