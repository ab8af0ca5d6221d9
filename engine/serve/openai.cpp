#include "serve/openai.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

#include "core/json_ordered.hpp"
#include "serve/served_model.hpp"
#include "template/chat_input.hpp"

namespace kiln::serve {

using json = OrderedJson;  // objects in the client's key order

namespace {
/** JSON text of a response; any invalid UTF-8 (none should reach here) becomes U+FFFD, not an exception. */
std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}
}  // namespace

std::string error_json(const ApiError& e) {
  json j = {{"error",
             {{"message", e.message},
              {"type", e.type},
              {"param", e.param.empty() ? json(nullptr) : json(e.param)},
              {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
  // Messages may quote request bytes (a JSON parse error does): invalid UTF-8 becomes U+FFFD.
  return dump(j);
}

namespace {

/** Thrown while checking a body; becomes the 400 naming `param`. */
struct Bad {
  std::string param, message;
};

[[noreturn]] void bad(std::string param, std::string message) {
  throw Bad{std::move(param), std::move(message)};
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null:
      return "null";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::string:
      return "a string";
    case json::value_t::array:
      return "an array";
    case json::value_t::object:
      return "an object";
    default:
      return "a number";
  }
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<double> number(const json& body, const char* name, double lo, double hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) bad(name, fmt::format("'{}' must be a number, not {}", name, type_name(*v)));
  const double d = v->get<double>();
  if (!(d >= lo && d <= hi)) bad(name, fmt::format("'{}' must be in [{}, {}] (got {})", name, lo, hi, d));
  return d;
}

std::optional<int64_t> integer(const json& body, const char* name, int64_t lo, int64_t hi) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number_integer() && !(v->is_number_float() && std::floor(v->get<double>()) == v->get<double>()))
    bad(name, fmt::format("'{}' must be an integer, not {}", name, v->is_number() ? "a fraction" : type_name(*v)));
  const double d = v->get<double>();
  if (!(d >= static_cast<double>(lo) && d <= static_cast<double>(hi)))
    bad(name, fmt::format("'{}' must be in [{}, {}] (got {})", name, lo, hi, v->dump()));
  return v->is_number_unsigned() ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX))
                                 : v->get<int64_t>();
}

std::optional<bool> boolean(const json& body, const char* name) {
  const json* v = field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) bad(name, fmt::format("'{}' must be true or false, not {}", name, type_name(*v)));
  return v->get<bool>();
}

std::vector<int32_t> id_array(const json& a, const std::string& param) {
  std::vector<int32_t> ids;
  for (const json& x : a) {
    if (!x.is_number_integer() || x.get<int64_t>() < 0 || x.get<int64_t>() > INT32_MAX)
      bad(param, fmt::format("'{}' must hold non-negative integer token ids", param));
    ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
  }
  return ids;
}

void parse_sampling(const json& body, const ServedModel& m, GenRequest& r, bool chat) {
  sched::SamplingParams sp = m.default_sampling();
  if (auto t = number(body, "temperature", 0, 2)) sp.temperature = *t;
  if (auto v = number(body, "top_p", 0, 1)) {
    if (*v <= 0) bad("top_p", "'top_p' must be in (0, 1]");
    sp.top_p = *v;
  }
  if (auto v = integer(body, "top_k", -1, 1 << 30)) sp.top_k = *v < 0 ? 0 : static_cast<int>(*v);
  if (auto v = number(body, "min_p", 0, 1)) sp.min_p = *v;
  if (auto v = number(body, "presence_penalty", -2, 2)) sp.presence_penalty = *v;
  if (auto v = number(body, "frequency_penalty", -2, 2)) sp.frequency_penalty = *v;
  if (auto v = number(body, "repetition_penalty", 0, 10)) {
    if (*v <= 0) bad("repetition_penalty", "'repetition_penalty' must be > 0");
    sp.repetition_penalty = *v;
  }
  if (auto v = integer(body, "seed", INT64_MIN, INT64_MAX)) {
    sp.seed = static_cast<uint64_t>(*v);
  } else if (!m.config().sampling.seed) {
    sp.seed = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();  // a fresh seed per request
  }
  if (const json* lb = field(body, "logit_bias")) {
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object of token id → bias");
    for (const auto& [k, v] : lb->items()) {
      size_t used = 0;
      long id = -1;
      try {
        id = std::stol(k, &used);
      } catch (...) {
      }
      if (used != k.size() || id < 0 || static_cast<uint64_t>(id) >= m.n_vocab())
        bad("logit_bias", fmt::format("logit_bias key '{}' is not a token id in [0, {})", k, m.n_vocab()));
      if (!v.is_number() || v.get<double>() < -100 || v.get<double>() > 100)
        bad("logit_bias", fmt::format("logit_bias['{}'] must be a number in [-100, 100]", k));
      sp.logit_bias.push_back({static_cast<int32_t>(id), v.get<float>()});
    }
  }
  if (chat) {
    const bool lp = boolean(body, "logprobs").value_or(false);
    const auto top = integer(body, "top_logprobs", 0, 20);
    if (top && !lp) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    sp.top_logprobs = lp ? static_cast<int>(top.value_or(0)) : -1;
  } else {
    const json* v = field(body, "logprobs");
    if (v && v->is_boolean()) bad("logprobs", "'logprobs' of /v1/completions is an integer in [0, 20]");
    if (auto n = integer(body, "logprobs", 0, 20)) sp.top_logprobs = static_cast<int>(*n);
  }
  r.sampling = std::move(sp);
}

