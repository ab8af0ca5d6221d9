#include "serve/anthropic.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

#include "core/json_ordered.hpp"
#include "core/log.hpp"
#include "serve/served_model.hpp"
#include "text/utf8.hpp"

namespace kiln::serve {
namespace {

using json = OrderedJson;  // objects in the client's key order

/** A client's string field, "" when absent or not a string (json::value would throw a type_error). */
std::string str_of(const json& o, const char* key) {
  const auto it = o.find(key);
  return it != o.end() && it->is_string() ? it->get<std::string>() : std::string();
}

struct Refusal {
  ApiError e;
};

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw Refusal{{400, message, param, "invalid_request_error", ""}};
}

std::string type_for(int status) {
  switch (status) {
    case 400:
      return "invalid_request_error";
    case 401:
      return "authentication_error";
    case 403:
      return "permission_error";
    case 404:
      return "not_found_error";
    case 413:
      return "request_too_large";
    case 429:
      return "rate_limit_error";
    case 503:
      return "overloaded_error";
    case 504:
      return "timeout_error";
    default:
      return status >= 500 ? "api_error" : "invalid_request_error";
  }
}

std::string text_of_blocks(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) bad(where, fmt::format("'{}' must be a string or an array of content blocks", where));
  std::string out;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& b = content[j];
    const std::string p = fmt::format("{}[{}]", where, j);
    if (!b.is_object() || str_of(b, "type") != "text" || !b.contains("text") || !b["text"].is_string())
      bad(p, fmt::format("'{}' must be a text block {{\"type\": \"text\", \"text\": ...}}", p));
    if (!out.empty()) out += "\n";
    out += b["text"].get<std::string>();
  }
  return out;
}

/** The system prompt without the lines a configured pattern matches (see ModelConfig / docs). */
std::string strip_volatile(const std::string& text, const std::vector<std::regex>& patterns) {
  if (patterns.empty()) return text;
  std::string out;
  size_t at = 0;
  while (at <= text.size()) {
    size_t nl = text.find('\n', at);
    const bool last = nl == std::string::npos;
    const std::string line = text.substr(at, last ? std::string::npos : nl - at);
    bool drop = false;
    for (const std::regex& re : patterns) drop = drop || std::regex_search(line, re);
    if (!drop) out += line + (last ? "" : "\n");
    if (last) break;
    at = nl + 1;
  }
  return out;
}

/** One Anthropic message as OpenAI messages (tool results become tool messages before the text). */
void convert_message(const json& m, size_t i, json& out) {
  const std::string p = fmt::format("messages[{}]", i);
  if (!m.is_object()) bad(p, fmt::format("'{}' must be an object", p));
  const std::string role = str_of(m, "role");
  if (role != "user" && role != "assistant") bad(p + ".role", fmt::format("'{}.role' must be user or assistant", p));
  if (!m.contains("content")) bad(p + ".content", fmt::format("'{}.content' is required", p));
  const json& content = m["content"];
  if (content.is_string()) {
    out.push_back({{"role", role}, {"content", content}});
    return;
  }
  if (!content.is_array()) bad(p + ".content", fmt::format("'{}.content' must be a string or an array of blocks", p));
  std::string text, thinking;
  json calls = json::array(), results = json::array();
  for (size_t j = 0; j < content.size(); ++j) {
    const json& b = content[j];
    const std::string bp = fmt::format("{}.content[{}]", p, j);
    if (!b.is_object() || !b.contains("type") || !b["type"].is_string())
      bad(bp, fmt::format("'{}' must be a content block with a 'type'", bp));
    const std::string type = b["type"];
    if (type == "text") {
      if (!b.contains("text") || !b["text"].is_string())
        bad(bp + ".text", fmt::format("'{}.text' must be a string", bp));
      text += b["text"].get<std::string>();
    } else if (type == "image" || type == "document") {
      bad(bp, fmt::format("'{}' is a {} block; this server serves text models and accepts text only", bp, type));
    } else if (type == "thinking" && role == "assistant") {
      thinking += str_of(b, "thinking");
    } else if (type == "redacted_thinking") {
      bad(bp, fmt::format("'{}': redacted_thinking blocks cannot be replayed to this model", bp));
    } else if (type == "tool_use" && role == "assistant") {
      if (!b.contains("id") || !b["id"].is_string() || !b.contains("name") || !b["name"].is_string())
        bad(bp, fmt::format("'{}' needs a string 'id' and 'name'", bp));
      const json input = b.contains("input") ? b["input"] : json::object();
      if (!input.is_object()) bad(bp + ".input", fmt::format("'{}.input' must be an object", bp));
      calls.push_back(
          {{"id", b["id"]}, {"type", "function"}, {"function", {{"name", b["name"]}, {"arguments", input.dump()}}}});
    } else if (type == "tool_result" && role == "user") {
      if (!b.contains("tool_use_id") || !b["tool_use_id"].is_string())
        bad(bp + ".tool_use_id", fmt::format("'{}.tool_use_id' must be a string", bp));
      std::string r = b.contains("content") ? text_of_blocks(b["content"], bp + ".content") : "";
      if (const auto e = b.find("is_error"); e != b.end() && e->is_boolean() && e->get<bool>()) r = "Error: " + r;
      results.push_back({{"role", "tool"}, {"tool_call_id", b["tool_use_id"]}, {"content", r}});
    } else {
      bad(bp + ".type", fmt::format("'{}.type' {} is not supported in a {} message", bp, json(type).dump(), role));
    }
  }
  for (json& r : results) out.push_back(std::move(r));
  if (role == "assistant") {
    json a = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) a["reasoning_content"] = thinking;
    if (!calls.empty()) a["tool_calls"] = calls;
    out.push_back(std::move(a));
  } else if (!text.empty() || results.empty()) {
    out.push_back({{"role", "user"}, {"content", text}});
  }
}

