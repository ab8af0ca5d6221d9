#include "template/template.hpp"

#include "core/json_ordered.hpp"
#include "template/eval.hpp"
#include "template/json_value.hpp"
#include "template/parser.hpp"

namespace kiln {

Template::Template(std::string_view source) : program_(tmpl::parse(source)) {}
Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render_json(std::string_view context_json, const TemplateLimits& limits) const {
  nlohmann::ordered_json ctx;
  try {
    ctx = parse_ordered_json(context_json, tmpl::kMaxNesting + 2);  // from_json's limit, inside the context
  } catch (const nlohmann::json::exception& e) {
    if (nests_too_deep(e))
      throw TemplateError(TemplateError::Kind::Limit,
                          "JSON input nested deeper than " + std::to_string(tmpl::kMaxNesting) + " levels");
    throw TemplateError(TemplateError::Kind::Render, std::string("the context is not valid JSON: ") + e.what());
  }
  if (!ctx.is_object()) throw TemplateError(TemplateError::Kind::Render, "the context must be a JSON object");
  std::vector<std::pair<std::string, tmpl::Value>> vars;
  for (const auto& [k, v] : ctx.items()) vars.emplace_back(k, tmpl::from_json(v));
  return render(vars, limits);
}

std::string Template::render(const std::vector<std::pair<std::string, tmpl::Value>>& vars,
                             const TemplateLimits& limits) const {
  auto globals = std::make_shared<tmpl::Frame>();
  tmpl::add_builtin_globals(*globals);
  for (const auto& [k, v] : vars) globals->vars[k] = v;
  tmpl::Evaluator ev(*program_, limits, std::move(globals));
  try {
    return ev.run();
  } catch (const TemplateError& e) {
    if (e.line() != 0 || e.kind() == TemplateError::Kind::Syntax) throw;
    throw TemplateError(e.kind(), e.message(), ev.line());
  }
}

}  // namespace kiln
