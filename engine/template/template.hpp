// kiln's Jinja engine for Hugging Face chat templates: parse once, render many times.
//
// Semantics follow Python Jinja2 as transformers configures it for chat templates
// (ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, tojson without HTML
// escaping, raise_exception, strftime_now). docs/templates.md lists what is covered.
// nlohmann/json stays out of this header: contexts come in as JSON text.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/error.hpp"

namespace kiln {

/** Every template failure. A server answers these with HTTP 400 and message(). */
class TemplateError : public HostError {
 public:
  enum class Kind {
    Syntax,  ///< the template text does not parse (line() says where)
    Render,  ///< Jinja would fail at render time: undefined used, type error, bad filter argument
    Raised,  ///< the template called raise_exception(message)
    Limit,   ///< a safety limit (output size, steps, nesting) was exceeded
  };
  TemplateError(Kind kind, std::string message, int line = 0);
  Kind kind() const { return kind_; }
  /** 1-based template line, 0 when unknown. */
  int line() const { return line_; }
  /** The message without the "[template]" prefix or line (for raise_exception: the template's text). */
  const std::string& message() const { return message_; }

 private:
  Kind kind_;
  std::string message_;
  int line_;
};

/** Guards against hostile or broken templates; the defaults are far above what real templates need. */
struct TemplateLimits {
  size_t max_output_bytes = 64u << 20;   ///< rendered text, and any single string or list built
  uint64_t max_steps = 100'000'000;      ///< evaluated nodes + loop iterations + bytes/64 built
  int max_call_depth = 200;              ///< nested macro calls / evaluation recursion (x5)
};

namespace tmpl {
struct Program;
struct Value;
}  // namespace tmpl

class Template {
 public:
  /** Parses `source`; throws TemplateError(Kind::Syntax) with the line number on bad input. */
  explicit Template(std::string_view source);
  ~Template();
  Template(Template&&) noexcept;
  Template& operator=(Template&&) noexcept;

  /** Renders with the members of a JSON object as variables (plus raise_exception, strftime_now,
   *  range, namespace, dict). Throws TemplateError. */
  std::string render_json(std::string_view context_json, const TemplateLimits& limits = {}) const;
  /** Renders with these variables (a later one replaces an earlier one of the same name), plus
   *  the builtins render_json adds. */
  std::string render(const std::vector<std::pair<std::string, tmpl::Value>>& vars,
                     const TemplateLimits& limits = {}) const;

 private:
  std::unique_ptr<tmpl::Program> program_;
};

}  // namespace kiln
