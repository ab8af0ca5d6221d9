// Conversion from parsed JSON (nlohmann::ordered_json: key order matters, Python dicts keep it)
// to template values. Private to kiln_template.
#pragma once

#include <nlohmann/json.hpp>

#include "template/value.hpp"

namespace kiln::tmpl {

/** Throws TemplateError(Limit) for documents nested deeper than kMaxNesting. */
Value from_json(const nlohmann::ordered_json& j, int depth = 0);

}  // namespace kiln::tmpl
