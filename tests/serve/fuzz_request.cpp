// libFuzzer target (clang, -DKILN_FUZZ=ON): request handling of both OpenAI APIs on arbitrary bytes,
// and what the server writes back. Besides "no crash / no sanitizer report":
//   - a body parse_request accepts, or refuses with a 4xx, never throws;
//   - every SSE event and the non-streaming body written from pieces carrying the input's text are
//     valid JSON (escaping), and the error envelope of a refusal is too;
//   - control-token marking round-trips: each range unmarking finds holds a control token or a piece
//     of one (at a string's start or end).
// The first byte picks chat or completions (bit 0), or Anthropic's /v1/messages (bit 1): its body
// refused with a 4xx in Anthropic's error shape or answered as well-formed events and a JSON
// message, and the lenient escape pass changing nothing in valid JSON; bit 2 picks /v1/responses
// (a 4xx, or well-formed events and a JSON response object). The model is the embedded stories260K
// on the CPU.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "plugin/registry.hpp"
#include "serve/anthropic.hpp"
#include "serve/control_tokens.hpp"
#include "serve/openai.hpp"
#include "serve/responses.hpp"
#include "serve/served_model.hpp"
#include "source_paths.hpp"

extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_llama(uint32_t, uint32_t);

namespace {

using nlohmann::json;

kiln::serve::ServedModel& model() {
  static std::unique_ptr<kiln::serve::ServedModel> m = [] {
    static kiln::PluginRegistry registry;
    kiln::register_builtin_plugins(registry);
    if (!registry.find_model_type("llama")) registry.register_static(&kiln_plugin_descriptor_llama, "<static llama>");
    kiln::ModelConfig mc;
    mc.name = "m";
    mc.path = std::string(KILN_SOURCE_DIR) + "/configs/models/stories260K.gguf";
    mc.chat_template = std::string(KILN_SOURCE_DIR) + "/configs/templates/plain.jinja";
    mc.max_context = 256;
    mc.cache.memory_bytes = 1 << 20;
    kiln::BackendConfig bc;
    bc.kind = "cpu";
    return std::make_unique<kiln::serve::ServedModel>(mc, bc, registry);
  }();
  return *m;
}

void check(bool ok, const char* what, const std::string& detail = {}) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s %s\n", what, detail.substr(0, 400).c_str());
    std::abort();
  }
}

void check_sse(const std::string& sse) {
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    check(end != std::string::npos, "an SSE event ends with a blank line", sse);
    const std::string ev = sse.substr(pos, end - pos);
    check(ev.rfind("data: ", 0) == 0, "an SSE event is a data line", ev);
    if (ev != "data: [DONE]") check(json::accept(ev.substr(6)), "an SSE event is JSON", ev);
    pos = end + 2;
  }
}

void check_events(const std::string& sse) {
  size_t pos = 0;
  while (pos < sse.size()) {
    const size_t end = sse.find("\n\n", pos);
    check(end != std::string::npos, "an event ends with a blank line", sse);
    const std::string ev = sse.substr(pos, end - pos);
    const size_t nl = ev.find('\n');
    check(ev.rfind("event: ", 0) == 0 && nl != std::string::npos && ev.compare(nl + 1, 6, "data: ") == 0,
          "an event is an event line and a data line", ev);
    check(json::accept(ev.substr(nl + 7)), "an event's data is JSON", ev);
    pos = end + 2;
  }
}

/** A piece with every kind of delta, the body's own bytes as content (invalid UTF-8 included). */
kiln::serve::Piece pieces_of(const std::string& body) {
  using K = kiln::parse::Delta::Kind;
  kiln::serve::Piece p;
  p.deltas = {{K::reasoning, "r", 0, "", ""},
              {K::content, body, 0, "", ""},
              {K::call_start, "", 0, "call_1", "f"},
              {K::call_arguments, "{\"a\"", 0, "", ""},
              {K::call_arguments, ": 1}", 0, "", ""}};
  p.token_ids = {1, 2, 3};
  p.finish = kiln::serve::Finish::tool_calls;
  return p;
}

const auto lookup = [](const std::string& name, kiln::serve::ApiError* e) -> kiln::serve::ServedModel* {
  if (name.empty() || name == "m") return &model();
  *e = {404, "no such model", "model", "invalid_request_error", "model_not_found"};
  return nullptr;
};

/** A /v1/responses body: a 4xx or a request whose writers give JSON events and a JSON response. */
int responses(const std::string& body) {
  static kiln::serve::ResponseStore store(4, 1 << 16);
  kiln::serve::ApiError err;
  std::optional<kiln::serve::ResponsesRequest> req;
  try {
    req = kiln::serve::parse_responses(body, lookup, kiln::ServerConfig::Limits{}, store, "", &err);
  } catch (const std::exception& e) {
    check(false, "parse_responses threw", e.what());
  }
  if (!req) {
    check(err.status >= 400 && err.status < 500, "a refusal is a 4xx");
    check(json::accept(kiln::serve::error_json(err)), "the error envelope is JSON");
    return 0;
  }
  auto shared = std::make_shared<const kiln::serve::ResponsesRequest>(std::move(*req));
  const kiln::serve::Piece p = pieces_of(body);
  kiln::serve::ResponsesWriter w(shared, &store, "m");
  std::string events = w.stream_piece(p);
  events += w.stream_end(kiln::serve::Usage{3, 1, 0});
  check_events(events);
  kiln::serve::ResponsesWriter w2(shared, &store, "m");
  w2.absorb(p);
  check(json::accept(w2.final_body(kiln::serve::Usage{3, 1, 0})), "the response is JSON");
  return 0;
}

