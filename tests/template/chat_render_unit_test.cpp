// Rendering OpenAI chat-completions requests: template selection, special tokens, argument parsing,
// request defaults and errors (self-contained; the real templates are in oracle_test.cpp).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "template/chat_render.hpp"

using kiln::ChatTemplate;
using kiln::TemplateError;

namespace {

const char* kProbe =
    "{{ bos_token }}|{{ eos_token }}|{{ pad_token is defined }}|{{ unk_token is defined }}|"
    "{% for m in messages %}{{ m.role }}:{{ m.content }}"
    "{% for tc in m.tool_calls|default([]) %}[{{ tc.function.name }}"
    "{% for k, v in tc.function.arguments|items %} {{ k }}={{ v|tojson }}{% endfor %}]{% endfor %};{% endfor %}"
    "tools={{ tools|length if tools else tools }}|docs={{ documents }}|agp={{ add_generation_prompt }}|"
    "think={{ enable_thinking|default('unset') }}";

std::string config(const std::string& chat_template_json) {
  return R"({"bos_token": {"content": "<s>", "lstrip": false, "__type": "AddedToken"}, "eos_token": "</s>",
             "pad_token": null, "chat_template": )" +
         chat_template_json + "}";
}

TEST(ChatRender, PassesSpecialTokensAndDefaults) {
  ChatTemplate ct = ChatTemplate::from_config(config("\"x\""), kProbe);
  EXPECT_EQ(ct.render_request(R"({"messages": [{"role": "user", "content": "hi"}]})"),
            "<s>|</s>|False|False|user:hi;tools=None|docs=None|agp=True|think=unset");
  EXPECT_EQ(ct.render_request(R"({"messages": [], "add_generation_prompt": false,
                                  "chat_template_kwargs": {"enable_thinking": false}, "tools": []})"),
            "<s>|</s>|False|False|tools=[]|docs=None|agp=False|think=False");
}

TEST(ChatRender, ParsesStringToolCallArguments) {
  ChatTemplate ct = ChatTemplate::from_config(config("\"x\""), kProbe);
  const std::string req = R"({"messages": [{"role": "assistant", "content": "",
      "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"city\": \"Paris\", \"n\": 2}"}},
                     {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {"x": [1]}}}]}]})";
  EXPECT_EQ(ct.render_request(req),
            "<s>|</s>|False|False|assistant:[f city=\"Paris\" n=2][g x=[1]];tools=None|docs=None|agp=True|think=unset");
}

TEST(ChatRender, PicksNamedTemplates) {
  const std::string list = R"([{"name": "default", "template": "D{{ messages|length }}"},
                               {"name": "tool_use", "template": "T{{ tools|length }}"}])";
  ChatTemplate ct = ChatTemplate::from_config(config(list));
  EXPECT_EQ(ct.render_request(R"({"messages": [{"role": "user", "content": "x"}]})"), "D1");
  EXPECT_EQ(ct.render_request(R"({"messages": [], "tools": [{"type": "function"}]})"), "T1");
}

TEST(ChatRender, ContinuesTheFinalMessage) {
  ChatTemplate ct = ChatTemplate::from_config(
      config("\"x\""), "{% for m in messages %}<{{ m.role }}>{{ m.content | trim }}</{{ m.role }}>\n{% endfor %}"
                        "{% if add_generation_prompt %}<assistant>{% endif %}");
  const std::string msgs = R"([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Sure, here )";
  EXPECT_EQ(ct.render_request(R"({"continue_final_message": true, "messages": )" + msgs + R"("}]})"),
            "<user>Hi</user>\n<assistant>Sure, here");
  // The template trimmed the trailing space, so the prompt ends at the stripped text.
  EXPECT_EQ(ct.render_request(R"({"continue_final_message": true, "add_generation_prompt": false, "messages": )" + msgs + R"( "}]})"),
            "<user>Hi</user>\n<assistant>Sure, here");
  EXPECT_THROW(ct.render_request(R"({"continue_final_message": true, "add_generation_prompt": true, "messages": )" + msgs + R"("}]})"),
               TemplateError);
}

TEST(ChatRender, BadRequestsAreTemplateErrors) {
  ChatTemplate ct = ChatTemplate::from_config(config("\"{{ raise_exception('no ' + messages[0].role) }}\""));
  auto kind_of = [&](const std::string& req) {
    try {
      ct.render_request(req);
    } catch (const TemplateError& e) {
      return static_cast<int>(e.kind());
    }
    return -1;
  };
  EXPECT_EQ(kind_of("not json"), static_cast<int>(TemplateError::Kind::Render));
  EXPECT_EQ(kind_of(R"({"model": "x"})"), static_cast<int>(TemplateError::Kind::Render));
  EXPECT_EQ(kind_of(R"({"messages": [], "chat_template_kwargs": 3})"), static_cast<int>(TemplateError::Kind::Render));
  EXPECT_EQ(kind_of(R"({"messages": [{"role": "tool"}]})"), static_cast<int>(TemplateError::Kind::Raised));
  try {
    ct.render_request(R"({"messages": [{"role": "tool"}]})");
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.message(), "no tool");
  }
}

TEST(ChatRender, MissingOrBrokenTemplatesSayWhy) {
  EXPECT_THROW(ChatTemplate::from_config(R"({"eos_token": "x"})"), kiln::HostError);
  EXPECT_THROW(ChatTemplate::from_config(config("\"{% if %}\"")), TemplateError);
  EXPECT_THROW(ChatTemplate::from_config("{broken"), kiln::HostError);
}

TEST(ChatRender, ModelDirPrefersChatTemplateJinja) {
  const auto dir = std::filesystem::temp_directory_path() / ("kiln-chat-render-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json") << config("\"from config {{ bos_token }}\"");
  EXPECT_EQ(ChatTemplate::from_model_dir(dir).render_request(R"({"messages": []})"), "from config <s>");
  std::ofstream(dir / "chat_template.json") << R"({"chat_template": "from json"})";
  EXPECT_EQ(ChatTemplate::from_model_dir(dir).render_request(R"({"messages": []})"), "from json");
  std::ofstream(dir / "chat_template.jinja") << "from jinja {{ eos_token }}\n";
  ChatTemplate ct = ChatTemplate::from_model_dir(dir);
  EXPECT_EQ(ct.render_request(R"({"messages": []})"), "from jinja </s>");
  EXPECT_NE(ct.origin().find("chat_template.jinja"), std::string::npos);
  std::filesystem::remove_all(dir);
  EXPECT_THROW(ChatTemplate::from_model_dir(dir), kiln::HostError);
}

}  // namespace