void parse_stop(const json& body, GenRequest& r, const ServerConfig::Limits& lim) {
  if (const json* s = field(body, "stop")) {
    if (s->is_string()) {
      r.stop.push_back(s->get<std::string>());
    } else if (s->is_array()) {
      if (s->size() > static_cast<size_t>(lim.max_stop))
        bad("stop", fmt::format("'stop' takes at most {} strings (server.limits.max_stop)", lim.max_stop));
      for (const json& x : *s) {
        if (!x.is_string()) bad("stop", "'stop' must be a string or an array of strings");
        r.stop.push_back(x.get<std::string>());
      }
    } else {
      bad("stop", fmt::format("'stop' must be a string or an array of strings, not {}", type_name(*s)));
    }
    std::erase(r.stop, std::string());
  }
  if (const json* s = field(body, "stop_token_ids")) {
    if (!s->is_array()) bad("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    if (s->size() > static_cast<size_t>(lim.max_stop))
      bad("stop_token_ids",
          fmt::format("'stop_token_ids' takes at most {} ids (server.limits.max_stop)", lim.max_stop));
    r.stop_ids = id_array(*s, "stop_token_ids");
  }
}

// ---- constrained decoding: which grammar the output follows (engine/serve/constraints.hpp)

void set_constraint(GenRequest& r, ConstraintSpec c) {
  if (!r.constraint.empty())
    bad(c.param, fmt::format("'{}' and '{}' both constrain the output; send one", r.constraint.param, c.param));
  r.constraint = std::move(c);
}

/** response_format: text, json_object, or json_schema {name, schema, strict}. */
void parse_response_format(const json& body, GenRequest& r) {
  const json* rf = field(body, "response_format");
  if (!rf) return;
  if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
    bad("response_format", "'response_format' must be an object with a 'type'");
  const std::string type = (*rf)["type"].get<std::string>();
  ConstraintSpec c;
  c.param = "response_format";
  if (type == "text") return;
  if (type == "json_object") {
    c.kind = ConstraintSpec::Kind::json_object;
  } else if (type == "json_schema") {
    auto js = rf->find("json_schema");
    if (js == rf->end() || !js->is_object())
      bad("response_format.json_schema", "'response_format.json_schema' must be an object with a 'schema'");
    auto schema = js->find("schema");
    if (schema == js->end() || !(schema->is_object() || schema->is_boolean()))
      bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
    if (auto st = js->find("strict"); st != js->end() && !st->is_null() && !st->is_boolean())
      bad("response_format.json_schema.strict", "'response_format.json_schema.strict' must be true or false");
    c.kind = ConstraintSpec::Kind::json_schema;
    c.param = "response_format.json_schema.schema";
    c.text = schema->dump();
    auto st = js->find("strict");
    c.strict = st != js->end() && st->is_boolean() && st->get<bool>();
  } else {
    bad("response_format.type",
        fmt::format("'response_format.type' must be text, json_object or json_schema (got '{}')", type));
  }
  set_constraint(r, std::move(c));
}

/** One grammar field's value as a constraint: `kind` says how `v` reads (param names it in 400s). */
ConstraintSpec grammar_field(const json& v, ConstraintSpec::Kind kind, const std::string& param) {
  ConstraintSpec c;
  c.kind = kind;
  c.param = param;
  if (kind == ConstraintSpec::Kind::json_schema) {
    // An object, or its JSON text (vLLM accepts both).
    json schema = v;
    if (v.is_string()) {
      try {
        schema = parse_ordered_json(v.get<std::string>());
      } catch (const json::exception&) {
        bad(param, fmt::format("'{}' must be a JSON Schema (an object, or its JSON text)", param));
      }
    }
    if (!schema.is_object() && !schema.is_boolean())
      bad(param, fmt::format("'{}' must be a JSON Schema (an object, or its JSON text)", param));
    c.text = v.is_string() ? v.get<std::string>() : schema.dump();  // text: the client's key order
    c.strict = false;                                               // plain JSON Schema semantics
  } else if (kind == ConstraintSpec::Kind::choice) {
    if (!v.is_array() || v.empty())
      bad(param, fmt::format("'{}' must be a non-empty array of strings (the output is one of them)", param));
    for (const json& x : v) {
      if (!x.is_string()) bad(param, fmt::format("'{}' must be a non-empty array of strings", param));
      c.choices.push_back(x.get<std::string>());
    }
  } else {
    if (!v.is_string() || v.get_ref<const std::string&>().empty())
      bad(param, fmt::format("'{}' must be a non-empty string", param));
    c.text = v.get<std::string>();
  }
  return c;
}

/**
 * The grammar fields beside response_format, on both routes: kiln's and vLLM's guided_* names, and
 * vLLM's structured_outputs object. A field of that family kiln does not implement is refused by
 * name rather than dropped (the client would get unconstrained output it did not ask for).
 */
void parse_grammar_fields(const json& body, GenRequest& r, std::optional<bool>* compact) {
  using Kind = ConstraintSpec::Kind;
  const struct {
    const char* name;
    Kind kind;
  } kFields[] = {{"grammar", Kind::ebnf},        {"guided_grammar", Kind::ebnf},     {"regex", Kind::regex},
                 {"guided_regex", Kind::regex},  {"json_schema", Kind::json_schema}, {"guided_json", Kind::json_schema},
                 {"guided_choice", Kind::choice}};
  for (const auto& f : kFields)
    if (const json* v = field(body, f.name)) set_constraint(r, grammar_field(*v, f.kind, f.name));
  for (const char* name : {"guided_whitespace_pattern", "structural_tag", "guided_json_object"})
    if (field(body, name))
      bad(name, fmt::format("'{}' is not supported; see docs/structured-outputs.md for the grammar fields kiln "
                            "takes (json_whitespace sets JSON whitespace)",
                            name));
  if (const json* so = field(body, "structured_outputs")) {
    if (!so->is_object()) bad("structured_outputs", "'structured_outputs' must be an object");
    const struct {
      const char* name;
      Kind kind;
    } kKeys[] = {
        {"json", Kind::json_schema}, {"regex", Kind::regex}, {"grammar", Kind::ebnf}, {"choice", Kind::choice}};
    bool closed = false;
    for (const auto& [key, v] : so->items()) {
      const std::string param = "structured_outputs." + key;
      if (v.is_null()) continue;
      bool known = false;
      for (const auto& k : kKeys)
        if (key == k.name) {
          set_constraint(r, grammar_field(v, k.kind, param));
          known = true;
        }
      if (known) continue;
      if (key == "json_object") {
        if (!v.is_boolean()) bad(param, fmt::format("'{}' must be true or false", param));
        if (v.get<bool>()) {
          ConstraintSpec c;
          c.kind = Kind::json_object;
          c.param = param;
          set_constraint(r, std::move(c));
        }
      } else if (key == "disable_any_whitespace") {
        if (!v.is_boolean()) bad(param, fmt::format("'{}' must be true or false", param));
        *compact = v.get<bool>();
      } else if (key == "disable_additional_properties") {  // objects closed unless the schema opens them
        if (!v.is_boolean()) bad(param, fmt::format("'{}' must be true or false", param));
        closed = v.get<bool>();
      } else if (key != "backend" && key != "disable_fallback") {  // those two name an implementation
        bad(param, fmt::format("'{}' is not supported (kiln takes json, regex, grammar, choice, json_object, "
                               "disable_any_whitespace and disable_additional_properties)",
                               param));
      }
    }
    if (r.constraint.param == "structured_outputs.json") r.constraint.strict = closed;
  }
}

/** tool_choice: auto, none, required or a named function; strict tools under auto. */
void parse_tool_choice(json& body, const json* tools, GenRequest& r) {
  std::optional<bool> parallel = boolean(body, "parallel_tool_calls");
  const auto spec_of = [](const json& t) {
    const json& f = t["function"];
    grammar::ToolSpec s;
    s.name = f["name"].get<std::string>();
    if (auto p = f.find("parameters"); p != f.end() && !p->is_null()) s.parameters = p->dump();
    return s;
  };
  const json* tc = field(body, "tool_choice");
  const std::string choice = !tc ? "auto" : tc->is_string() ? tc->get<std::string>() : "";
  if (tc && !tc->is_string() && !tc->is_object())
    bad("tool_choice", "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", ...}");
  if (choice == "none") {
    r.parse_tools = false;
    body.erase("tools");  // the model is not told about tools it may not call
    return;
  }
  ConstraintSpec c;
  c.kind = ConstraintSpec::Kind::tools;
  c.param = "tool_choice";
  c.parallel = parallel.value_or(true);
  if (choice == "auto") {
    // Strict tools: the model chooses between text and calls, and a call follows its schema.
    bool strict = false;
    for (size_t i = 0; tools && i < tools->size(); ++i)
      if (auto st = (*tools)[i]["function"].find("strict"); st != (*tools)[i]["function"].end() && st->is_boolean())
        strict = strict || st->get<bool>();
    if (!strict) return;
    for (const json& t : *tools) c.tools.push_back(spec_of(t));
    c.calls_optional = true;
    c.param = "tools";
    return set_constraint(r, std::move(c));
  }
  if (!tools || tools->empty()) bad("tool_choice", "tool_choice 'required' or a named function needs 'tools'");
  if (choice == "required") {
    for (const json& t : *tools) c.tools.push_back(spec_of(t));
    return set_constraint(r, std::move(c));
  }
  if (!tc->is_object() || !tc->contains("type") || (*tc)["type"] != "function" || !tc->contains("function") ||
      !(*tc)["function"].is_object() || !(*tc)["function"].contains("name") || !(*tc)["function"]["name"].is_string())
    bad("tool_choice",
        "'tool_choice' must be 'auto', 'none', 'required' or {\"type\": \"function\", \"function\": "
        "{\"name\": ...}}");
  const std::string name = (*tc)["function"]["name"].get<std::string>();
  for (const json& t : *tools)
    if (t["function"]["name"] == name) c.tools.push_back(spec_of(t));
  if (c.tools.empty())
    bad("tool_choice.function.name", fmt::format("tool_choice names '{}', which is not one of 'tools'", name));
  c.tools.resize(1);
  c.parallel = false;  // a named function: one call of it
  set_constraint(r, std::move(c));
}

void parse_chat(json& body, GenRequest& r, const ServerConfig::Limits& lim) {
  const json* msgs = field(body, "messages");
  if (!msgs) bad("messages", "'messages' is required");
  if (!msgs->is_array() || msgs->empty()) bad("messages", "'messages' must be a non-empty array of messages");
  if (msgs->size() > static_cast<size_t>(lim.max_messages))
    bad("messages", fmt::format("'messages' holds {} messages; the limit is {} (server.limits.max_messages)",
                                msgs->size(), lim.max_messages));
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string p = fmt::format("messages[{}]", i);
    if (!m.is_object()) bad(p, fmt::format("'{}' must be an object", p));
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad(p + ".role", fmt::format("'{}.role' must be a string", p));
    const std::string ro = role->get<std::string>();
    if (ro != "system" && ro != "developer" && ro != "user" && ro != "assistant" && ro != "tool")
      bad(p + ".role", fmt::format("'{}.role' must be system, developer, user, assistant or tool (got '{}')", p, ro));
    auto content = m.find("content");
    if (content != m.end() && !content->is_null() && !content->is_string() && !content->is_array())
      bad(p + ".content", fmt::format("'{}.content' must be a string or an array of parts", p));
  }
  parse_response_format(body, r);
  const json* tools = field(body, "tools");
  if (tools && !tools->is_array()) bad("tools", "'tools' must be an array of tool definitions");
  if (tools && tools->size() > static_cast<size_t>(lim.max_tools))
    bad("tools",
        fmt::format("'tools' holds {} tools; the limit is {} (server.limits.max_tools)", tools->size(), lim.max_tools));
  if (tools) {
    const size_t bytes = tools->dump().size();
    if (bytes > lim.max_tools_bytes)
      bad("tools", fmt::format("'tools' is {} bytes as JSON; the limit is {} (server.limits.max_tools_bytes)", bytes,
                               lim.max_tools_bytes));
  }
  if (tools)
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      if (!t.is_object() || !t.contains("type") || t["type"] != "function" || !t.contains("function") ||
          !t["function"].is_object() || !t["function"].contains("name") || !t["function"]["name"].is_string())
        bad(fmt::format("tools[{}]", i), fmt::format("'tools[{}]' must be {{\"type\": \"function\", \"function\": "
                                                     "{{\"name\": ..., \"parameters\": ...}}}}",
                                                     i));
    }
  parse_tool_choice(body, tools, r);
  if (const json* kw = field(body, "chat_template_kwargs")) {
    if (!kw->is_object()) bad("chat_template_kwargs", "'chat_template_kwargs' must be an object");
    if (auto it = kw->find("enable_thinking"); it != kw->end() && it->is_boolean())
      r.parser.thinking = it->get<bool>() ? 1 : 0;
  }
  if (tools && r.parse_tools) r.parser.tools_json = tools->dump();
  // The template sees the body as sent (messages, tools, chat_template_kwargs, ...).
  // add_generation_prompt defaults to true even when continuing the final message (as vLLM's).
  const bool cont = boolean(body, "continue_final_message").value_or(false);
  const std::optional<bool> agp = boolean(body, "add_generation_prompt");
  if (cont && agp.value_or(true))
    bad("continue_final_message", "'continue_final_message' needs 'add_generation_prompt': false");
  if (!agp) body["add_generation_prompt"] = true;
  try {
    r.chat_input = std::make_shared<const ChatInput>(ChatInput::from_body(body));
  } catch (const TemplateError& e) {
    bad("messages", e.message());
  }
}