int messages(const std::string& body) {
  size_t fixed = 0;
  const std::string tolerant = kiln::serve::tolerate_invalid_escapes(body, &fixed);
  // (nlohmann's parser ends its input at a NUL byte: only NUL-free bodies are JSON as a whole.)
  if (body.find('\0') == std::string::npos && json::accept(body))
    check(fixed == 0 && tolerant == body, "valid JSON is left as it is");
  kiln::serve::ApiError err;
  std::optional<kiln::serve::ApiRequest> req;
  try {
    req = kiln::serve::parse_messages(body, lookup, kiln::ServerConfig::Limits{}, {}, &err);
  } catch (const std::exception& e) {
    check(false, "parse_messages threw", e.what());
  }
  if (!req) {
    check(err.status >= 400 && err.status < 500, "a refusal is a 4xx");
    check(json::accept(kiln::serve::anthropic_error_json(err)), "the error object is JSON");
    return 0;
  }
  kiln::serve::Piece p = pieces_of(body);
  kiln::serve::MessagesWriter w(*req, "m");
  std::string events = w.stream_piece(p);
  events += w.stream_end(kiln::serve::Usage{3, 1, 0});
  check_events(events);
  kiln::serve::MessagesWriter w2(*req, "m");
  w2.absorb(p);
  check(json::accept(w2.final_body(kiln::serve::Usage{3, 1, 0})), "the message is JSON");
  return 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  if (data[0] & 4) return responses(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  if (data[0] & 2) return messages(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
  const bool chat = data[0] & 1;
  const std::string body(reinterpret_cast<const char*>(data) + 1, size - 1);
  kiln::serve::ApiError err;
  kiln::ServerConfig::Limits limits;
  std::optional<kiln::serve::ApiRequest> req;
  try {
    req = kiln::serve::parse_request(body, chat, lookup, limits, &err);
  } catch (const std::exception& e) {
    check(false, "parse_request threw", e.what());
  }
  if (!req) {
    check(err.status >= 400 && err.status < 500, "a refusal is a 4xx");
    check(json::accept(kiln::serve::error_json(err)), "the error envelope is JSON");
    return 0;
  }
  // Pieces carrying the body's own bytes as text (invalid UTF-8 included) through the writer.
  kiln::serve::ResponseWriter w(*req, "m");
  std::string sse;
  kiln::serve::Piece p;
  p.choice = 0;
  if (chat) {
    // The body's bytes as content (the writer replaces invalid UTF-8 with U+FFFD).
    p.deltas.push_back({kiln::parse::Delta::Kind::content, std::string(body), 0, "", ""});
  } else {
    p.text = body;
  }
  p.finish = kiln::serve::Finish::stop;
  try {
    sse = w.stream_piece(p) + w.stream_end(kiln::serve::Usage{3, 1, 0});
    check_sse(sse);
    kiln::serve::ResponseWriter w2(*req, "m");
    w2.absorb(p);
    check(json::accept(w2.final_body(kiln::serve::Usage{3, 1, 0})), "the response body is JSON");
  } catch (const json::exception&) {
    // Invalid UTF-8 in completions text: nlohmann refuses to serialise it (the engine only ever
    // emits valid UTF-8, so this is the fuzzer's input, not a server path).
  }
  // Control-token marking on the chat the route built, printed as JSON by a template.
  if (!req->gen->chat_input) return 0;
  const std::vector<std::string> controls = {"<s>", "</s>", "<|im_start|>", "<|im_end|>"};
  try {
    static const kiln::ChatTemplate printer = kiln::ChatTemplate::from_config(
        "", "{{ messages|tojson }}{{ tools|tojson }}{% for m in messages %}{{ m.content }}{% endfor %}");
    std::string marked = printer.render(kiln::serve::mark_control_tokens(*req->gen->chat_input, controls));
    const auto ranges = kiln::serve::unmark_control_tokens(marked);
    // A range holds a control token, or the piece of one at a string's start or end.
    for (const auto& [b, e] : ranges) {
      const std::string t = marked.substr(b, e - b);
      check(std::any_of(controls.begin(), controls.end(),
                        [&](const std::string& c) { return c.find(t) != std::string::npos; }),
            "a range holds (part of) a control token", t);
    }
  } catch (const kiln::TemplateError&) {  // a body no template could print (too deep, ...)
  }
  return 0;
}
