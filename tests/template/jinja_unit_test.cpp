// Jinja semantics of kiln's template engine: many small templates whose expected output was
// produced by Python Jinja2 configured as transformers configures it (jinja_cases.inc), plus
// error reporting and the safety limits.
#include <gtest/gtest.h>

#include <string>

#include "template/template.hpp"

using kiln::Template;
using kiln::TemplateError;
using kiln::TemplateLimits;

namespace {

struct RenderCase {
  const char* tmpl;
  const char* context;
  const char* expected;
};
struct ErrorCase {
  const char* tmpl;
  const char* context;
  TemplateError::Kind kind;
  const char* message;
};

#include "jinja_cases.inc"

std::string render(const std::string& t, const std::string& ctx = "{}", const TemplateLimits& limits = {}) {
  return Template(t).render_json(ctx, limits);
}

TemplateError render_error(const std::string& t, const std::string& ctx = "{}", const TemplateLimits& limits = {}) {
  try {
    render(t, ctx, limits);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << t;
  return TemplateError(TemplateError::Kind::Render, "none");
}

TEST(JinjaSemantics, MatchesJinja2OnSmallTemplates) {
  for (const auto& c : kRenderCases) {
    SCOPED_TRACE(c.tmpl);
    std::string out;
    try {
      out = render(c.tmpl, c.context);
    } catch (const std::exception& e) {
      ADD_FAILURE() << "threw " << e.what();
      continue;
    }
    EXPECT_EQ(out, c.expected);
  }
}

TEST(JinjaSemantics, FailsWhereJinja2Fails) {
  for (const auto& c : kErrorCases) {
    SCOPED_TRACE(c.tmpl);
    TemplateError e = render_error(c.tmpl, c.context);
    EXPECT_EQ(static_cast<int>(e.kind()), static_cast<int>(c.kind)) << e.what();
    if (*c.message) {
      EXPECT_EQ(e.message(), c.message);
    }
    EXPECT_EQ(std::string(e.what()).rfind("[template] ", 0), 0u) << e.what();
  }
}

TEST(JinjaErrors, RaiseExceptionKeepsTheTemplatesMessage) {
  TemplateError e = render_error("line one\n{% if true %}\n{{ raise_exception('Conversation roles must alternate') }}{% endif %}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::Raised);
  EXPECT_EQ(e.message(), "Conversation roles must alternate");
  EXPECT_EQ(e.line(), 3);
}

TEST(JinjaErrors, SyntaxErrorsNameTheLine) {
  TemplateError e = render_error("a\nb\n{% for x in y %}\n{{ x + }}\n{% endfor %}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::Syntax);
  EXPECT_EQ(e.line(), 4);
  EXPECT_NE(std::string(e.what()).find("line 4"), std::string::npos) << e.what();
  EXPECT_EQ(render_error("{% if x %}\n\nno end").line(), 3);
  EXPECT_EQ(render_error("{{ x | nosuchfilter }}").message(), "No filter named 'nosuchfilter'.");
  EXPECT_EQ(render_error("{% include 'other.jinja' %}").kind(), TemplateError::Kind::Syntax);
  EXPECT_EQ(render_error("{% break %}").kind(), TemplateError::Kind::Syntax);
}

TEST(JinjaErrors, UndefinedUsedAsJinjaRejectsIt) {
  EXPECT_EQ(render_error("{{ messages[0].content }}").message(), "'messages' is undefined");
  EXPECT_EQ(render_error("{{ m.content.strip() }}", R"({"m": {}})").message(), "'dict object' has no attribute 'content'");
  EXPECT_EQ(render_error("\n{{ x + 1 }}").line(), 2);
  // ... but printing, testing, iterating and defaulting an undefined value are fine.
  EXPECT_EQ(render("[{{ x }}]{{ x is defined }}{% for i in x %}{% endfor %}{{ x|default('d') }}"), "[]Falsed");
}

TEST(JinjaErrors, BadContextIsAnError) {
  EXPECT_EQ(render_error("x", "[1]").kind(), TemplateError::Kind::Render);
  EXPECT_EQ(render_error("x", "{not json").kind(), TemplateError::Kind::Render);
}

TEST(JinjaErrors, InvalidUtf8TemplateIsASyntaxError) {
  EXPECT_EQ(render_error("ok\n\xff\xfe").kind(), TemplateError::Kind::Syntax);
  EXPECT_EQ(render_error("ok\n\xff\xfe").line(), 2);
}

TEST(JinjaLimits, RunawayTemplatesStopWithALimitError) {
  TemplateLimits small;
  small.max_output_bytes = 1 << 16;
  small.max_steps = 200000;
  small.max_call_depth = 50;
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "{}", small).kind(),
            TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "{}", small).kind(),
            TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{{ 'x' * 100000000 }}", "{}", small).kind(), TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{% for i in range(100000) %}xxxxxxxxxxxxxxxxxxxx{% endfor %}", "{}", small).kind(),
            TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{% set ns = namespace(x=[]) %}{% for i in range(1000) %}{% set ns.x = [ns.x] %}{% endfor %}", "{}", small).kind(),
            TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{{ ('a' * 1000).replace('a', 'b' * 100000) }}", "{}", small).kind(), TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{{ ('a' * 1000)|replace('a', 'b' * 100000) }}", "{}", small).kind(), TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{{ ('\\n' * 1000)|indent(1000) }}", "{}", small).kind(), TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{{ ('x' * 1000).join(['a'] * 1000) }}", "{}", small).kind(), TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{% set ns = namespace(l=[1]) %}{% for i in range(40) %}{% set ns.l = ns.l + ns.l %}{% endfor %}", "{}", small).kind(),
            TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{{ " + std::string(500, '(') + "1" + std::string(500, ')') + " }}").kind(), TemplateError::Kind::Syntax);
  EXPECT_EQ(render_error("{{ 9223372036854775807 + 1 }}").kind(), TemplateError::Kind::Limit);
  std::string deep_json;
  for (int i = 0; i < 400; ++i) deep_json += "[";
  for (int i = 0; i < 400; ++i) deep_json += "]";
  EXPECT_EQ(render_error("{{ x }}", "{\"x\": " + deep_json + "}").kind(), TemplateError::Kind::Limit);
}