/** The OpenAI chat body of an Anthropic /v1/messages body (what parse_request then checks). */
json to_openai(const json& a, const std::vector<std::regex>& volatile_lines, bool need_max_tokens) {
  if (!a.is_object()) bad("", "the request body must be a JSON object");
  json o = json::object();
  if (a.contains("model")) o["model"] = a["model"];
  if (need_max_tokens && !a.contains("max_tokens")) bad("max_tokens", "'max_tokens' is required");
  for (const char* k : {"max_tokens", "temperature", "top_p", "top_k", "stream"})
    if (a.contains(k)) o[k] = a[k];
  if (a.contains("stop_sequences")) {
    const json& st = a["stop_sequences"];
    if (!st.is_array() || !std::all_of(st.begin(), st.end(), [](const json& x) { return x.is_string(); }))
      bad("stop_sequences", "'stop_sequences' must be an array of strings");
    o["stop"] = st;
  }
  json messages = json::array();
  if (a.contains("system")) {
    const std::string system = strip_volatile(text_of_blocks(a["system"], "system"), volatile_lines);
    messages.push_back({{"role", "system"}, {"content", system}});
  }
  if (!a.contains("messages") || !a["messages"].is_array() || a["messages"].empty())
    bad("messages", "'messages' must be a non-empty array of messages");
  for (size_t i = 0; i < a["messages"].size(); ++i) convert_message(a["messages"][i], i, messages);
  o["messages"] = std::move(messages);
  if (a.contains("tools")) {
    if (!a["tools"].is_array()) bad("tools", "'tools' must be an array of tool definitions");
    json tools = json::array();
    for (size_t i = 0; i < a["tools"].size(); ++i) {
      const json& t = a["tools"][i];
      const std::string p = fmt::format("tools[{}]", i);
      if (!t.is_object() || !t.contains("name") || !t["name"].is_string())
        bad(p, fmt::format("'{}' must be an object with a 'name'", p));
      if (t.contains("type") && t["type"] != "custom")
        bad(p + ".type",
            fmt::format("'{}' is a server tool ({}); this server runs client tools only", p, t["type"].dump()));
      const json schema = t.contains("input_schema") ? t["input_schema"] : json{{"type", "object"}};
      if (!schema.is_object()) bad(p + ".input_schema", fmt::format("'{}.input_schema' must be an object", p));
      // OpenAI's shape, in the order vLLM's Anthropic route gives the template.
      json f = {{"name", t["name"]}};
      if (t.contains("description")) f["description"] = t["description"];
      f["parameters"] = schema;
      tools.push_back({{"type", "function"}, {"function", std::move(f)}});
    }
    o["tools"] = std::move(tools);
  }
  if (a.contains("tool_choice")) {
    const json& tc = a["tool_choice"];
    const std::string type = tc.is_object() ? str_of(tc, "type") : "";
    if (type == "auto")
      o["tool_choice"] = "auto";
    else if (type == "none")
      o["tool_choice"] = "none";
    else if (type == "any")
      o["tool_choice"] = "required";
    else if (type == "tool") {
      if (!tc.contains("name") || !tc["name"].is_string())
        bad("tool_choice.name", "tool_choice 'tool' needs the 'name' of the tool to call");
      o["tool_choice"] = {{"type", "function"}, {"function", {{"name", tc["name"]}}}};
    } else
      bad("tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
  }
  if (a.contains("tool_choice") && a["tool_choice"].is_object()) {
    const json& tc = a["tool_choice"];
    if (auto d = tc.find("disable_parallel_tool_use"); d != tc.end()) {
      if (!d->is_boolean())
        bad("tool_choice.disable_parallel_tool_use", "'disable_parallel_tool_use' must be true or false");
      o["parallel_tool_calls"] = !d->get<bool>();
    }
  }
  // Thinking is off unless the request enables it, as on Anthropic's API (a template's own default
  // may be on: Qwen3.5 thinks unless told not to).
  bool thinking = false;
  if (a.contains("thinking")) {
    const json& t = a["thinking"];
    const std::string type = t.is_object() ? str_of(t, "type") : "";
    if (type != "enabled" && type != "disabled")
      bad("thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
    thinking = type == "enabled";
  }
  if (thinking && o.contains("tool_choice") && o["tool_choice"] != "auto" && o["tool_choice"] != "none")
    bad("tool_choice",
        "Thinking may not be enabled when tool_choice forces tool use: use tool_choice "
        "{\"type\": \"auto\"} or disable thinking");
  o["chat_template_kwargs"] = {{"enable_thinking", thinking}};
  // A final assistant message is a prefill: the answer continues it rather than starting a turn.
  if (a["messages"].back().is_object() && str_of(a["messages"].back(), "role") == "assistant") {
    o["continue_final_message"] = true;
    o["add_generation_prompt"] = false;
  }
  return o;
}

/** The body as JSON; invalid string escapes (`\s` in a tool's regex) kept as written. */
json parse_lenient(std::string_view body) {
  if (json_depth(body) > kMaxJsonDepth)  // the OpenAI route's limit (deep bodies are refused before parsing)
    bad("", fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth));
  try {
    return parse_ordered_json(body);
  } catch (const json::exception&) {
  }
  size_t fixed = 0;
  const std::string tolerant = tolerate_invalid_escapes(body, &fixed);
  if (fixed) {
    try {
      json a = parse_ordered_json(tolerant);
      log::debug("[serve] /v1/messages: kept {} invalid JSON escape(s) literally", fixed);
      return a;
    } catch (const json::exception&) {
    }
  }
  bad("", "the request body is not valid JSON");
}

template <class Fn>
auto refused_to(ApiError* error, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Refusal& r) {
    *error = r.e;
    return std::nullopt;
  }
}

}  // namespace

