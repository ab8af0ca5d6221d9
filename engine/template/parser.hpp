// Recursive-descent parser following jinja2/parser.py's grammar and precedence (filters bind
// tighter than arithmetic, `is` tests sit with filters, `not` below comparisons, inline if lowest).
#pragma once

#include <memory>
#include <string_view>

#include "template/ast.hpp"

namespace kiln::tmpl {

/** Throws TemplateError(Syntax) naming the line. */
std::unique_ptr<Program> parse(std::string_view source);

// Filter and test names the evaluator implements (unknown ones are syntax errors, as in Jinja).
bool has_filter(const std::string& name);
bool has_test(const std::string& name);

}  // namespace kiln::tmpl