TEST(JinjaLimits, LargeRealisticInputsFitTheDefaultLimits) {
  // 400 messages of 8 KiB each (~3 MB of prompt) through a template with a quadratic backward scan
  // (as Gemma 4's does): accounting must stay linear in what is actually built.
  std::string ctx = "{\"messages\": [";
  const std::string body(8192, 'x');
  for (int i = 0; i < 400; ++i) ctx += std::string(i ? "," : "") + "{\"role\": \"" + (i % 2 ? "assistant" : "user") + "\", \"content\": \"" + body + "\"}";
  ctx += "]}";
  const std::string t =
      "{% for m in messages %}{% set ns = namespace(prev=none) %}"
      "{% for j in range(loop.index0 - 1, -1, -1) %}{% if ns.prev is none %}{% set ns.prev = messages[j].role %}{% endif %}{% endfor %}"
      "{{ '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}{% endfor %}";
  const std::string out = render(t, ctx);
  EXPECT_EQ(out.size(), 400u * (8192 + 24) + 200u * (4 + 9));
}

TEST(JinjaLimits, DefaultLimitsStopDeepRecursionBeforeTheStackDoes) {
  EXPECT_EQ(render_error("{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}").kind(), TemplateError::Kind::Limit);
  EXPECT_EQ(render_error("{% macro f(n) %}{% for i in [1] %}{% if true %}{{ [f(n + 1)]|join }}{% endif %}{% endfor %}{% endmacro %}{{ f(0) }}").kind(),
            TemplateError::Kind::Limit);
}

TEST(JinjaLimits, NamespacesCannotHoldThemselves) {
  // Jinja2 allows it; kiln refuses so that values never form reference cycles.
  EXPECT_EQ(render_error("{% set ns = namespace() %}{% set ns.me = [ns] %}").kind(), TemplateError::Kind::Render);
}

TEST(JinjaGlobals, StrftimeNowFormatsTheCurrentTime) {
  const std::string year = render("{{ strftime_now('%Y') }}");
  ASSERT_EQ(year.size(), 4u);
  EXPECT_GE(std::stoi(year), 2024);
  EXPECT_EQ(render("{{ strftime_now('%d %B %Y') | length > 10 }}"), "True");
}

TEST(JinjaTemplate, RendersManyTimesFromOneParse) {
  Template t("{{ greeting }}, {{ name | default('world') }}!");
  EXPECT_EQ(t.render_json(R"({"greeting": "Hello"})"), "Hello, world!");
  EXPECT_EQ(t.render_json(R"({"greeting": "Hi", "name": "kiln"})"), "Hi, kiln!");
  Template moved = std::move(t);
  EXPECT_EQ(moved.render_json(R"({"greeting": "Yo"})"), "Yo, world!");
}

}  // namespace
