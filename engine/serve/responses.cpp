#include "serve/responses.hpp"

#include <fmt/format.h>

#include <chrono>
#include <random>

#include "core/json_ordered.hpp"
#include "serve/served_model.hpp"
#include "text/utf8.hpp"

namespace kiln::serve {

using json = OrderedJson;  // objects in the client's key order

struct ResponsesTurn {
  json echo;   ///< the request fields the response object repeats
  json input;  ///< this turn's chat messages (no instructions): what the store adds to the conversation
  json prior;  ///< the stored conversation previous_response_id continues (an array, maybe empty)
};

namespace {

struct Refusal {
  ApiError e;
};

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw Refusal{{400, message, param, "invalid_request_error", ""}};
}

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

const json* field(const json& o, const char* key) {
  const auto it = o.find(key);
  return it == o.end() || it->is_null() ? nullptr : &*it;
}

std::string string_at(const json& o, const char* key, const std::string& where, bool required = true) {
  const json* v = field(o, key);
  if (!v) {
    if (required) bad(where + "." + key, fmt::format("'{}.{}' is required", where, key));
    return {};
  }
  if (!v->is_string()) bad(where + "." + key, fmt::format("'{}.{}' must be a string", where, key));
  return v->get<std::string>();
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng(std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32));
  return fmt::format("{}_{:016x}{:016x}", prefix, rng(), rng());
}

/**
 * A message item's content as chat content: a string, or its input_text / output_text parts joined
 * by newlines (the parts are all text: images are refused). A string renders the same in every
 * template, while a list of parts prints as a Python list, or not at all, in templates that expect
 * strings (Qwen3's); vLLM joins text parts the same way for such templates.
 */
json chat_content(const json& content, const std::string& where) {
  if (content.is_string()) return content;
  if (!content.is_array()) bad(where, fmt::format("'{}' must be a string or an array of content parts", where));
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const json& p = content[j];
    const std::string pw = fmt::format("{}[{}]", where, j);
    if (!p.is_object()) bad(pw, fmt::format("'{}' must be a content part object", pw));
    const std::string type = string_at(p, "type", pw);
    if (j > 0) text += "\n";
    if (type == "input_text" || type == "output_text") {
      text += string_at(p, "text", pw);
    } else if (type == "refusal") {
      text += string_at(p, "refusal", pw);
    } else if (type == "input_image" || type == "input_file" || type == "input_audio") {
      bad(pw + ".type", fmt::format("'{}' is an {} part; this server accepts text only", pw, type));
    } else {
      bad(pw + ".type", fmt::format("'{}.type' {} is not a content part this server takes (input_text, "
                                    "output_text, refusal)",
                                    pw, json(type).dump()));
    }
  }
  return text;
}

/** The text of a reasoning item: its reasoning_text parts, else its summary. */
std::string reasoning_text(const json& item, const std::string& where) {
  std::string text;
  for (const char* key : {"content", "summary"}) {
    const json* parts = field(item, key);
    if (!parts) continue;
    if (!parts->is_array()) bad(where + "." + key, fmt::format("'{}.{}' must be an array", where, key));
    for (size_t j = 0; j < parts->size(); ++j) {
      const json& p = (*parts)[j];
      const std::string pw = fmt::format("{}.{}[{}]", where, key, j);
      if (!p.is_object()) bad(pw, fmt::format("'{}' must be an object", pw));
      text += string_at(p, "text", pw);
    }
    if (!text.empty()) break;
  }
  return text;
}

/** A function_call_output's output: a string, or the text of its input_text parts. */
std::string output_text_of(const json& out, const std::string& where) {
  if (out.is_string()) return out.get<std::string>();
  if (!out.is_array()) bad(where, fmt::format("'{}' must be a string or an array of input_text parts", where));
  std::string text;
  for (size_t j = 0; j < out.size(); ++j) {
    const std::string pw = fmt::format("{}[{}]", where, j);
    if (!out[j].is_object() || string_at(out[j], "type", pw) != "input_text")
      bad(pw, fmt::format("'{}' must be an input_text part (this server accepts text only)", pw));
    text += string_at(out[j], "text", pw);
  }
  return text;
}