void parse_prompt(const json& body, GenRequest& r) {
  const json* p = field(body, "prompt");
  if (!p) bad("prompt", "'prompt' is required");
  const char* shape =
      "'prompt' must be a string, an array of strings, an array of token ids or an array of arrays "
      "of token ids";
  if (p->is_string()) {
    r.prompt_texts.push_back(p->get<std::string>());
  } else if (p->is_array() && !p->empty()) {
    if ((*p)[0].is_string()) {
      for (const json& x : *p) {
        if (!x.is_string()) bad("prompt", shape);
        r.prompt_texts.push_back(x.get<std::string>());
      }
    } else if ((*p)[0].is_number()) {
      r.prompt_ids.push_back(id_array(*p, "prompt"));
    } else if ((*p)[0].is_array()) {
      for (const json& x : *p) {
        if (!x.is_array() || x.empty()) bad("prompt", shape);
        r.prompt_ids.push_back(id_array(x, "prompt"));
      }
    } else {
      bad("prompt", shape);
    }
  } else {
    bad("prompt", shape);
  }
  if (r.prompt_texts.size() + r.prompt_ids.size() > 64) bad("prompt", "at most 64 prompts per request");
  if (boolean(body, "echo").value_or(false)) bad("echo", "'echo' is not supported; leave it out or false");
  if (field(body, "suffix")) bad("suffix", "'suffix' is not supported");
  if (auto b = integer(body, "best_of", 1, 1); !b && field(body, "best_of"))
    bad("best_of", "'best_of' other than 1 is not supported");
  parse_response_format(body, r);
}

}  // namespace