std::string anthropic_error_json(const ApiError& e) {
  return json{{"type", "error"}, {"error", {{"type", type_for(e.status)}, {"message", e.message}}}}.dump(
      -1, ' ', false, json::error_handler_t::replace);
}

std::string tolerate_invalid_escapes(std::string_view body, size_t* fixed) {
  std::string out;
  out.reserve(body.size() + 16);
  bool in_string = false;
  *fixed = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (!in_string) {
      if (c == '"') in_string = true;
      out += c;
      continue;
    }
    if (c == '"') {
      in_string = false;
      out += c;
    } else if (c == '\\' && i + 1 < body.size()) {
      const char n = body[i + 1];
      if (std::string_view("\"\\/bfnrtu").find(n) == std::string_view::npos) {
        out += "\\\\";  // keep the backslash as a character, and the next one as itself
        ++*fixed;
      } else {
        out += c;
        out += n;
        ++i;
      }
    } else {
      out += c;
    }
  }
  return out;
}

std::string anthropic_chat_body(std::string_view body) {
  try {
    json o = to_openai(parse_lenient(body), {}, false);
    return o.dump();
  } catch (const Refusal& r) {
    throw std::invalid_argument(r.e.message);
  }
}

std::optional<ApiRequest> parse_messages(std::string_view body, const ModelLookup& lookup,
                                         const ServerConfig::Limits& limits,
                                         const std::vector<std::regex>& volatile_lines, ApiError* error) {
  return refused_to(error, [&]() -> std::optional<ApiRequest> {
    std::optional<ApiRequest> r =
        parse_request_body(to_openai(parse_lenient(body), volatile_lines, true), true, lookup, limits, error);
    if (!r && error->param == "stop") error->param = "stop_sequences";
    return r;
  });
}