/**
 * `input` as chat messages: messages keep their roles, consecutive function_call items become one
 * assistant message's tool calls (after that message's text, when an assistant message precedes
 * them), function_call_output items tool messages, and a reasoning item the next assistant
 * message's reasoning_content (how the templates replay reasoning).
 */
json chat_messages(const json& input) {
  json messages = json::array();
  if (input.is_string()) {
    messages.push_back({{"role", "user"}, {"content", input}});
    return messages;
  }
  if (!input.is_array()) bad("input", "'input' must be a string or an array of input items");
  constexpr size_t kNone = SIZE_MAX;
  size_t assistant = kNone;  // the assistant message function calls join
  std::string reasoning;     // for the next assistant message
  const auto take_reasoning = [&](json& m) {
    if (!reasoning.empty()) m["reasoning_content"] = std::move(reasoning);
    reasoning.clear();
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const json& item = input[i];
    const std::string w = fmt::format("input[{}]", i);
    if (!item.is_object()) bad(w, fmt::format("'{}' must be an input item object", w));
    std::string type = string_at(item, "type", w, false);
    if (type.empty() && field(item, "role")) type = "message";  // an easy input message
    if (type == "message") {
      const std::string role = string_at(item, "role", w);
      if (role != "user" && role != "assistant" && role != "system" && role != "developer")
        bad(w + ".role", fmt::format("'{}.role' must be user, assistant, system or developer", w));
      const json* content = field(item, "content");
      if (!content) bad(w + ".content", fmt::format("'{}.content' is required", w));
      json m = {{"role", role}, {"content", chat_content(*content, w + ".content")}};
      if (role == "assistant") {
        take_reasoning(m);
        assistant = messages.size();
      } else {
        assistant = kNone;
      }
      messages.push_back(std::move(m));
    } else if (type == "function_call") {
      json call = {
          {"id", string_at(item, "call_id", w)},
          {"type", "function"},
          {"function", {{"name", string_at(item, "name", w)}, {"arguments", string_at(item, "arguments", w)}}}};
      if (assistant == kNone) {
        json m = {{"role", "assistant"}, {"content", nullptr}};
        take_reasoning(m);
        assistant = messages.size();
        messages.push_back(std::move(m));
      }
      json& m = messages[assistant];
      if (!m.contains("tool_calls")) m["tool_calls"] = json::array();
      m["tool_calls"].push_back(std::move(call));
    } else if (type == "function_call_output") {
      const json* out = field(item, "output");
      if (!out) bad(w + ".output", fmt::format("'{}.output' is required", w));
      messages.push_back({{"role", "tool"},
                          {"tool_call_id", string_at(item, "call_id", w)},
                          {"content", output_text_of(*out, w + ".output")}});
      assistant = kNone;
    } else if (type == "reasoning") {
      reasoning += reasoning_text(item, w);
    } else if (type == "item_reference") {
      bad(w + ".type",
          fmt::format("'{}' is an item_reference; send the item itself, or continue with previous_response_id", w));
    } else {
      bad(w + ".type", fmt::format("'{}.type' {} is not supported (message, function_call, function_call_output, "
                                   "reasoning)",
                                   w, json(type).dump()));
    }
  }
  return messages;
}

/** Responses function tools as chat tools; other tool types are refused by name. */
json chat_tools(const json& tools) {
  if (!tools.is_array()) bad("tools", "'tools' must be an array of tools");
  json out = json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const json& t = tools[i];
    const std::string w = fmt::format("tools[{}]", i);
    if (!t.is_object()) bad(w, fmt::format("'{}' must be a tool object", w));
    const std::string type = string_at(t, "type", w);
    if (type != "function")
      bad(w + ".type",
          fmt::format("'{}.type' {} is not supported; this server runs function tools only", w, json(type).dump()));
    json f = {{"name", string_at(t, "name", w)}};
    if (const json* d = field(t, "description")) f["description"] = *d;
    if (const json* p = field(t, "parameters")) f["parameters"] = *p;
    if (const json* s = field(t, "strict")) f["strict"] = *s;
    out.push_back({{"type", "function"}, {"function", std::move(f)}});
  }
  return out;
}

