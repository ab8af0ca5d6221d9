#include "template/chat_render.hpp"

#include <fstream>
#include <optional>
#include <sstream>

#include "core/json_ordered.hpp"
#include "template/eval.hpp"
#include "template/json_value.hpp"

namespace kiln {
namespace {

using ojson = nlohmann::ordered_json;

std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw_error("[template] cannot read {}", p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ojson parse_json(std::string_view text, const std::string& what) {
  try {
    return parse_ordered_json(text, tmpl::kMaxNesting + 2);  // linear even for objects with many keys
  } catch (const nlohmann::json::exception& e) {
    throw_error("[template] {} is not valid JSON: {}", what, e.what());
  }
}

// transformers passes special tokens as strings; tokenizer_config.json may hold AddedToken dicts.
std::optional<std::string> token_text(const ojson& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_object() && v.contains("content") && v["content"].is_string()) return v["content"].get<std::string>();
  return std::nullopt;
}

// The text continue_final_message continues: the last message's content, or its last text block.
std::string final_message_text(const tmpl::Value& messages) {
  auto bad = [](const std::string& m) { return TemplateError(TemplateError::Kind::Render, m); };
  const tmpl::Value* content = nullptr;
  if (messages.is_list() && !messages.arr->items.empty() && messages.arr->items.back().is_dict())
    content = messages.arr->items.back().obj->find(std::string("content"));
  if (!content) throw bad("continue_final_message is set but there is no final message with content");
  if (content->is_string()) return content->s;
  if (content->is_list())
    for (auto it = content->arr->items.rbegin(); it != content->arr->items.rend(); ++it)
      if (it->is_dict())
        if (const tmpl::Value* text = it->obj->find(std::string("text")); text && text->is_string()) return text->s;
  throw bad("continue_final_message is set but the final message has no text to continue");
}

// transformers' apply_chat_template(continue_final_message=True): cut the prompt right after the
// final message's text so that generation continues it (keeping its trailing whitespace if the
// template kept it).
std::string cut_after_final_message(const std::string& rendered, const std::string& final_text) {
  const std::string stripped = tmpl::strip_chars(final_text, nullptr, 3);
  const size_t loc = rendered.rfind(stripped);
  if (loc == std::string::npos)
    throw TemplateError(TemplateError::Kind::Render,
                        "continue_final_message is set but the final message does not appear in the chat after "
                        "applying the chat template");
  const std::string lstripped = tmpl::strip_chars(final_text, nullptr, 1);
  // (transformers compares the rendered slice with the unstripped text)
  if (lstripped.size() == final_text.size() && rendered.compare(loc, final_text.size(), final_text) == 0)
    return rendered.substr(0, loc + final_text.size());
  return rendered.substr(0, loc + stripped.size());
}

}  // namespace

ChatTemplate ChatTemplate::from_config(std::string_view config_text, std::string_view template_text) {
  ChatTemplate ct;
  ojson config = config_text.empty() ? ojson::object() : parse_json(config_text, "tokenizer_config.json");
  if (!config.is_object()) throw_error("[template] tokenizer_config.json must hold a JSON object");
  ojson special = ojson::object();
  for (const char* key : {"bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"}) {
    if (!config.contains(key)) continue;
    if (auto t = token_text(config[key])) special[key] = *t;
  }
  if (config.contains("additional_special_tokens") && config["additional_special_tokens"].is_array()) {
    ojson list = ojson::array();
    for (const auto& t : config["additional_special_tokens"])
      if (auto s = token_text(t)) list.push_back(*s);
    special["additional_special_tokens"] = list;
  }
  auto vars = std::make_shared<std::vector<std::pair<std::string, tmpl::Value>>>();
  for (const auto& [k, v] : special.items()) vars->emplace_back(k, tmpl::from_json(v));
  ct.special_ = std::move(vars);

  if (!template_text.empty()) {
    ct.default_ = std::make_shared<const Template>(template_text);
    ct.origin_ = "template text";
    return ct;
  }
  if (!config.contains("chat_template") || config["chat_template"].is_null())
    throw_error("[template] tokenizer_config.json has no chat_template; add chat_template.jinja to the model directory");
  const ojson& tpl = config["chat_template"];
  if (tpl.is_string()) {
    ct.default_ = std::make_shared<const Template>(tpl.get<std::string>());
  } else if (tpl.is_array()) {
    for (const auto& item : tpl) {
      if (!item.is_object() || !item.contains("name") || !item.contains("template") || !item["name"].is_string() ||
          !item["template"].is_string())
        throw_error("[template] chat_template list entries must be {{\"name\": ..., \"template\": ...}}");
      const std::string name = item["name"].get<std::string>();
      if (name == "default") ct.default_ = std::make_shared<const Template>(item["template"].get<std::string>());
      if (name == "tool_use") ct.tool_use_ = std::make_shared<const Template>(item["template"].get<std::string>());
    }
    if (!ct.default_ && !ct.tool_use_)
      throw_error("[template] chat_template lists no 'default' (or 'tool_use') template");
  } else {
    throw_error("[template] chat_template in tokenizer_config.json must be a string or a list of named templates");
  }
  ct.origin_ = "tokenizer_config.json";
  return ct;
}

ChatTemplate ChatTemplate::from_model_dir(const std::filesystem::path& dir) {
  const auto config_path = dir / "tokenizer_config.json";
  const std::string config = std::filesystem::exists(config_path) ? read_file(config_path) : std::string();
  const auto jinja = dir / "chat_template.jinja";
  const auto json = dir / "chat_template.json";
  ChatTemplate ct;
  if (std::filesystem::exists(jinja)) {
    const std::string text = read_file(jinja);
    if (text.empty()) throw_error("[template] {} is empty", jinja.string());
    ct = from_config(config, text);
    ct.origin_ = jinja.string();
  } else if (std::filesystem::exists(json)) {
    ojson j = parse_json(read_file(json), json.string());
    if (!j.is_object() || !j.contains("chat_template")) throw_error("[template] {} has no chat_template", json.string());
    ojson merged = config.empty() ? ojson::object() : parse_json(config, config_path.string());
    merged["chat_template"] = j["chat_template"];
    ct = from_config(merged.dump());
    ct.origin_ = json.string();
  } else if (!config.empty()) {
    ct = from_config(config);
    ct.origin_ = config_path.string();
  } else {
    throw_error("[template] {} has no chat_template.jinja, chat_template.json or tokenizer_config.json", dir.string());
  }
  return ct;
}

std::string ChatTemplate::render_request(std::string_view request_json, const TemplateLimits& limits) const {
  return render(ChatInput::parse(request_json), limits);
}

std::string ChatTemplate::render(const ChatInput& in, const TemplateLimits& limits) const {
  // The variables transformers passes: special tokens, then chat_template_kwargs (which may
  // override them), then the request's own arguments.
  std::vector<std::pair<std::string, tmpl::Value>> vars = *special_;
  vars.insert(vars.end(), in.kwargs.begin(), in.kwargs.end());
  vars.emplace_back("messages", in.messages);
  vars.emplace_back("tools", in.tools);
  vars.emplace_back("documents", in.documents);
  vars.emplace_back("add_generation_prompt", tmpl::Value::boolean(in.add_generation_prompt));
  std::string final_text;
  if (in.continue_final_message) final_text = final_message_text(in.messages);
  const bool has_tools = !in.tools.is_none();
  const Template* t = has_tools && tool_use_ ? tool_use_.get() : default_ ? default_.get() : tool_use_.get();
  if (!t) throw TemplateError(TemplateError::Kind::Render, "the model has no chat template");
  std::string out = t->render(vars, limits);
  if (in.continue_final_message) out = cut_after_final_message(out, final_text);
  return out;
}

}  // namespace kiln