size_t json_depth(std::string_view text) {
  size_t depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
    } else if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return deepest;
}

std::optional<ApiRequest> parse_request(std::string_view text, bool chat, const ModelLookup& lookup,
                                        const ServerConfig::Limits& limits, ApiError* error) {
  json body;
  if (json_depth(text) > kMaxJsonDepth) {
    *error = {400, fmt::format("the request body nests deeper than {} levels", kMaxJsonDepth), "",
              "invalid_request_error", ""};
    return std::nullopt;
  }
  try {
    body = parse_ordered_json(text);
  } catch (const json::exception& e) {  // syntax, or a number out of range
    *error = {400, fmt::format("the request body is not valid JSON: {}", e.what()), "", "invalid_request_error", ""};
    return std::nullopt;
  }
  return parse_request_body(std::move(body), chat, lookup, limits, error);
}

std::optional<ApiRequest> parse_request_body(json body, bool chat, const ModelLookup& lookup,
                                             const ServerConfig::Limits& limits, ApiError* error) {
  if (!body.is_object()) {
    *error = {400, "the request body must be a JSON object", "", "invalid_request_error", ""};
    return std::nullopt;
  }
  try {
    std::string name;
    if (const json* m = field(body, "model")) {
      if (!m->is_string()) bad("model", "'model' must be a string");
      name = m->get<std::string>();
    }
    ApiRequest out;
    out.model = lookup(name, error);
    if (!out.model) return std::nullopt;
    out.chat = chat;
    auto r = std::make_shared<GenRequest>();
    r->chat = chat;
    std::random_device rd;
    r->id = fmt::format("{}-{:016x}{:08x}", chat ? "chatcmpl" : "cmpl", (uint64_t{rd()} << 32) | rd(), rd());
    out.stream = boolean(body, "stream").value_or(false);
    if (const json* so = field(body, "stream_options")) {
      if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
      if (!out.stream) bad("stream_options", "'stream_options' is only allowed with 'stream': true");
      out.include_usage = boolean(*so, "include_usage").value_or(false);
    }
    if (auto n = integer(body, "n", 1, limits.max_n)) r->n = static_cast<uint32_t>(*n);
    const int64_t most = limits.max_tokens > 0 ? limits.max_tokens : INT32_MAX;
    auto mt = integer(body, "max_tokens", 1, most);
    if (auto mct = integer(body, "max_completion_tokens", 1, most)) mt = mct;
    if (mt) r->max_tokens = static_cast<uint32_t>(*mt);
    r->max_prompt_tokens = static_cast<uint32_t>(limits.max_prompt_tokens);
    r->max_output_tokens = static_cast<uint32_t>(limits.max_tokens);
    if (const json* u = field(body, "user"); u && !u->is_string()) bad("user", "'user' must be a string");
    if (const json* salt = field(body, "cache_salt")) {
      if (!salt->is_string() || salt->get_ref<const std::string&>().empty())
        bad("cache_salt", "'cache_salt' must be a non-empty string");
      r->cache_salt = salt->get<std::string>();
    }
    r->ignore_eos = boolean(body, "ignore_eos").value_or(false);
    r->skip_special = boolean(body, "skip_special_tokens").value_or(true);
    r->return_token_ids = boolean(body, "return_token_ids").value_or(false);
    parse_sampling(body, *out.model, *r, chat);
    parse_stop(body, *r, limits);
    if (chat)
      parse_chat(body, *r, limits);
    else
      parse_prompt(body, *r);
    std::optional<bool> compact;
    parse_grammar_fields(body, *r, &compact);
    if (const json* w = field(body, "json_whitespace")) {
      if (!w->is_string() || (*w != "compact" && *w != "flexible"))
        bad("json_whitespace", "'json_whitespace' must be \"compact\" or \"flexible\"");
      if (compact && *compact != (*w == "compact"))
        bad("json_whitespace", "'json_whitespace' and 'structured_outputs.disable_any_whitespace' disagree");
      compact = *w == "compact";
    }
    r->constraint.flexible_whitespace = !compact.value_or(out.model->config().json_whitespace == "compact");
    out.gen = std::move(r);
    return out;
  } catch (const Bad& b) {
    *error = {400, b.message, b.param, "invalid_request_error", ""};
    return std::nullopt;
  } catch (const json::exception& e) {  // a shape the checks above missed: still the client's 400
    *error = {400, fmt::format("the request does not have the expected shape: {}", e.what()), "",
              "invalid_request_error", ""};
    return std::nullopt;
  }
}