json chat_tool_choice(const json& tc) {
  if (tc.is_string()) {
    const std::string c = tc.get<std::string>();
    if (c != "auto" && c != "none" && c != "required")
      bad("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
    return tc;
  }
  if (!tc.is_object() || string_at(tc, "type", "tool_choice", false) != "function")
    bad("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", \"name\": ...}");
  return {{"type", "function"}, {"function", {{"name", string_at(tc, "name", "tool_choice")}}}};
}

/** text.format as the chat route's response_format. */
json response_format(const json& text) {
  if (!text.is_object()) bad("text", "'text' must be an object");
  const json* f = field(text, "format");
  if (!f) return nullptr;
  if (!f->is_object()) bad("text.format", "'text.format' must be an object with a 'type'");
  const std::string type = string_at(*f, "type", "text.format");
  if (type == "text" || type == "json_object") return {{"type", type}};
  if (type != "json_schema") bad("text.format.type", "'text.format.type' must be text, json_object or json_schema");
  const json* schema = field(*f, "schema");
  if (!schema) bad("text.format.schema", "'text.format.schema' is required");
  json js = {{"name", f->value("name", "response")}, {"schema", *schema}};
  if (const json* s = field(*f, "strict")) js["strict"] = *s;
  return {{"type", "json_schema"}, {"json_schema", std::move(js)}};
}

/** The chat route's parameter names, as the Responses request spells them. */
std::string responses_param(const std::string& p) {
  const std::pair<const char*, const char*> kNames[] = {{"response_format.json_schema.schema", "text.format.schema"},
                                                        {"response_format.json_schema.strict", "text.format.strict"},
                                                        {"response_format", "text.format"},
                                                        {"max_tokens", "max_output_tokens"},
                                                        {"messages", "input"}};
  for (const auto& [chat, responses] : kNames)
    if (p.rfind(chat, 0) == 0) return responses + p.substr(std::string_view(chat).size());
  return p;
}

}  // namespace

// ---- the store

uint64_t ResponseStore::bytes_of(const std::string& id, const Entry& e) {
  return id.size() + e.owner.size() + e.response.size() + e.conversation.size() + 64;
}

void ResponseStore::put(const std::string& id, Entry e) {
  const uint64_t b = bytes_of(id, e);
  std::lock_guard lock(mu_);
  if (auto it = slots_.find(id); it != slots_.end()) {
    bytes_ -= bytes_of(id, it->second.e);
    lru_.erase(it->second.lru);
    slots_.erase(it);
  }
  if (b > max_bytes_ || max_count_ == 0) return;
  while (!lru_.empty() && (slots_.size() >= max_count_ || bytes_ + b > max_bytes_)) {
    const auto victim = slots_.find(lru_.back());
    bytes_ -= bytes_of(victim->first, victim->second.e);
    slots_.erase(victim);
    lru_.pop_back();
  }
  lru_.push_front(id);
  bytes_ += b;
  slots_.emplace(id, Slot{std::move(e), lru_.begin()});
}

std::optional<ResponseStore::Entry> ResponseStore::get(const std::string& id, const std::string& owner) {
  std::lock_guard lock(mu_);
  const auto it = slots_.find(id);
  if (it == slots_.end() || it->second.e.owner != owner) return std::nullopt;
  lru_.splice(lru_.begin(), lru_, it->second.lru);
  return it->second.e;
}

bool ResponseStore::erase(const std::string& id, const std::string& owner) {
  std::lock_guard lock(mu_);
  const auto it = slots_.find(id);
  if (it == slots_.end() || it->second.e.owner != owner) return false;
  bytes_ -= bytes_of(id, it->second.e);
  lru_.erase(it->second.lru);
  slots_.erase(it);
  return true;
}

size_t ResponseStore::size() const {
  std::lock_guard lock(mu_);
  return slots_.size();
}

// ---- requests