std::optional<std::string> count_tokens(std::string_view body, const ModelLookup& lookup,
                                        const ServerConfig::Limits& limits,
                                        const std::vector<std::regex>& volatile_lines, ApiError* error) {
  return refused_to(error, [&]() -> std::optional<std::string> {
    json o = to_openai(parse_lenient(body), volatile_lines, false);
    o["max_tokens"] = 1;
    std::optional<ApiRequest> r = parse_request_body(std::move(o), true, lookup, limits, error);
    if (!r) return std::nullopt;
    std::vector<int32_t> ids;
    try {
      ids = r->model->encode_chat(*r->gen->chat_input);
    } catch (const std::exception& e) {
      bad("messages", e.what());
    }
    return json{{"input_tokens", ids.size()}}.dump();
  });
}

// ---- responses

struct MessagesWriter::State {
  const ApiRequest& req;
  std::string model, id;
  struct Block {
    std::string type;  ///< text, thinking, tool_use
    std::string text, id, name;
  };
  std::vector<Block> blocks;
  int open = -1;  ///< streaming: the block whose start went out and whose stop did not
  bool started = false;
  Finish finish = Finish::none;
  std::string stop_sequence, error;
  uint64_t prompt_tokens = 0;

  State(const ApiRequest& r, std::string m) : req(r), model(std::move(m)) {
    std::string gid = r.gen->id;
    const size_t dash = gid.find('-');
    id = "msg_" + (dash == std::string::npos ? gid : gid.substr(dash + 1));
  }

  static std::string event(const char* type, json data) {
    data["type"] = type;
    return fmt::format("event: {}\ndata: {}\n\n", type, data.dump(-1, ' ', false, json::error_handler_t::replace));
  }

  /** Folds one delta into the blocks; returns its stream events. */
  std::string on_delta(const parse::Delta& d) {
    using Kind = parse::Delta::Kind;
    std::string out;
    auto start = [&](Block b) {
      if (open >= 0) out += event("content_block_stop", {{"index", open}});
      blocks.push_back(std::move(b));
      open = static_cast<int>(blocks.size()) - 1;
      const Block& n = blocks.back();
      json cb = n.type == "tool_use"
                    ? json{{"type", "tool_use"}, {"id", n.id}, {"name", n.name}, {"input", json::object()}}
                : n.type == "thinking" ? json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}
                                       : json{{"type", "text"}, {"text", ""}};
      out += event("content_block_start", {{"index", open}, {"content_block", cb}});
    };
    switch (d.kind) {
      case Kind::content:
      case Kind::reasoning: {
        const bool thinking = d.kind == Kind::reasoning;
        const char* type = thinking ? "thinking" : "text";
        if (open < 0 || blocks[static_cast<size_t>(open)].type != type) start({type, "", "", ""});
        blocks[static_cast<size_t>(open)].text += d.text;
        out += event("content_block_delta", {{"index", open},
                                             {"delta", thinking ? json{{"type", "thinking_delta"}, {"thinking", d.text}}
                                                                : json{{"type", "text_delta"}, {"text", d.text}}}});
        break;
      }
      case Kind::call_start:
        start({"tool_use", "", d.id, d.name});
        break;
      case Kind::call_arguments:
        if (d.text.empty() || open < 0) break;
        blocks[static_cast<size_t>(open)].text += d.text;
        out += event("content_block_delta",
                     {{"index", open}, {"delta", {{"type", "input_json_delta"}, {"partial_json", d.text}}}});
        break;
    }
    return out;
  }

  std::string stop_reason() const {
    if (finish == Finish::length) return "max_tokens";
    if (finish == Finish::tool_calls) return "tool_use";
    return stop_sequence.empty() ? "end_turn" : "stop_sequence";
  }

  json usage(const Usage& u) const {
    return {{"input_tokens", u.prompt_tokens - u.cached_tokens},
            {"output_tokens", u.completion_tokens},
            {"cache_read_input_tokens", u.cached_tokens},
            {"cache_creation_input_tokens", 0}};
  }

  json content() const {
    json c = json::array();
    for (const Block& b : blocks) {
      if (b.type == "text") {
        c.push_back({{"type", "text"}, {"text", b.text}});
      } else if (b.type == "thinking") {
        c.push_back({{"type", "thinking"}, {"thinking", b.text}, {"signature", ""}});
      } else {
        // Arguments are model output: invalid UTF-8 reads as U+FFFD, as streamed.
        std::string args;
        kiln::text::utf8::append_lossy(args, b.text.empty() ? "{}" : b.text);
        json input = json::parse(args, nullptr, false);
        if (input.is_discarded() || !input.is_object()) input = json::object();
        c.push_back({{"type", "tool_use"}, {"id", b.id}, {"name", b.name}, {"input", input}});
      }
    }
    return c;
  }
};