// ---- responses

ResponseWriter::ResponseWriter(const ApiRequest& req, std::string model_name)
    : req_(req),
      model_(std::move(model_name)),
      id_(req.gen->id),
      created_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {}

namespace {

/** OpenAI's logprobs object of a chat choice or a completion choice (text_offset: where `lps` start in its text). */
json logprobs_object(const ApiRequest& req, const std::vector<sched::Sampled>& lps, size_t text_offset) {
  const text::Tokenizer* tok = req.model->tokenizer();
  // A token's text as it reads inside a text: decoded twice in a row minus decoded once, so that
  // decoders that strip a leading space at the start of a text (SentencePiece) keep it here.
  const auto piece = [&](int32_t id) {
    if (!tok) return std::to_string(id);
    const int32_t two[2] = {id, id};
    const std::string one = tok->decode(std::span<const int32_t>(two, 1));
    const std::string both = tok->decode(std::span<const int32_t>(two, 2));
    return both.size() > one.size() && both.compare(0, one.size(), one) == 0 ? both.substr(one.size()) : one;
  };
  const auto bytes = [](const std::string& s) {
    json b = json::array();
    for (unsigned char ch : s) b.push_back(ch);
    return b;
  };
  const auto finite = [](float v) { return std::isfinite(v) ? json(v) : json(-9999.0); };
  if (req.chat) {
    json content = json::array();
    for (const sched::Sampled& s : lps) {
      const std::string t = piece(s.token);
      json top = json::array();
      for (const sched::TokenLogprob& a : s.top) {
        const std::string at = piece(a.token);
        top.push_back({{"token", at}, {"logprob", finite(a.logprob)}, {"bytes", bytes(at)}});
      }
      content.push_back({{"token", t}, {"logprob", finite(s.logprob)}, {"bytes", bytes(t)}, {"top_logprobs", top}});
    }
    return json{{"content", content}, {"refusal", nullptr}};
  }
  json tokens = json::array(), lp = json::array(), top = json::array(), offs = json::array();
  for (const sched::Sampled& s : lps) {
    const std::string t = piece(s.token);
    tokens.push_back(t);
    lp.push_back(finite(s.logprob));
    json alt = json::object();
    for (const sched::TokenLogprob& a : s.top) alt[piece(a.token)] = finite(a.logprob);
    top.push_back(alt);
    offs.push_back(text_offset);
    text_offset += t.size();
  }
  return json{{"tokens", tokens}, {"token_logprobs", lp}, {"top_logprobs", top}, {"text_offset", offs}};
}

/** A delta as OpenAI's `choices[].delta` object (parse::delta_json writes the same as text). */
json delta_object(const parse::Delta& d) {
  using Kind = parse::Delta::Kind;
  switch (d.kind) {
    case Kind::content:
      return {{"content", d.text}};
    case Kind::reasoning:
      return {{"reasoning_content", d.text}};
    case Kind::call_start:
      return {{"tool_calls", json::array({{{"index", d.call},
                                           {"id", d.id},
                                           {"type", "function"},
                                           {"function", {{"name", d.name}, {"arguments", ""}}}}})}};
    case Kind::call_arguments:
      return {{"tool_calls", json::array({{{"index", d.call}, {"function", {{"arguments", d.text}}}}})}};
  }
  return json::object();
}

}  // namespace

