// OpenAI's Responses API (POST /v1/responses) beside Chat Completions and Anthropic Messages: a body
// is checked and turned into the chat request the rest of the server already serves (same limits,
// template, parsers, grammars and engine), and the engine's pieces are written back as a response
// object or its stream of events. Stored responses (store: true, OpenAI's default) continue through
// previous_response_id and can be read and deleted; the store is bounded and keeps one API key's
// responses from another's. nlohmann/json stays inside responses.cpp.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>

#include "serve/openai.hpp"

namespace kiln::serve {

/** Responses kept for previous_response_id, GET and DELETE; the least recently used go first. */
class ResponseStore {
 public:
  ResponseStore(size_t max_responses, uint64_t max_bytes) : max_count_(max_responses), max_bytes_(max_bytes) {}

  struct Entry {
    std::string owner;         ///< the API key that made it ("" without keys); no other key sees it
    std::string response;      ///< the response object, as GET returns it (JSON)
    std::string conversation;  ///< the chat messages so far, input and output, without instructions (JSON)
  };
  /** Keeps `e` unless it alone is over the byte limit. */
  void put(const std::string& id, Entry e);
  /** The entry, when it exists and `owner` made it. */
  std::optional<Entry> get(const std::string& id, const std::string& owner);
  bool erase(const std::string& id, const std::string& owner);
  size_t size() const;

 private:
  struct Slot {
    Entry e;
    std::list<std::string>::iterator lru;
  };
  static uint64_t bytes_of(const std::string& id, const Entry& e);
  mutable std::mutex mu_;
  size_t max_count_;
  uint64_t max_bytes_, bytes_ = 0;
  std::unordered_map<std::string, Slot> slots_;
  std::list<std::string> lru_;  ///< most recent first
};

/** What a response repeats from its request, and the turn it adds to a stored conversation. */
struct ResponsesTurn;

/** A checked /v1/responses request: the chat request it runs, and its Responses side. */
struct ResponsesRequest {
  ApiRequest api;
  std::shared_ptr<const ResponsesTurn> turn;
  std::string id;     ///< resp_...
  std::string owner;  ///< the API key ("" without keys): the store's partition
  bool store = true;
};

/**
 * Parses and checks a body (400s name the field: `input[2].type`, `tools[0].type`, ...); a
 * previous_response_id is looked up in `store` under `owner` (404 when it is not there).
 */
std::optional<ResponsesRequest> parse_responses(std::string_view body, const ModelLookup& lookup,
                                                const ServerConfig::Limits& limits, ResponseStore& store,
                                                const std::string& owner, ApiError* error);

/**
 * The response object from the engine's pieces, or its stream of events (`event:` and `data:`
 * lines with sequence numbers). A finished response with `store` goes into the store.
 */
class ResponsesWriter {
 public:
  ResponsesWriter(std::shared_ptr<const ResponsesRequest> req, ResponseStore* store, std::string model_name);
  ~ResponsesWriter();
  ResponsesWriter(const ResponsesWriter&) = delete;
  ResponsesWriter& operator=(const ResponsesWriter&) = delete;
  /** response.created and response.in_progress (first call), then the piece's item and delta events. */
  std::string stream_piece(const Piece& p);
  /** The open item's done events, then response.completed (or .incomplete, .failed). */
  std::string stream_end(const Usage& u);
  void absorb(const Piece& p);
  /** The whole response object. */
  std::string final_body(const Usage& u);
  /** The request was cancelled (POST /v1/responses/{id}/cancel): the response ends "cancelled". */
  void cancel();

 private:
  struct State;
  std::unique_ptr<State> st_;
};

/** A response id's object for a request in flight that was cancelled, as the cancel route answers. */
std::string cancelled_response_json(const std::string& id);

}  // namespace kiln::serve