MessagesWriter::MessagesWriter(const ApiRequest& req, std::string model_name)
    : st_(std::make_unique<State>(req, std::move(model_name))) {}
MessagesWriter::~MessagesWriter() = default;

std::string MessagesWriter::ping() {
  return State::event("ping", json::object());
}

void MessagesWriter::absorb(const Piece& p) {
  for (const parse::Delta& d : p.deltas) st_->on_delta(d);  // events unused
  if (p.finish != Finish::none) st_->finish = p.finish;
  if (!p.stop_sequence.empty()) st_->stop_sequence = p.stop_sequence;
  if (!p.error.empty()) st_->error = p.error;
}

std::string MessagesWriter::stream_piece(const Piece& p) {
  std::string out;
  if (!st_->started) {
    st_->started = true;
    {
      std::lock_guard lock(st_->req.gen->mu);
      st_->prompt_tokens = st_->req.gen->usage.prompt_tokens;
    }
    out += State::event("message_start", {{"message",
                                           {{"id", st_->id},
                                            {"type", "message"},
                                            {"role", "assistant"},
                                            {"model", st_->model},
                                            {"content", json::array()},
                                            {"stop_reason", nullptr},
                                            {"stop_sequence", nullptr},
                                            {"usage", {{"input_tokens", st_->prompt_tokens}, {"output_tokens", 0}}}}}});
    out += ping();
  }
  if (!p.error.empty()) {
    out += State::event("error", {{"error", {{"type", "api_error"}, {"message", p.error}}}});
    st_->error = p.error;
    return out;
  }
  for (const parse::Delta& d : p.deltas) out += st_->on_delta(d);
  if (p.finish != Finish::none) st_->finish = p.finish;
  if (!p.stop_sequence.empty()) st_->stop_sequence = p.stop_sequence;
  return out;
}

std::string MessagesWriter::stream_end(const Usage& u) {
  std::string out;
  if (!st_->started) out += stream_piece(Piece{});
  if (st_->open >= 0) out += State::event("content_block_stop", {{"index", st_->open}});
  st_->open = -1;
  if (!st_->error.empty()) return out;  // the error event ended it
  out += State::event("message_delta",
                      {{"delta",
                        {{"stop_reason", st_->stop_reason()},
                         {"stop_sequence", st_->stop_sequence.empty() ? json(nullptr) : json(st_->stop_sequence)}}},
                       {"usage", st_->usage(u)}});
  out += State::event("message_stop", json::object());
  return out;
}

std::string MessagesWriter::final_body(const Usage& u) const {
  return json{{"id", st_->id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", st_->model},
              {"content", st_->content()},
              {"stop_reason", st_->stop_reason()},
              {"stop_sequence", st_->stop_sequence.empty() ? json(nullptr) : json(st_->stop_sequence)},
              {"usage", st_->usage(u)}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace kiln::serve