std::string ResponseWriter::chunk(uint32_t index, const ChunkBody& body, const std::vector<sched::Sampled>& lps,
                                  Finish finish, size_t text_offset, const std::vector<int32_t>* ids) {
  json c = {{"index", index}};
  if (!req_.chat)
    c["text"] = body.text;
  else if (body.role)
    c["delta"] = {{"role", "assistant"}, {"content", ""}};
  else
    c["delta"] = body.delta ? delta_object(*body.delta) : json::object();
  c["logprobs"] = lps.empty() ? json(nullptr) : logprobs_object(req_, lps, text_offset);
  c["finish_reason"] = finish != Finish::none ? json(finish_reason(finish)) : json(nullptr);
  // return_token_ids, as vLLM streams them: the prompt's ids once (chat: on the response, at its
  // first chunk; completions: on each choice's first chunk), each chunk's own tokens on its choice.
  bool chat_prompt_ids = false;
  if (req_.gen->return_token_ids) {
    if (!req_.chat && !choices_[index].prompt_ids_sent) c["prompt_token_ids"] = prompt_ids_of(index);
    choices_[index].prompt_ids_sent = true;
    c["token_ids"] = ids ? json(*ids) : json::array();
    chat_prompt_ids = req_.chat && !chat_prompt_ids_sent_;  // whichever choice's chunk goes out first
    chat_prompt_ids_sent_ = true;
  }
  json j = {{"id", id_},
            {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"system_fingerprint", nullptr},  // OpenAI sends the field; clients read it
            {"choices", json::array({c})}};
  if (chat_prompt_ids) j["prompt_token_ids"] = prompt_ids_of(index);
  return "data: " + dump(j) + "\n\n";
}

