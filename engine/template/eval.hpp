// Tree-walking evaluator. Scoping follows Jinja2: a for-loop body gets a fresh frame per
// iteration (assignments never leak out of the loop), `if` shares its frame, macros get a frame
// whose parent is the frame they were defined in, namespace() objects are shared by reference.
#pragma once

#include <memory>
#include <string>
#include <unordered_map>

#include "template/ast.hpp"
#include "template/value.hpp"

namespace kiln::tmpl {

struct Frame {
  std::shared_ptr<Frame> parent;
  std::unordered_map<std::string, Value> vars;
};

class Evaluator {
 public:
  Evaluator(const Program& program, const TemplateLimits& limits, std::shared_ptr<Frame> globals);
  std::string run();

  Value eval(const Expr& e);
  Value call(const Value& callee, CallArgs& args);
  Value get_attr(const Value& obj, const std::string& name);
  Value get_item(const Value& obj, const Value& key);
  Value apply_filter(const std::string& name, const Value& target, CallArgs& args);
  bool apply_test(const std::string& name, const Value& target, CallArgs& args);
  Value binary(const std::string& op, const Value& a, const Value& b);

  /** Charges work against max_steps; bytes built count 1 step per 64. */
  void charge(uint64_t steps);
  /** Refuses strings/lists larger than max_output_bytes. */
  void check_size(size_t size);
  int line() const { return line_; }
  const TemplateLimits& limits() const { return limits_; }

 private:
  enum class Flow { Normal, Break, Continue };
  Flow exec_body(const Body& body);
  Flow exec(const Stmt& s);
  Flow exec_for(const Stmt& s);
  void write(const std::string& text);
  std::string capture(const Body& body);
  Value lookup(const std::string& name) const;
  void assign(const std::vector<std::string>& targets, const Value& v);
  Value make_macro(const Stmt& m, bool is_caller);
  Value call_macro(const Stmt& m, const std::shared_ptr<Frame>& parent, CallArgs& args, bool is_caller);
  void eval_args(const Expr& e, size_t first, CallArgs& out);
  Value slice(const Value& obj, const Expr& sl);

  struct Depth {
    Evaluator& ev;
    explicit Depth(Evaluator& e);
    ~Depth() { --ev.depth_; }
  };

  const Program& program_;
  TemplateLimits limits_;
  std::shared_ptr<Frame> frame_;
  std::shared_ptr<Frame> root_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int depth_ = 0;
  int macro_depth_ = 0;
  int line_ = 0;
};

/** Globals every template sees: range, namespace, dict, raise_exception, strftime_now. */
void add_builtin_globals(Frame& globals);

/** Bound method `name` of a str/dict/list value, or an Undefined explaining why not. */
Value get_method(const Value& self, const std::string& name);
/** Python str.splitlines() */
std::vector<std::string> split_lines(const std::string& s, bool keepends);
/** Python str.strip family; chars null means whitespace. which: 1 left, 2 right, 3 both. */
std::string strip_chars(const std::string& s, const Value* chars, int which);
/** Python `fmt % args` printf-style formatting. */
std::string percent_format(const std::string& fmt, const Value& args);
std::string str_upper(const std::string& s);
std::string str_lower(const std::string& s);
std::string str_title(const std::string& s);
std::string str_capitalize(const std::string& s);
/** Python str.replace; fails with a Limit error instead of building more than max_bytes. */
std::string str_replace(const std::string& s, const std::string& old, const std::string& rep, int64_t count,
                        size_t max_bytes);

}  // namespace kiln::tmpl