std::optional<ResponsesRequest> parse_responses(std::string_view text, const ModelLookup& lookup,
                                                const ServerConfig::Limits& limits, ResponseStore& store,
                                                const std::string& owner, ApiError* error) {
  try {
    if (json_depth(text) > kMaxJsonDepth)
      bad("", fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth));
    json body;
    try {
      body = parse_ordered_json(text);
    } catch (const json::exception& e) {
      bad("", fmt::format("the request body is not valid JSON: {}", e.what()));
    }
    if (!body.is_object()) bad("", "the request body must be a JSON object");
    for (const char* k : {"background", "conversation", "prompt", "max_tool_calls"})
      if (const json* v = field(body, k); v && !(v->is_boolean() && !v->get<bool>()))
        bad(k, fmt::format("'{}' is not supported by this server", k));
    if (const json* t = field(body, "truncation"); t && *t != "disabled")
      bad("truncation", "'truncation' must be \"disabled\" (this server never drops input to fit)");
    if (const json* t = field(body, "top_logprobs"); t && !(t->is_number_integer() && t->get<int64_t>() == 0))
      bad("top_logprobs", "'top_logprobs' is not supported on /v1/responses; use /v1/chat/completions");
    if (const json* m = field(body, "metadata"); m && (!m->is_object() || m->size() > 16))
      bad("metadata", "'metadata' must be an object of at most 16 string values");

    auto turn = std::make_shared<ResponsesTurn>();
    turn->prior = json::array();
    ResponsesRequest out;
    out.owner = owner;
    out.id = random_id("resp");
    if (const json* s = field(body, "store")) {
      if (!s->is_boolean()) bad("store", "'store' must be true or false");
      out.store = s->get<bool>();
    }
    std::string previous;
    if (const json* p = field(body, "previous_response_id")) {
      if (!p->is_string()) bad("previous_response_id", "'previous_response_id' must be a string");
      previous = p->get<std::string>();
      const std::optional<ResponseStore::Entry> e = store.get(previous, owner);
      if (!e) {
        *error = {404,
                  fmt::format("no stored response '{}' (it was not stored, was deleted, or was evicted)", previous),
                  "previous_response_id", "invalid_request_error", "previous_response_not_found"};
        return std::nullopt;
      }
      turn->prior = parse_ordered_json(e->conversation);
    }
    const json* input = field(body, "input");
    if (!input) bad("input", "'input' is required");
    turn->input = chat_messages(*input);

    // The chat request: instructions first (a previous response's are not carried over, as
    // OpenAI's), then the stored conversation, then this turn.
    json chat = json::object();
    if (const json* m = field(body, "model")) chat["model"] = *m;
    json messages = json::array();
    std::string instructions;
    if (const json* ins = field(body, "instructions")) {
      if (!ins->is_string()) bad("instructions", "'instructions' must be a string");
      instructions = ins->get<std::string>();
      messages.push_back({{"role", "system"}, {"content", instructions}});
    }
    for (const json& m : turn->prior) messages.push_back(m);
    for (const json& m : turn->input) messages.push_back(m);
    if (messages.empty()) bad("input", "'input' holds no messages");
    chat["messages"] = std::move(messages);
    for (const char* k : {"temperature", "top_p", "stop", "parallel_tool_calls", "user", "seed", "stream"})
      if (const json* v = field(body, k)) chat[k] = *v;
    if (const json* v = field(body, "max_output_tokens")) chat["max_tokens"] = *v;
    if (const json* t = field(body, "tools")) chat["tools"] = chat_tools(*t);
    if (const json* tc = field(body, "tool_choice")) chat["tool_choice"] = chat_tool_choice(*tc);
    json format = {{"type", "text"}};
    if (const json* t = field(body, "text")) {
      json rf = response_format(*t);
      if (!rf.is_null()) {
        chat["response_format"] = rf;
        format = t->at("format");
      }
    }
    json reasoning = {{"effort", nullptr}, {"summary", nullptr}};
    if (const json* r = field(body, "reasoning")) {
      if (!r->is_object()) bad("reasoning", "'reasoning' must be an object");
      if (const json* e = field(*r, "effort")) {
        const std::string effort = e->is_string() ? e->get<std::string>() : "";
        if (effort == "none" || effort == "minimal")
          chat["chat_template_kwargs"] = {{"enable_thinking", false}};
        else if (effort == "low" || effort == "medium" || effort == "high" || effort == "xhigh")
          chat["chat_template_kwargs"] = {{"enable_thinking", true}};
        else
          bad("reasoning.effort", "'reasoning.effort' must be none, minimal, low, medium, high or xhigh");
        reasoning["effort"] = *e;
      }
      if (const json* s = field(*r, "summary"))
        reasoning["summary"] = *s;  // accepted; the text is the reasoning itself
    }

    ApiError chat_error;
    std::optional<ApiRequest> api = parse_request_body(std::move(chat), true, lookup, limits, &chat_error);
    if (!api) {
      chat_error.param = responses_param(chat_error.param);
      *error = chat_error;
      return std::nullopt;
    }
    api->gen->id = out.id;
    api->gen->return_token_ids = true;  // reasoning tokens are counted from the pieces' ids
    turn->echo = {{"instructions", instructions.empty() ? json(nullptr) : json(instructions)},
                  {"max_output_tokens", body.value("max_output_tokens", json(nullptr))},
                  {"metadata", body.value("metadata", json::object())},
                  {"parallel_tool_calls", body.value("parallel_tool_calls", json(true))},
                  {"previous_response_id", previous.empty() ? json(nullptr) : json(previous)},
                  {"reasoning", reasoning},
                  {"store", out.store},
                  {"temperature", body.value("temperature", json(1.0))},
                  {"text", {{"format", format}}},
                  {"tool_choice", body.value("tool_choice", json("auto"))},
                  {"tools", body.value("tools", json::array())},
                  {"top_p", body.value("top_p", json(1.0))},
                  {"truncation", "disabled"},
                  {"user", body.value("user", json(nullptr))}};
    out.api = std::move(*api);
    out.turn = std::move(turn);
    return out;
  } catch (const Refusal& r) {
    *error = r.e;
    return std::nullopt;
  } catch (const json::exception& e) {  // a shape the checks above missed: still the client's 400
    *error = {400, fmt::format("the request does not have the expected shape: {}", e.what()), "",
              "invalid_request_error", ""};
    return std::nullopt;
  }
}