const std::vector<int32_t>& ResponseWriter::prompt_ids_of(uint32_t choice) const {
  static const std::vector<int32_t> kNone;
  const auto& all = req_.gen->prompt_token_ids;  // written before the request was prepared
  const size_t prompt = choice / std::max<uint32_t>(req_.gen->n, 1);
  return prompt < all.size() ? all[prompt] : kNone;
}

std::string ResponseWriter::stream_piece(const Piece& p) {
  if (choices_.size() <= p.choice) choices_.resize(p.choice + 1);
  ChoiceOut& co = choices_[p.choice];
  std::string out;
  if (!p.error.empty()) {
    ApiError e{500, p.error, "", "server_error", ""};
    return "data: " + error_json(e) + "\n\n";
  }
  if (req_.chat) {
    if (!co.role_sent) {
      out += chunk(p.choice, {nullptr, true, {}}, {}, Finish::none);
      co.role_sent = true;
    }
    for (size_t i = 0; i < p.deltas.size(); ++i)
      out += chunk(p.choice, {&p.deltas[i], false, {}}, i == 0 ? p.logprobs : std::vector<sched::Sampled>{},
                   Finish::none, 0, i == 0 ? &p.token_ids : nullptr);
    if (p.deltas.empty() && (!p.logprobs.empty() || !p.token_ids.empty()))
      out += chunk(p.choice, {}, p.logprobs, Finish::none, 0, &p.token_ids);
    if (p.finish != Finish::none) out += chunk(p.choice, {}, {}, p.finish);
  } else {
    if (!p.text.empty() || !p.logprobs.empty() || !p.token_ids.empty())
      out += chunk(p.choice, {nullptr, false, p.text}, p.logprobs, Finish::none, co.text.size(), &p.token_ids);
    co.text += p.text;  // completions' text_offset counts from the start of the choice's text
    if (p.finish != Finish::none) out += chunk(p.choice, {}, {}, p.finish);
  }
  return out;
}

