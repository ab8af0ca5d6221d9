#include "template/chat_input.hpp"

#include "core/json_ordered.hpp"
#include "template/json_value.hpp"

namespace kiln {
namespace {

using ojson = nlohmann::ordered_json;

[[noreturn]] void bad(const std::string& message) {
  throw TemplateError(TemplateError::Kind::Render, message);
}

bool flag(const ojson& body, const char* name, bool otherwise) {
  const auto it = body.find(name);
  if (it == body.end() || it->is_null()) return otherwise;
  if (!it->is_boolean()) bad(std::string(name) + " must be true or false");
  return it->get<bool>();
}

/**
 * A message as the template sees it: assistant tool calls' arguments sent as JSON text become the
 * object they hold (text that is not a JSON object stays text). Only messages with tool calls are
 * copied to do so.
 */
tmpl::Value message_value(const ojson& m) {
  const auto calls = m.is_object() ? m.find("tool_calls") : m.end();
  if (calls == m.end() || !calls->is_array()) return tmpl::from_json(m, 1);
  ojson copy = m;
  for (ojson& call : copy["tool_calls"]) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
    ojson& fn = call["function"];
    if (!fn.contains("arguments") || !fn["arguments"].is_string()) continue;
    try {
      ojson parsed = parse_ordered_json(fn["arguments"].get_ref<const std::string&>(), tmpl::kMaxNesting);
      if (parsed.is_object()) fn["arguments"] = std::move(parsed);
    } catch (const nlohmann::json::exception&) {  // not JSON: the template sees the text
    }
  }
  return tmpl::from_json(copy, 1);
}

tmpl::Value map_value(const tmpl::Value& v, const std::function<std::string(const std::string&)>& f) {
  switch (v.kind) {
    case tmpl::Kind::String:
      return tmpl::Value::string(f(v.s));
    case tmpl::Kind::List: {
      std::vector<tmpl::Value> items;
      items.reserve(v.arr->items.size());
      for (const tmpl::Value& x : v.arr->items) items.push_back(map_value(x, f));
      return tmpl::Value::list(std::move(items), v.arr->tag);
    }
    case tmpl::Kind::Dict: {
      // Keys that map alike become one, in the first one's place with the last value (as one
      // JSON object holding both would parse).
      auto o = std::make_shared<tmpl::Object>();
      for (const auto& [k, x] : v.obj->items) o->set(map_value(k, f), map_value(x, f));
      return tmpl::Value::dict(o);
    }
    default:
      return v;
  }
}

}  // namespace

ChatInput ChatInput::from_body(const ojson& body) {
  if (!body.is_object()) bad("the request must be a JSON object");
  const auto msgs = body.find("messages");
  if (msgs == body.end() || !msgs->is_array()) bad("the request needs a \"messages\" array");
  ChatInput in;
  std::vector<tmpl::Value> messages;
  messages.reserve(msgs->size());
  for (const ojson& m : *msgs) messages.push_back(message_value(m));
  in.messages = tmpl::Value::list(std::move(messages));
  if (const auto t = body.find("tools"); t != body.end()) in.tools = tmpl::from_json(*t);
  if (const auto d = body.find("documents"); d != body.end()) in.documents = tmpl::from_json(*d);
  if (const auto kw = body.find("chat_template_kwargs"); kw != body.end() && !kw->is_null()) {
    if (!kw->is_object()) bad("chat_template_kwargs must be a JSON object");
    for (const auto& [k, v] : kw->items()) in.kwargs.emplace_back(k, tmpl::from_json(v));
  }
  in.continue_final_message = flag(body, "continue_final_message", false);
  in.add_generation_prompt = flag(body, "add_generation_prompt", !in.continue_final_message);
  if (in.continue_final_message && in.add_generation_prompt)
    bad("continue_final_message and add_generation_prompt cannot both be true");
  return in;
}

ChatInput ChatInput::parse(std::string_view request_json) {
  ojson body;
  try {
    body = parse_ordered_json(request_json, tmpl::kMaxNesting + 2);  // linear even for objects with many keys
  } catch (const nlohmann::json::exception& e) {
    if (nests_too_deep(e))
      throw TemplateError(TemplateError::Kind::Limit,
                          "the request nests deeper than " + std::to_string(tmpl::kMaxNesting) + " levels");
    bad(std::string("the request is not valid JSON: ") + e.what());
  }
  return from_body(body);
}

ChatInput ChatInput::map_strings(const std::function<std::string(const std::string&)>& f) const {
  ChatInput out = *this;
  out.messages = map_value(messages, f);
  out.tools = map_value(tools, f);
  out.documents = map_value(documents, f);
  for (auto& [k, v] : out.kwargs) {
    k = f(k);
    v = map_value(v, f);
  }
  return out;
}

}  // namespace kiln