// ---- responses

struct ResponsesWriter::State {
  std::shared_ptr<const ResponsesRequest> owned;
  const ResponsesRequest& req;
  ResponseStore* store;
  std::string model;
  int64_t created;
  struct Item {
    enum class Kind { reasoning, message, call } kind;
    std::string id, text, call_id, name;  ///< text: reasoning, output text, or arguments
  };
  std::vector<Item> items;
  int open = -1;  ///< streaming: the item whose added event went out and whose done did not
  bool started = false, cancelled = false;
  Finish finish = Finish::none;
  std::string error;
  uint64_t sequence = 0, reasoning_tokens = 0;

  State(std::shared_ptr<const ResponsesRequest> r, ResponseStore* s, std::string m)
      : owned(std::move(r)),
        req(*owned),
        store(s),
        model(std::move(m)),
        created(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                    .count()) {}

  std::string event(const char* type, json data) {
    json e = {{"type", type}, {"sequence_number", sequence++}};
    for (auto& [k, v] : data.items()) e[k] = std::move(v);
    return fmt::format("event: {}\ndata: {}\n\n", type, dump(e));
  }

  /** Invalid UTF-8 in model output reads as U+FFFD, as every writer sends it. */
  static std::string text(const std::string& s) {
    std::string out;
    kiln::text::utf8::append_lossy(out, s);
    return out;
  }