std::string ResponseWriter::stream_end(const Usage& u) {
  std::string out;
  if (req_.include_usage) {
    json j = {{"id", id_},
              {"object", req_.chat ? "chat.completion.chunk" : "text_completion"},
              {"created", created_},
              {"model", model_},
              {"system_fingerprint", nullptr},
              {"choices", json::array()},
              {"usage",
               {{"prompt_tokens", u.prompt_tokens},
                {"completion_tokens", u.completion_tokens},
                {"total_tokens", u.prompt_tokens + u.completion_tokens},
                {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}}}};
    out += "data: " + dump(j) + "\n\n";
  }
  return out + "data: [DONE]\n\n";
}

void ResponseWriter::absorb(const Piece& p) {
  if (choices_.size() <= p.choice) choices_.resize(p.choice + 1);
  ChoiceOut& co = choices_[p.choice];
  for (const parse::Delta& d : p.deltas) parse::apply_delta(d, co.message);
  co.text += p.text;
  co.logprobs.insert(co.logprobs.end(), p.logprobs.begin(), p.logprobs.end());
  co.token_ids.insert(co.token_ids.end(), p.token_ids.begin(), p.token_ids.end());
  if (p.finish != Finish::none) co.finish = p.finish;
}

std::string ResponseWriter::final_body(const Usage& u) const {
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const ChoiceOut& co = choices_[i];
    json c = {{"index", i}};
    if (req_.chat) {
      const parse::AssistantMessage& m = co.message;
      json msg = {{"role", "assistant"},
                  {"content", m.content.empty() && !m.tool_calls.empty() ? json(nullptr) : json(m.content)},
                  {"reasoning_content", m.reasoning_content.empty() ? json(nullptr) : json(m.reasoning_content)}};
      if (!m.tool_calls.empty()) {
        json calls = json::array();
        for (const parse::ToolCall& tc : m.tool_calls)
          calls.push_back(
              {{"id", tc.id}, {"type", "function"}, {"function", {{"name", tc.name}, {"arguments", tc.arguments}}}});
        msg["tool_calls"] = std::move(calls);
      }
      c["message"] = std::move(msg);
    } else {
      c["text"] = co.text;
    }
    c["logprobs"] = req_.gen->sampling.top_logprobs >= 0 ? logprobs_object(req_, co.logprobs, 0) : json(nullptr);
    c["finish_reason"] = finish_reason(co.finish != Finish::none ? co.finish : Finish::stop);
    if (req_.gen->return_token_ids) {  // vLLM's fields: completions carry their prompt on each choice
      if (!req_.chat) c["prompt_token_ids"] = prompt_ids_of(static_cast<uint32_t>(i));
      c["token_ids"] = co.token_ids;
    }
    choices.push_back(std::move(c));
  }
  json j = {{"id", id_},
            {"object", req_.chat ? "chat.completion" : "text_completion"},
            {"created", created_},
            {"model", model_},
            {"system_fingerprint", nullptr},
            {"choices", choices},
            {"usage",
             {{"prompt_tokens", u.prompt_tokens},
              {"completion_tokens", u.completion_tokens},
              {"total_tokens", u.prompt_tokens + u.completion_tokens},
              {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}}}};
  if (req_.gen->return_token_ids && req_.chat) j["prompt_token_ids"] = prompt_ids_of(0);
  return dump(j);
}

}  // namespace kiln::serve
