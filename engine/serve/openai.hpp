// The OpenAI wire format: request bodies of /v1/chat/completions and /v1/completions checked and
// turned into GenRequests (every bad field a 400 naming it), and responses and stream chunks
// written from the engine's pieces. nlohmann/json stays inside openai.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.hpp"
#include "parse/message.hpp"
#include "serve/request.hpp"

namespace kiln::serve {

class ServedModel;

struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  ///< the offending field, "" for none
  std::string type = "invalid_request_error";
  std::string code;  ///< e.g. model_not_found
};

/** `{"error": {"message", "type", "param", "code"}}` */
std::string error_json(const ApiError& e);

/** A checked generation request: what the engine runs and how to answer. */
struct ApiRequest {
  std::shared_ptr<GenRequest> gen;
  ServedModel* model = nullptr;
  bool stream = false, include_usage = false;
  bool chat = false;
};

/** Finds a served model by the request's "model" (optional when one is served). */
using ModelLookup = std::function<ServedModel*(const std::string& name, ApiError* error)>;

/** Bodies nesting deeper are refused before parsing (serialising them again would recurse that deep). */
inline constexpr size_t kMaxJsonDepth = 64;
/** The deepest nesting of arrays and objects in JSON text (strings skipped); cheap, never recursive. */
size_t json_depth(std::string_view text);

/** Parses and checks a body; nullopt with `error` set when it is refused. */
std::optional<ApiRequest> parse_request(std::string_view body, bool chat, const ModelLookup& lookup,
                                        const ServerConfig::Limits& limits, ApiError* error);
/** The same for a body another route has already parsed and converted (the Anthropic one). */
std::optional<ApiRequest> parse_request_body(nlohmann::ordered_json body, bool chat, const ModelLookup& lookup,
                                             const ServerConfig::Limits& limits, ApiError* error);

/** What one choice has produced so far (non-streaming answers are assembled from pieces). */
struct ChoiceOut {
  parse::AssistantMessage message;  ///< chat
  std::string text;                 ///< completions
  std::vector<sched::Sampled> logprobs;
  std::vector<int32_t> token_ids;  ///< return_token_ids
  Finish finish = Finish::none;
  bool role_sent = false;        ///< streaming chat: the role delta went out
  bool prompt_ids_sent = false;  ///< streaming completions, return_token_ids: the prompt's ids went out
};

/** The stream of SSE events for one request. */
class ResponseWriter {
 public:
  ResponseWriter(const ApiRequest& req, std::string model_name);
  /** SSE lines for one piece (`data: {...}\n\n` each). */
  std::string stream_piece(const Piece& p);
  /** The usage chunk (when stream_options.include_usage) and `data: [DONE]`. */
  std::string stream_end(const Usage& u);
  /** Folds a piece into the answer (non-streaming). */
  void absorb(const Piece& p);
  /** The whole non-streaming response body. */
  std::string final_body(const Usage& u) const;

 private:
  /** What a chunk's choice carries: chat's delta (`role`: the first chunk's role delta; neither:
   *  an empty delta), or completions' text. */
  struct ChunkBody {
    const parse::Delta* delta = nullptr;
    bool role = false;
    std::string_view text;
  };
  /** One chunk of choice `index` (whose ChoiceOut exists). `ids`: its tokens (return_token_ids). */
  std::string chunk(uint32_t index, const ChunkBody& body, const std::vector<sched::Sampled>& lps, Finish finish,
                    size_t text_offset = 0, const std::vector<int32_t>* ids = nullptr);
  const std::vector<int32_t>& prompt_ids_of(uint32_t choice) const;

  const ApiRequest& req_;
  std::string model_, id_;
  int64_t created_;
  std::vector<ChoiceOut> choices_;
  bool chat_prompt_ids_sent_ = false;  ///< streaming chat, return_token_ids: the prompt's ids went out
};

}  // namespace kiln::serve