  json item_json(const Item& it, bool done) const {
    const char* status = !done ? "in_progress" : finish == Finish::length || cancelled ? "incomplete" : "completed";
    switch (it.kind) {
      case Item::Kind::reasoning: {
        json r = {{"id", it.id}, {"type", "reasoning"}, {"summary", json::array()}};
        if (done) r["content"] = json::array({{{"type", "reasoning_text"}, {"text", text(it.text)}}});
        return r;
      }
      case Item::Kind::message: {
        json content = json::array();
        if (done) content.push_back(output_text(it.text));
        return {{"id", it.id}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", content}};
      }
      case Item::Kind::call:
        return {{"id", it.id},           {"type", "function_call"}, {"status", status},
                {"call_id", it.call_id}, {"name", it.name},         {"arguments", done ? text(it.text) : ""}};
    }
    return json::object();
  }

  static json output_text(const std::string& t) {
    return {{"type", "output_text"}, {"text", text(t)}, {"annotations", json::array()}, {"logprobs", json::array()}};
  }

  std::string status() const {
    if (!error.empty()) return "failed";
    if (cancelled) return "cancelled";
    return finish == Finish::length ? "incomplete" : "completed";
  }

  json response(const Usage* u, const std::string& st) const {
    json r = {{"id", req.id},        {"object", "response"}, {"created_at", created},        {"status", st},
              {"background", false}, {"error", nullptr},     {"incomplete_details", nullptr}};
    if (st == "failed") r["error"] = {{"code", "server_error"}, {"message", error}};
    if (st == "incomplete") r["incomplete_details"] = {{"reason", "max_output_tokens"}};
    const json& echo = req.turn->echo;
    r["instructions"] = echo["instructions"];
    r["max_output_tokens"] = echo["max_output_tokens"];
    r["max_tool_calls"] = nullptr;
    r["model"] = model;
    json output = json::array();
    if (st != "in_progress" && st != "queued")
      for (const Item& it : items) output.push_back(item_json(it, true));
    r["output"] = std::move(output);
    for (const char* k : {"parallel_tool_calls", "previous_response_id", "reasoning"}) r[k] = echo[k];
    r["service_tier"] = "default";
    for (const char* k : {"store", "temperature", "text", "tool_choice", "tools"}) r[k] = echo[k];
    r["top_logprobs"] = 0;
    r["top_p"] = echo["top_p"];
    r["truncation"] = echo["truncation"];
    r["usage"] = u ? json{{"input_tokens", u->prompt_tokens},
                          {"input_tokens_details", {{"cached_tokens", u->cached_tokens}}},
                          {"output_tokens", u->completion_tokens},
                          {"output_tokens_details", {{"reasoning_tokens", reasoning_tokens}}},
                          {"total_tokens", u->prompt_tokens + u->completion_tokens}}
                   : json(nullptr);
    r["user"] = echo["user"];
    r["metadata"] = echo["metadata"];
    return r;
  }

  /** The chat messages of this turn's output, for the store. */
  json output_messages() const {
    json m = {{"role", "assistant"}, {"content", nullptr}};
    std::string content, reasoning;
    json calls = json::array();
    for (const Item& it : items) {
      if (it.kind == Item::Kind::reasoning) reasoning += text(it.text);
      if (it.kind == Item::Kind::message) content += text(it.text);
      if (it.kind == Item::Kind::call)
        calls.push_back({{"id", it.call_id},
                         {"type", "function"},
                         {"function", {{"name", it.name}, {"arguments", text(it.text)}}}});
    }
    if (!content.empty() || calls.empty()) m["content"] = content;
    if (!reasoning.empty()) m["reasoning_content"] = reasoning;
    if (!calls.empty()) m["tool_calls"] = std::move(calls);
    return json::array({std::move(m)});
  }

  /** Stores the finished response (its JSON text) with the conversation so far. */
  void keep(const std::string& response) {
    if (!store || !req.store || !error.empty()) return;
    json conversation = req.turn->prior;
    for (const json& m : req.turn->input) conversation.push_back(m);
    for (json& m : output_messages()) conversation.push_back(std::move(m));
    store->put(req.id, {req.owner, response, dump(conversation)});
  }

  /** The open item's done events. */
  std::string close() {
    if (open < 0) return {};
    const Item& it = items[static_cast<size_t>(open)];
    const json idx = {{"item_id", it.id}, {"output_index", open}};
    std::string out;
    auto with = [&](json extra) {
      json e = idx;
      for (auto& [k, v] : extra.items()) e[k] = std::move(v);
      return e;
    };
    if (it.kind == Item::Kind::reasoning) {
      const json part = {{"type", "reasoning_text"}, {"text", text(it.text)}};
      out += event("response.reasoning_text.done", with({{"content_index", 0}, {"text", text(it.text)}}));
      out += event("response.content_part.done", with({{"content_index", 0}, {"part", part}}));
    } else if (it.kind == Item::Kind::message) {
      out += event("response.output_text.done",
                   with({{"content_index", 0}, {"text", text(it.text)}, {"logprobs", json::array()}}));
      out += event("response.content_part.done", with({{"content_index", 0}, {"part", output_text(it.text)}}));
    } else {
      out += event("response.function_call_arguments.done", with({{"name", it.name}, {"arguments", text(it.text)}}));
    }
    out += event("response.output_item.done", {{"output_index", open}, {"item", item_json(it, true)}});
    open = -1;
    return out;
  }

  /** Folds one delta into the items; returns its stream events. */
  std::string on_delta(const parse::Delta& d) {
    using K = parse::Delta::Kind;
    std::string out;
    const auto start = [&](Item it) {
      out += close();
      items.push_back(std::move(it));
      open = static_cast<int>(items.size()) - 1;
      const Item& n = items.back();
      out += event("response.output_item.added", {{"output_index", open}, {"item", item_json(n, false)}});
      if (n.kind == Item::Kind::reasoning)
        out += event("response.content_part.added", {{"item_id", n.id},
                                                     {"output_index", open},
                                                     {"content_index", 0},
                                                     {"part", {{"type", "reasoning_text"}, {"text", ""}}}});
      if (n.kind == Item::Kind::message)
        out += event("response.content_part.added",
                     {{"item_id", n.id}, {"output_index", open}, {"content_index", 0}, {"part", output_text("")}});
    };
    const auto current = [&](Item::Kind k) {
      return open >= 0 && items[static_cast<size_t>(open)].kind == k ? &items[static_cast<size_t>(open)] : nullptr;
    };
    switch (d.kind) {
      case K::reasoning:
      case K::content: {
        const bool r = d.kind == K::reasoning;
        const Item::Kind k = r ? Item::Kind::reasoning : Item::Kind::message;
        if (!current(k)) start({k, random_id(r ? "rs" : "msg"), "", "", ""});
        Item& it = items[static_cast<size_t>(open)];
        it.text += d.text;
        json e = {{"item_id", it.id}, {"output_index", open}, {"content_index", 0}, {"delta", text(d.text)}};
        if (!r) e["logprobs"] = json::array();
        out += event(r ? "response.reasoning_text.delta" : "response.output_text.delta", std::move(e));
        break;
      }
      case K::call_start:
        start({Item::Kind::call, random_id("fc"), "", d.id, d.name});
        break;
      case K::call_arguments: {
        Item* it = current(Item::Kind::call);
        if (!it || d.text.empty()) break;
        it->text += d.text;
        out += event("response.function_call_arguments.delta",
                     {{"item_id", it->id}, {"output_index", open}, {"delta", text(d.text)}});
        break;
      }
    }
    return out;
  }

  /** A piece's tokens count as reasoning when it ends in reasoning (or, with no deltas, its open item is). */
  void count(const Piece& p) {
    const bool reasoning = p.deltas.empty()
                               ? open >= 0 && items[static_cast<size_t>(open)].kind == Item::Kind::reasoning
                               : p.deltas.back().kind == parse::Delta::Kind::reasoning;
    if (reasoning) reasoning_tokens += p.token_ids.size();
  }

  std::string fold(const Piece& p) {
    std::string out;
    for (const parse::Delta& d : p.deltas) out += on_delta(d);
    count(p);
    if (p.finish != Finish::none) finish = p.finish;
    if (!p.error.empty()) error = p.error;
    return out;
  }
};

ResponsesWriter::ResponsesWriter(std::shared_ptr<const ResponsesRequest> req, ResponseStore* store,
                                 std::string model_name)
    : st_(std::make_unique<State>(std::move(req), store, std::move(model_name))) {}
ResponsesWriter::~ResponsesWriter() = default;

void ResponsesWriter::absorb(const Piece& p) {
  st_->fold(p);  // the events are not sent: only the items they build
}

void ResponsesWriter::cancel() {
  st_->cancelled = true;
}

std::string ResponsesWriter::stream_piece(const Piece& p) {
  std::string out;
  if (!st_->started) {
    st_->started = true;
    const json r = st_->response(nullptr, "in_progress");
    out += st_->event("response.created", {{"response", r}});
    out += st_->event("response.in_progress", {{"response", r}});
  }
  return out + st_->fold(p);
}

std::string ResponsesWriter::stream_end(const Usage& u) {
  std::string out;
  if (!st_->started) out += stream_piece(Piece{});
  out += st_->close();
  const std::string status = st_->status();
  const json r = st_->response(&u, status);
  const char* type = status == "failed"      ? "response.failed"
                     : status == "completed" ? "response.completed"
                                             : "response.incomplete";
  out += st_->event(type, {{"response", r}});
  st_->keep(dump(r));
  return out;
}

std::string ResponsesWriter::final_body(const Usage& u) {
  std::string body = dump(st_->response(&u, st_->status()));
  st_->keep(body);
  return body;
}

std::string cancelled_response_json(const std::string& id) {
  return dump({{"id", id}, {"object", "response"}, {"status", "cancelled"}});
}

}  // namespace kiln::serve
