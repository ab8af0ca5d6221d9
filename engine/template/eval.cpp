#include "template/eval.hpp"

#include <cmath>
#include <ctime>

#include "template/utf8.hpp"

namespace kiln::tmpl {

Evaluator::Depth::Depth(Evaluator& e) : ev(e) {
  if (++ev.depth_ > ev.limits_.max_call_depth * 5) {
    --ev.depth_;  // the destructor will not run for a throwing constructor
    fail_limit("template recursion too deep (limit " + std::to_string(ev.limits_.max_call_depth * 5) + ")");
  }
}

Evaluator::Evaluator(const Program& program, const TemplateLimits& limits, std::shared_ptr<Frame> globals)
    : program_(program), limits_(limits) {
  root_ = std::make_shared<Frame>();
  root_->parent = std::move(globals);
  frame_ = root_;
}

std::string Evaluator::run() {
  std::string out;
  out_ = &out;
  exec_body(program_.body);
  out_ = nullptr;
  return out;
}

void Evaluator::charge(uint64_t steps) {
  steps_ += steps;
  if (steps_ > limits_.max_steps)
    fail_limit("template took more than " + std::to_string(limits_.max_steps) + " steps; is it looping forever?");
}

void Evaluator::check_size(size_t size) {
  charge(size / 64);
  if (size > limits_.max_output_bytes)
    fail_limit("template output or value larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
}

void Evaluator::write(const std::string& text) {
  charge(text.size() / 64);
  if (out_->size() + text.size() > limits_.max_output_bytes)
    fail_limit("template output larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
  out_->append(text);
}

std::string Evaluator::capture(const Body& body) {
  std::string buf;
  std::string* saved = out_;
  out_ = &buf;
  try {
    exec_body(body);
  } catch (...) {
    out_ = saved;
    throw;
  }
  out_ = saved;
  return buf;
}

Value Evaluator::lookup(const std::string& name) const {
  for (const Frame* f = frame_.get(); f; f = f->parent.get()) {
    auto it = f->vars.find(name);
    if (it != f->vars.end()) return it->second;
  }
  return Value::undefined("'" + name + "' is undefined");
}

void Evaluator::assign(const std::vector<std::string>& targets, const Value& v) {
  if (targets.size() == 1) {
    frame_->vars[targets[0]] = v;
    return;
  }
  std::vector<Value> items = iterate(v);
  if (items.size() != targets.size()) {
    if (items.size() > targets.size())
      fail("too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    fail("not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " +
         std::to_string(items.size()) + ")");
  }
  for (size_t k = 0; k < targets.size(); ++k) frame_->vars[targets[k]] = items[k];
}

// ---------------------------------------------------------------------------------------------
// statements

Evaluator::Flow Evaluator::exec_body(const Body& body) {
  for (const auto& s : body) {
    Flow f = exec(*s);
    if (f != Flow::Normal) return f;
  }
  return Flow::Normal;
}

Evaluator::Flow Evaluator::exec(const Stmt& s) {
  Depth d(*this);
  charge(1);
  line_ = s.line;
  switch (s.kind) {
    case SK::Data: write(s.text); break;
    case SK::Print: write(to_str(eval(*s.expr))); break;
    case SK::If:
      for (size_t k = 0; k < s.conds.size(); ++k)
        if (truthy(eval(*s.conds[k]))) return exec_body(s.bodies[k]);
      return exec_body(s.else_body);
    case SK::For: return exec_for(s);
    case SK::Set: {
      Value v = eval(*s.expr);
      if (!s.ns_attr.empty()) {
        Value ns = lookup(s.targets[0]);
        if (ns.kind != Kind::Namespace) fail("cannot assign attribute on non-namespace object");
        if (v.holds_namespace())
          fail("storing a namespace (or loop) inside a namespace is not supported by kiln's template engine");
        ns.obj->set(Value::string(s.ns_attr), std::move(v));
      } else {
        assign(s.targets, v);
      }
      break;
    }
    case SK::SetBlock: {
      Value v = Value::string(capture(s.body));
      for (const auto& f : s.filters) {
        CallArgs args;
        eval_args(*f, 1, args);
        v = apply_filter(f->name, v, args);
      }
      frame_->vars[s.targets[0]] = v;
      break;
    }
    case SK::FilterBlock: {
      Value v = Value::string(capture(s.body));
      for (const auto& f : s.filters) {
        CallArgs args;
        eval_args(*f, 1, args);
        v = apply_filter(f->name, v, args);
      }
      write(to_str(v));
      break;
    }
    case SK::Macro: frame_->vars[s.name] = make_macro(s, false); break;
    case SK::CallBlock: {
      const Expr& call = *s.expr;
      Value callee = eval(*call.a[0]);
      CallArgs args;
      eval_args(call, 1, args);
      args.kw.emplace_back("caller", make_macro(s, true));
      write(to_str(this->call(callee, args)));
      break;
    }
    case SK::With: {
      std::vector<Value> vals;
      for (const auto& v : s.values) vals.push_back(eval(*v));
      auto f = std::make_shared<Frame>();
      f->parent = frame_;
      for (size_t k = 0; k < vals.size(); ++k) f->vars[s.targets[k]] = vals[k];
      auto saved = frame_;
      frame_ = f;
      Flow fl;
      try {
        fl = exec_body(s.body);
      } catch (...) {
        frame_ = saved;
        throw;
      }
      frame_ = saved;
      return fl;
    }
    case SK::Break: return Flow::Break;
    case SK::Continue: return Flow::Continue;
  }
  return Flow::Normal;
}

namespace {
struct FrameSwap {
  std::shared_ptr<Frame>& slot;
  std::shared_ptr<Frame> saved;
  FrameSwap(std::shared_ptr<Frame>& s, std::shared_ptr<Frame> next) : slot(s), saved(s) { slot = std::move(next); }
  ~FrameSwap() { slot = std::move(saved); }
};
}  // namespace

Evaluator::Flow Evaluator::exec_for(const Stmt& s) {
  Value seq = eval(*s.expr);
  if (seq.kind == Kind::None || seq.is_number() || seq.kind == Kind::Callable || seq.kind == Kind::Namespace ||
      seq.kind == Kind::Loop)
    fail("'" + type_name(seq) + "' object is not iterable");
  std::vector<Value> items = iterate(seq);
  if (s.cond) {
    // The loop filter sees the loop variables but not `loop`.
    std::vector<Value> kept;
    for (auto& it : items) {
      charge(1);
      auto f = std::make_shared<Frame>();
      f->parent = frame_;
      FrameSwap swap(frame_, f);
      assign(s.targets, it);
      if (truthy(eval(*s.cond))) kept.push_back(std::move(it));
    }
    items = std::move(kept);
  }
  if (items.empty()) {
    auto f = std::make_shared<Frame>();
    f->parent = frame_;
    FrameSwap swap(frame_, f);
    exec_body(s.else_body);
    return Flow::Normal;
  }
  auto shared = std::make_shared<Array>();
  shared->items = std::move(items);
  for (const auto& it : shared->items) shared->has_ns = shared->has_ns || it.holds_namespace();
  for (size_t k = 0; k < shared->items.size(); ++k) {
    charge(1);
    auto f = std::make_shared<Frame>();
    f->parent = frame_;
    FrameSwap swap(frame_, f);
    assign(s.targets, shared->items[k]);
    Value loop;
    loop.kind = Kind::Loop;
    loop.arr = shared;
    loop.i = static_cast<int64_t>(k);
    frame_->vars["loop"] = std::move(loop);
    Flow fl = exec_body(s.body);
    if (fl == Flow::Break) break;
  }
  return Flow::Normal;
}

// ---------------------------------------------------------------------------------------------
// macros

Value Evaluator::make_macro(const Stmt& m, bool is_caller) {
  std::weak_ptr<Frame> weak = frame_;
  const Stmt* stmt = &m;
  Value v = Value::callable(is_caller ? "caller" : m.name, [stmt, weak, is_caller](Evaluator& ev, CallArgs& args) {
    std::shared_ptr<Frame> parent = weak.lock();
    if (!parent) parent = ev.root_;
    return ev.call_macro(*stmt, parent, args, is_caller);
  });
  v.fn->repr = "<Macro '" + v.fn->name + "'>";
  return v;
}

Value Evaluator::call_macro(const Stmt& m, const std::shared_ptr<Frame>& parent, CallArgs& args, bool is_caller) {
  const std::string name = is_caller ? "caller" : m.name;
  if (++macro_depth_ > limits_.max_call_depth) {
    --macro_depth_;
    fail_limit("macros nested deeper than " + std::to_string(limits_.max_call_depth) + " calls");
  }
  struct Guard {
    int& d;
    ~Guard() { --d; }
  } guard{macro_depth_};
  auto f = std::make_shared<Frame>();
  f->parent = parent;
  const size_t np = m.params.size();
  std::vector<bool> given(np, false);
  std::vector<Value> extra_pos;
  for (size_t k = 0; k < args.pos.size(); ++k) {
    if (k < np) {
      f->vars[m.params[k].name] = args.pos[k];
      given[k] = true;
    } else {
      extra_pos.push_back(args.pos[k]);
    }
  }
  if (!extra_pos.empty() && !m.uses_varargs)
    fail("macro '" + name + "' takes not more than " + std::to_string(np) + " argument(s)");
  auto extra_kw = std::make_shared<Object>();
  Value caller_v;
  bool has_caller = false;
  for (auto& [k, v] : args.kw) {
    size_t idx = np;
    for (size_t p = 0; p < np; ++p)
      if (m.params[p].name == k) idx = p;
    if (idx < np) {
      if (given[idx]) fail("macro '" + name + "' got multiple values for argument '" + k + "'");
      f->vars[k] = v;
      given[idx] = true;
    } else if (k == "caller" && !is_caller) {
      caller_v = v;
      has_caller = true;
    } else if (m.uses_kwargs) {
      extra_kw->set(Value::string(k), v);
    } else {
      fail("macro '" + name + "' takes no keyword argument '" + k + "'");
    }
  }
  FrameSwap swap(frame_, f);
  for (size_t p = 0; p < np; ++p) {
    if (given[p]) continue;
    if (m.params[p].def)
      f->vars[m.params[p].name] = eval(*m.params[p].def);
    else
      f->vars[m.params[p].name] = Value::undefined("parameter '" + m.params[p].name + "' was not provided");
  }
  if (m.uses_varargs) f->vars["varargs"] = Value::list(std::move(extra_pos), ListTag::Tuple);
  if (m.uses_kwargs) f->vars["kwargs"] = Value::dict(extra_kw);
  if (has_caller) f->vars["caller"] = caller_v;
  return Value::string(capture(m.body));
}

// ---------------------------------------------------------------------------------------------
// expressions

void Evaluator::eval_args(const Expr& e, size_t first, CallArgs& out) {
  const size_t nkw = e.kw.size();
  const size_t total = e.a.size();
  for (size_t k = first; k < total; ++k) {
    Value v = eval(*e.a[k]);
    if (k + nkw >= total)
      out.kw.emplace_back(e.kw[k + nkw - total], std::move(v));
    else
      out.pos.push_back(std::move(v));
  }
}

Value Evaluator::call(const Value& callee, CallArgs& args) {
  if (callee.kind == Kind::Undefined) fail_undefined(callee);
  if (callee.kind != Kind::Callable) fail("'" + type_name(callee) + "' object is not callable");
  Value r = callee.fn->fn(*this, args);
  return r;
}

static int64_t to_index(const Value& v, const char* what) {
  if (v.kind == Kind::Int) return v.i;
  if (v.kind == Kind::Bool) return v.b ? 1 : 0;
  if (v.kind == Kind::None) return INT64_MIN;
  fail(std::string("slice indices must be integers or None, not ") + type_name(v) + " (" + what + ")");
}

Value Evaluator::slice(const Value& obj, const Expr& sl) {
  auto part = [&](size_t k) { return sl.a[k] ? eval(*sl.a[k]) : Value::none(); };
  Value vs = part(1), ve = part(2), vst = part(3);
  if (obj.kind == Kind::Undefined) fail_undefined(obj);
  int64_t step = to_index(vst, "step");
  if (step == INT64_MIN) step = 1;
  if (step == 0) fail("slice step cannot be zero");
  std::vector<char32_t> cps;
  int64_t len;
  if (obj.kind == Kind::String) {
    cps = utf8::decode(obj.s);
    len = static_cast<int64_t>(cps.size());
  } else if (obj.kind == Kind::List) {
    len = static_cast<int64_t>(obj.arr->items.size());
  } else {
    fail("'" + type_name(obj) + "' object is not subscriptable");
  }
  // Python slice.indices()
  auto adjust = [&](int64_t v, bool is_start) {
    if (v == INT64_MIN) return step > 0 ? (is_start ? int64_t{0} : len) : (is_start ? len - 1 : int64_t{-1});
    if (v < 0) {
      v += len;
      if (v < 0) v = step > 0 ? 0 : -1;
    } else if (v >= len) {
      v = step > 0 ? len : len - 1;
    }
    return v;
  };
  int64_t start = adjust(to_index(vs, "start"), true);
  int64_t stop = adjust(to_index(ve, "stop"), false);
  std::vector<int64_t> idx;
  if (step > 0)
    for (int64_t k = start; k < stop; k += step) idx.push_back(k);
  else
    for (int64_t k = start; k > stop; k += step) idx.push_back(k);
  charge(idx.size());
  if (obj.kind == Kind::String) {
    std::string out;
    for (int64_t k : idx) utf8::append(out, cps[static_cast<size_t>(k)]);
    return Value::string(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t k : idx) out.push_back(obj.arr->items[static_cast<size_t>(k)]);
  return Value::list(std::move(out), obj.arr->tag == ListTag::Tuple ? ListTag::Tuple : ListTag::List);
}

static std::string object_type_repr(const Value& v) {
  if (v.kind == Kind::None) return "None";
  if (v.kind == Kind::Namespace) return "jinja2.utils.Namespace object";
  if (v.kind == Kind::Loop) return "jinja2.runtime.LoopContext object";
  return type_name(v) + " object";
}

Value Evaluator::get_attr(const Value& obj, const std::string& name) {
  switch (obj.kind) {
    case Kind::Undefined: fail_undefined(obj);
    case Kind::Dict: {
      Value m = get_method(obj, name);
      if (m.kind == Kind::Callable || !m.s.empty()) return m;
      if (const Value* v = obj.obj->find(name)) return *v;
      break;
    }
    case Kind::Namespace:
      if (const Value* v = obj.obj->find(name)) return *v;
      break;
    case Kind::Loop: {
      const auto& items = obj.arr->items;
      const int64_t n = static_cast<int64_t>(items.size()), i = obj.i;
      if (name == "index") return Value::integer(i + 1);
      if (name == "index0") return Value::integer(i);
      if (name == "revindex") return Value::integer(n - i);
      if (name == "revindex0") return Value::integer(n - i - 1);
      if (name == "first") return Value::boolean(i == 0);
      if (name == "last") return Value::boolean(i == n - 1);
      if (name == "length") return Value::integer(n);
      if (name == "depth") return Value::integer(1);
      if (name == "depth0") return Value::integer(0);
      if (name == "previtem")
        return i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("there is no previous item");
      if (name == "nextitem")
        return i + 1 < n ? items[static_cast<size_t>(i + 1)] : Value::undefined("there is no next item");
      if (name == "cycle") {
        return Value::callable("cycle", [i](Evaluator&, CallArgs& a) {
          if (a.pos.empty()) fail("no items for cycling given");
          return a.pos[static_cast<size_t>(i) % a.pos.size()];
        });
      }
      break;
    }
    case Kind::String:
    case Kind::List: {
      Value m = get_method(obj, name);
      if (m.kind == Kind::Callable || !m.s.empty()) return m;
      break;
    }
    default: break;
  }
  return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + name + "'");
}

Value Evaluator::get_item(const Value& obj, const Value& key) {
  if (obj.kind == Kind::Undefined) fail_undefined(obj);
  if (obj.kind == Kind::Dict) {
    if (key.kind == Kind::List && key.arr->tag != ListTag::Tuple) fail("unhashable type: 'list'");
    if (key.kind == Kind::Dict) fail("unhashable type: 'dict'");
    if (const Value* v = obj.obj->find(key)) return *v;
  } else if ((obj.kind == Kind::List || obj.kind == Kind::String) && (key.kind == Kind::Int || key.kind == Kind::Bool)) {
    int64_t idx = key.kind == Kind::Bool ? (key.b ? 1 : 0) : key.i;
    if (obj.kind == Kind::List) {
      const int64_t n = static_cast<int64_t>(obj.arr->items.size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) return obj.arr->items[static_cast<size_t>(idx)];
    } else {
      std::vector<char32_t> cps = utf8::decode(obj.s);
      const int64_t n = static_cast<int64_t>(cps.size());
      if (idx < 0) idx += n;
      if (idx >= 0 && idx < n) {
        std::string out;
        utf8::append(out, cps[static_cast<size_t>(idx)]);
        return Value::string(std::move(out));
      }
    }
    return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
  }
  if (key.kind == Kind::String) {
    if (obj.kind == Kind::Dict || obj.kind == Kind::String || obj.kind == Kind::List) {
      Value m = get_method(obj, key.s);
      if (m.kind == Kind::Callable || !m.s.empty()) return m;
    } else if (obj.kind == Kind::Namespace || obj.kind == Kind::Loop) {
      return get_attr(obj, key.s);
    }
    return Value::undefined("'" + object_type_repr(obj) + "' has no attribute '" + key.s + "'");
  }
  return Value::undefined(object_type_repr(obj) + " has no element " + repr(key));
}

static bool contains(const Value& container, const Value& item) {
  switch (container.kind) {
    case Kind::Undefined: return false;
    case Kind::String:
      if (item.kind != Kind::String)
        fail("'in <string>' requires string as left operand, not " + type_name(item));
      return container.s.find(item.s) != std::string::npos;
    case Kind::List:
      for (const auto& v : container.arr->items)
        if (equals(v, item)) return true;
      return false;
    case Kind::Dict:
      if (item.kind == Kind::List && item.arr->tag != ListTag::Tuple) fail("unhashable type: 'list'");
      if (item.kind == Kind::Dict) fail("unhashable type: 'dict'");
      return container.obj->find(item) != nullptr;
    default: fail("argument of type '" + type_name(container) + "' is not iterable");
  }
}

Value Evaluator::eval(const Expr& e) {
  Depth d(*this);
  charge(1);
  if (e.line) line_ = e.line;
  switch (e.kind) {
    case EK::Literal: return e.value;
    case EK::Name: return lookup(e.name);
    case EK::Attr: return get_attr(eval(*e.a[0]), e.name);
    case EK::Item: {
      Value obj = eval(*e.a[0]);
      if (e.a[1]->kind == EK::Slice) return slice(obj, *e.a[1]);
      return get_item(obj, eval(*e.a[1]));
    }
    case EK::Slice: fail("a slice is only valid inside []");
    case EK::Call: {
      Value callee = eval(*e.a[0]);
      CallArgs args;
      eval_args(e, 1, args);
      return call(callee, args);
    }
    case EK::Filter: {
      Value target = eval(*e.a[0]);
      CallArgs args;
      eval_args(e, 1, args);
      return apply_filter(e.name, target, args);
    }
    case EK::Test: {
      Value target = eval(*e.a[0]);
      CallArgs args;
      eval_args(e, 1, args);
      return Value::boolean(apply_test(e.name, target, args) != e.negate);
    }
    case EK::Unary: {
      Value v = eval(*e.a[0]);
      if (e.name == "not") return Value::boolean(!truthy(v));
      if (v.kind == Kind::Undefined) fail_undefined(v);
      if (v.kind == Kind::Int) {
        if (e.name == "-" && v.i == INT64_MIN) fail_limit("integer overflow");
        return Value::integer(e.name == "-" ? -v.i : v.i);
      }
      if (v.kind == Kind::Bool) return Value::integer(e.name == "-" ? -(v.b ? 1 : 0) : (v.b ? 1 : 0));
      if (v.kind == Kind::Float) return Value::number(e.name == "-" ? -v.f : v.f);
      fail("bad operand type for unary " + e.name + ": '" + type_name(v) + "'");
    }
    case EK::Binary: {
      if (e.name == "and") {
        Value l = eval(*e.a[0]);
        return truthy(l) ? eval(*e.a[1]) : l;
      }
      if (e.name == "or") {
        Value l = eval(*e.a[0]);
        return truthy(l) ? l : eval(*e.a[1]);
      }
      Value l = eval(*e.a[0]);
      Value r = eval(*e.a[1]);
      return binary(e.name, l, r);
    }
    case EK::Compare: {
      Value l = eval(*e.a[0]);
      for (size_t k = 0; k < e.ops.size(); ++k) {
        Value r = eval(*e.a[k + 1]);
        const std::string& op = e.ops[k];
        bool ok;
        if (op == "==") ok = equals(l, r);
        else if (op == "!=") ok = !equals(l, r);
        else if (op == "in") ok = contains(r, l);
        else if (op == "notin") ok = !contains(r, l);
        else {
          const int c = compare(l, r, op.c_str());
          ok = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
        }
        if (!ok) return Value::boolean(false);
        l = std::move(r);
      }
      return Value::boolean(true);
    }
    case EK::CondExpr:
      if (truthy(eval(*e.a[0]))) return eval(*e.a[1]);
      if (e.a[2]) return eval(*e.a[2]);
      return Value::undefined("the inline if-expression on line " + std::to_string(e.line) +
                              " evaluated to false and no else section was defined.");
    case EK::List:
    case EK::Tuple: {
      std::vector<Value> items;
      items.reserve(e.a.size());
      for (const auto& x : e.a) items.push_back(eval(*x));
      return Value::list(std::move(items), e.kind == EK::Tuple ? ListTag::Tuple : ListTag::List);
    }
    case EK::Dict: {
      auto o = std::make_shared<Object>();
      for (size_t k = 0; k + 1 < e.a.size(); k += 2) {
        Value key = eval(*e.a[k]);
        Value val = eval(*e.a[k + 1]);
        o->set(key, std::move(val));
      }
      return Value::dict(o);
    }
  }
  fail("unknown expression");
}

// ---------------------------------------------------------------------------------------------
// arithmetic (Python semantics on int64 and double; overflow is an error, not a bigint)

static bool numeric(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Float || v.kind == Kind::Bool; }
static bool integral(const Value& v) { return v.kind == Kind::Int || v.kind == Kind::Bool; }
static int64_t ival(const Value& v) { return v.kind == Kind::Bool ? (v.b ? 1 : 0) : v.i; }
static double fval(const Value& v) { return v.kind == Kind::Float ? v.f : static_cast<double>(ival(v)); }

Value Evaluator::binary(const std::string& op, const Value& a, const Value& b) {
  if (op == "~") {
    std::string s = to_str(a) + to_str(b);
    check_size(s.size());
    return Value::string(std::move(s));
  }
  if (a.kind == Kind::Undefined) fail_undefined(a);
  if (b.kind == Kind::Undefined) fail_undefined(b);
  auto unsupported = [&]() -> Value {
    fail("unsupported operand type(s) for " + op + ": '" + type_name(a) + "' and '" + type_name(b) + "'");
  };
  if (numeric(a) && numeric(b)) {
    if (integral(a) && integral(b)) {
      const int64_t x = ival(a), y = ival(b);
      int64_t r = 0;
      if (op == "+") {
        if (__builtin_add_overflow(x, y, &r)) fail_limit("integer overflow");
        return Value::integer(r);
      }
      if (op == "-") {
        if (__builtin_sub_overflow(x, y, &r)) fail_limit("integer overflow");
        return Value::integer(r);
      }
      if (op == "*") {
        if (__builtin_mul_overflow(x, y, &r)) fail_limit("integer overflow");
        return Value::integer(r);
      }
      if (op == "/") {
        if (y == 0) fail("division by zero");
        return Value::number(static_cast<double>(x) / static_cast<double>(y));
      }
      if (op == "//" || op == "%") {
        if (y == 0) fail("integer division or modulo by zero");
        if (x == INT64_MIN && y == -1) fail_limit("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      if (op == "**") {
        if (y < 0) return Value::number(std::pow(static_cast<double>(x), static_cast<double>(y)));
        int64_t acc = 1;
        for (int64_t k = 0; k < y; ++k) {
          if (__builtin_mul_overflow(acc, x, &acc)) fail_limit("integer overflow");
          if (acc == 0 || acc == 1) break;
          if (acc == -1) {
            acc = ((y - k - 1) % 2 == 0) ? -1 : 1;
            break;
          }
        }
        return Value::integer(acc);
      }
    } else {
      const double x = fval(a), y = fval(b);
      if (op == "+") return Value::number(x + y);
      if (op == "-") return Value::number(x - y);
      if (op == "*") return Value::number(x * y);
      if (op == "/") {
        if (y == 0) fail("float division by zero");
        return Value::number(x / y);
      }
      if (op == "//" || op == "%") {
        if (y == 0) fail("float modulo");
        double mod = std::fmod(x, y);
        double div = (x - mod) / y;
        if (mod != 0 && ((y < 0) != (mod < 0))) {
          mod += y;
          div -= 1;
        }
        if (op == "%") return Value::number(mod);
        double fd = std::floor(div);
        if (div - fd > 0.5) fd += 1;
        return Value::number(fd);
      }
      if (op == "**") return Value::number(std::pow(x, y));
    }
    return unsupported();
  }
  if (op == "+") {
    if (a.kind == Kind::String && b.kind == Kind::String) {
      check_size(a.s.size() + b.s.size());
      return Value::string(a.s + b.s);
    }
    if (a.kind == Kind::String) fail("can only concatenate str (not \"" + type_name(b) + "\") to str");
    if (a.kind == Kind::List && b.kind == Kind::List &&
        (a.arr->tag == ListTag::Tuple) == (b.arr->tag == ListTag::Tuple) && a.arr->tag != ListTag::Keys) {
      check_size((a.arr->items.size() + b.arr->items.size()) * sizeof(Value));  // before building it
      std::vector<Value> items = a.arr->items;
      items.insert(items.end(), b.arr->items.begin(), b.arr->items.end());
      return Value::list(std::move(items), a.arr->tag);
    }
    if (a.kind == Kind::List)
      fail("can only concatenate " + type_name(a) + " (not \"" + type_name(b) + "\") to " + type_name(a));
    return unsupported();
  }
  if (op == "*") {
    const Value* seq = (a.kind == Kind::String || a.kind == Kind::List) ? &a : &b;
    const Value* n = seq == &a ? &b : &a;
    if ((seq->kind == Kind::String || seq->kind == Kind::List) && integral(*n)) {
      const int64_t count = std::max<int64_t>(0, ival(*n));
      const size_t unit = seq->kind == Kind::String ? seq->s.size() : seq->arr->items.size() * sizeof(Value);
      if (count > 0 && unit > 0 && static_cast<uint64_t>(count) > limits_.max_output_bytes / unit)
        fail_limit("repetition larger than " + std::to_string(limits_.max_output_bytes) + " bytes");
      check_size(unit * static_cast<size_t>(count));
      if (seq->kind == Kind::String) {
        std::string out;
        for (int64_t k = 0; k < count; ++k) out += seq->s;
        return Value::string(std::move(out));
      }
      std::vector<Value> items;
      for (int64_t k = 0; k < count; ++k) items.insert(items.end(), seq->arr->items.begin(), seq->arr->items.end());
      return Value::list(std::move(items), seq->arr->tag);
    }
    return unsupported();
  }
  if (op == "%" && a.kind == Kind::String) {
    std::string s = percent_format(a.s, b);
    check_size(s.size());
    return Value::string(std::move(s));
  }
  return unsupported();
}

// ---------------------------------------------------------------------------------------------
// globals

void add_builtin_globals(Frame& g) {
  g.vars["range"] = Value::callable("range", [](Evaluator& ev, CallArgs& a) {
    if (!a.kw.empty()) fail("range() takes no keyword arguments");
    if (a.pos.empty() || a.pos.size() > 3) fail("range expected 1 to 3 arguments, got " + std::to_string(a.pos.size()));
    for (const auto& v : a.pos) {
      if (v.kind == Kind::Undefined) fail_undefined(v);
      if (v.kind != Kind::Int && v.kind != Kind::Bool)
        fail("'" + type_name(v) + "' object cannot be interpreted as an integer");
    }
    auto iv = [](const Value& v) { return v.kind == Kind::Bool ? (v.b ? int64_t{1} : int64_t{0}) : v.i; };
    int64_t start = 0, stop, step = 1;
    if (a.pos.size() == 1) {
      stop = iv(a.pos[0]);
    } else {
      start = iv(a.pos[0]);
      stop = iv(a.pos[1]);
      if (a.pos.size() == 3) step = iv(a.pos[2]);
    }
    if (step == 0) fail("range() arg 3 must not be zero");
    // ImmutableSandboxedEnvironment's safe_range refuses more than MAX_RANGE items.
    const double n = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) / static_cast<double>(step));
    if (n > 100000) fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    std::vector<Value> out;
    if (step > 0)
      for (int64_t k = start; k < stop; k += step) out.push_back(Value::integer(k));
    else
      for (int64_t k = start; k > stop; k += step) out.push_back(Value::integer(k));
    ev.charge(out.size());
    return Value::list(std::move(out));
  });
  auto make_dict = [](CallArgs& a, const char* what) {
    auto o = std::make_shared<Object>();
    if (a.pos.size() > 1) fail(std::string(what) + " expected at most 1 positional argument");
    if (a.pos.size() == 1) {
      const Value& src = a.pos[0];
      if (src.kind == Kind::Dict || src.kind == Kind::Namespace) {
        for (const auto& kv : src.obj->items) o->set(kv.first, kv.second);
      } else {
        for (const auto& pair : iterate(src)) {
          std::vector<Value> kv = iterate(pair);
          if (kv.size() != 2) fail("dictionary update sequence element has length " + std::to_string(kv.size()) + "; 2 is required");
          o->set(kv[0], kv[1]);
        }
      }
    }
    for (auto& [k, v] : a.kw) o->set(Value::string(k), v);
    return o;
  };
  g.vars["dict"] = Value::callable("dict", [make_dict](Evaluator&, CallArgs& a) { return Value::dict(make_dict(a, "dict")); });
  g.vars["namespace"] = Value::callable("namespace", [make_dict](Evaluator&, CallArgs& a) {
    auto o = make_dict(a, "namespace");
    for (const auto& kv : o->items)
      if (kv.second.holds_namespace())
        fail("storing a namespace (or loop) inside a namespace is not supported by kiln's template engine");
    return Value::namespace_(o);
  });
  g.vars["raise_exception"] = Value::callable("raise_exception", [](Evaluator&, CallArgs& a) -> Value {
    std::string msg = a.pos.empty() ? (a.kw.empty() ? std::string() : to_str(a.kw[0].second)) : to_str(a.pos[0]);
    throw TemplateError(TemplateError::Kind::Raised, msg);
  });
  g.vars["strftime_now"] = Value::callable("strftime_now", [](Evaluator&, CallArgs& a) {
    if (a.pos.size() != 1 || a.pos[0].kind != Kind::String) fail("strftime_now() takes one format string");
    const std::time_t now = std::time(nullptr);
    std::tm tm{};
    localtime_r(&now, &tm);
    char buf[512];
    const size_t n = a.pos[0].s.size() < 200 ? std::strftime(buf, sizeof buf, a.pos[0].s.c_str(), &tm) : 0;
    return Value::string(std::string(buf, n));
  });
}

}  // namespace kiln::tmpl
