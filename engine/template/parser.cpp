#include "template/parser.hpp"

#include <functional>

#include "template/lexer.hpp"

namespace kiln::tmpl {
namespace {

// Bounds recursion on hostile input such as "((((((...": Python's own parser stops there too.
constexpr int kMaxParseDepth = 96;

class Parser {
 public:
  explicit Parser(std::vector<Token> toks) : t_(std::move(toks)) {}

  std::unique_ptr<Program> run() {
    auto prog = std::make_unique<Program>();
    std::vector<std::string> none;
    parse_body(prog->body, none);
    if (cur().type != Tok::Eof) fail_here("unexpected " + describe(cur()));
    return prog;
  }

 private:
  // ---- token helpers ----
  const Token& cur() const { return t_[pos_]; }
  const Token& look(size_t k = 1) const { return t_[std::min(pos_ + k, t_.size() - 1)]; }
  void next() {
    if (pos_ + 1 < t_.size()) ++pos_;
  }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().text == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().text == n; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* n) {
    if (!is_name(n)) return false;
    next();
    return true;
  }
  [[noreturn]] void fail_here(const std::string& msg) const {
    throw TemplateError(TemplateError::Kind::Syntax, msg, cur().line);
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Op:
      case Tok::Name: return "'" + t.text + "'";
      case Tok::String: return "string";
      case Tok::Int:
      case Tok::Float: return "number";
      default: return std::string("'") + token_description(t) + "'";
    }
  }
  void expect_op(const char* op) {
    if (cur().type == Tok::Eof)
      fail_here(std::string("unexpected end of template, expected '") + op + "'");
    if (!skip_op(op)) fail_here("unexpected " + describe(cur()) + ", expected '" + op + "'");
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_here("expected end of statement block ('%}'), got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_here("expected a name, got " + describe(cur()));
    std::string n = cur().text;
    next();
    return n;
  }

  struct DepthGuard {
    Parser& p;
    explicit DepthGuard(Parser& pp) : p(pp) {
      if (++p.depth_ > kMaxParseDepth) p.fail_here("template nested too deeply (limit " + std::to_string(kMaxParseDepth) + ")");
    }
    ~DepthGuard() { --p.depth_; }
  };

  ExprPtr node(EK k, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line;
    return e;
  }

  // ---- statements ----
  // Parses until a block tag whose name is in `ends` (left unconsumed: cur() is that name).
  void parse_body(Body& body, const std::vector<std::string>& ends) {
    DepthGuard g(*this);
    while (true) {
      const Token& tk = cur();
      if (tk.type == Tok::Eof) {
        if (!ends.empty()) {
          std::string want;
          for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
          fail_here("unexpected end of template; Jinja was looking for " + want);
        }
        return;
      }
      if (tk.type == Tok::Data) {
        auto s = std::make_unique<Stmt>();
        s->kind = SK::Data;
        s->line = tk.line;
        s->text = tk.text;
        body.push_back(std::move(s));
        next();
      } else if (tk.type == Tok::VarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = SK::Print;
        s->line = tk.line;
        s->expr = parse_tuple(true, {}, false);
        if (cur().type != Tok::VarEnd) fail_here("unexpected " + describe(cur()) + ", expected end of print statement ('}}')");
        next();
        body.push_back(std::move(s));
      } else if (tk.type == Tok::BlockBegin) {
        next();
        if (cur().type != Tok::Name) fail_here("expected a statement name after '{%', got " + describe(cur()));
        for (const auto& e : ends)
          if (cur().text == e) return;
        parse_statement(body, ends);
      } else {
        fail_here("unexpected " + describe(tk));
      }
    }
  }

  // Consumes `endxxx %}` (parse_body stopped on the end name).
  void end_tag() {
    next();
    expect_block_end();
  }

  void parse_statement(Body& out, const std::vector<std::string>& outer_ends) {
    const std::string n = cur().text;
    const int line = cur().line;
    auto s = std::make_unique<Stmt>();
    s->line = line;
    next();
    if (n == "for") {
      s->kind = SK::For;
      s->targets = parse_targets("in");
      if (!skip_name("in")) fail_here("expected 'in' in for loop, got " + describe(cur()));
      s->expr = parse_tuple(false, {"recursive", "if"}, false);
      if (skip_name("if")) s->cond = parse_expression(true);
      if (is_name("recursive")) fail_here("recursive for loops are not supported by kiln's template engine");
      expect_block_end();
      ++loop_depth_;
      parse_body(s->body, {"endfor", "else"});
      --loop_depth_;
      if (is_name("else")) {
        next();
        expect_block_end();
        parse_body(s->else_body, {"endfor"});
      }
      end_tag();
    } else if (n == "if") {
      s->kind = SK::If;
      s->conds.push_back(parse_tuple(false, {}, false));
      expect_block_end();
      s->bodies.emplace_back();
      parse_body(s->bodies.back(), {"elif", "else", "endif"});
      while (true) {
        if (is_name("elif")) {
          next();
          s->conds.push_back(parse_tuple(false, {}, false));
          expect_block_end();
          s->bodies.emplace_back();
          parse_body(s->bodies.back(), {"elif", "else", "endif"});
        } else if (is_name("else")) {
          next();
          expect_block_end();
          parse_body(s->else_body, {"endif"});
        } else {
          break;
        }
      }
      end_tag();
    } else if (n == "set") {
      if (cur().type == Tok::Name && look().type == Tok::Op && look().text == ".") {
        s->targets.push_back(cur().text);
        next();
        next();
        s->ns_attr = expect_name();
        expect_op("=");
        s->kind = SK::Set;
        s->expr = parse_tuple(true, {}, false);
        expect_block_end();
      } else {
        s->targets = parse_targets("=");
        if (skip_op("=")) {
          s->kind = SK::Set;
          s->expr = parse_tuple(true, {}, false);
          expect_block_end();
        } else {
          if (s->targets.size() != 1) fail_here("a block set assigns exactly one name");
          s->kind = SK::SetBlock;
          while (skip_op("|")) s->filters.push_back(parse_filter(nullptr));
          expect_block_end();
          parse_body(s->body, {"endset"});
          end_tag();
        }
      }
    } else if (n == "macro") {
      s->kind = SK::Macro;
      s->name = expect_name();
      parse_params(s->params);
      expect_block_end();
      const int saved = loop_depth_;
      loop_depth_ = 0;
      parse_body(s->body, {"endmacro"});
      loop_depth_ = saved;
      end_tag();
      scan_macro(*s);
    } else if (n == "call") {
      s->kind = SK::CallBlock;
      if (is_op("(")) parse_params(s->params);
      s->expr = parse_expression(true);
      if (s->expr->kind != EK::Call) fail_here("expected a macro call in {% call %}");
      expect_block_end();
      parse_body(s->body, {"endcall"});
      end_tag();
      s->name = "caller";
      scan_macro(*s);
    } else if (n == "filter") {
      s->kind = SK::FilterBlock;
      do {
        s->filters.push_back(parse_filter(nullptr));
      } while (skip_op("|"));
      expect_block_end();
      parse_body(s->body, {"endfilter"});
      end_tag();
    } else if (n == "with") {
      s->kind = SK::With;
      while (cur().type != Tok::BlockEnd) {
        if (!s->targets.empty()) expect_op(",");
        s->targets.push_back(expect_name());
        expect_op("=");
        s->values.push_back(parse_expression(true));
      }
      expect_block_end();
      parse_body(s->body, {"endwith"});
      end_tag();
    } else if (n == "break" || n == "continue") {
      if (loop_depth_ == 0) fail_here("'" + n + "' outside of a for loop");
      s->kind = n == "break" ? SK::Break : SK::Continue;
      expect_block_end();
    } else if (n == "generation") {
      // transformers' AssistantTracker tag: renders its body unchanged.
      expect_block_end();
      parse_body(out, {"endgeneration"});
      end_tag();
      return;
    } else if (n == "include" || n == "import" || n == "from" || n == "extends" || n == "block") {
      throw TemplateError(TemplateError::Kind::Syntax,
                          "'{% " + n + " %}' is not supported: chat templates must be self-contained", line);
    } else {
      std::string msg = "Encountered unknown tag '" + n + "'.";
      if (!outer_ends.empty()) {
        msg += " Jinja was looking for the following tags: ";
        for (size_t k = 0; k < outer_ends.size(); ++k) msg += (k ? " or '" : "'") + outer_ends[k] + "'";
        msg += ".";
      }
      throw TemplateError(TemplateError::Kind::Syntax, msg, line);
    }
    out.push_back(std::move(s));
  }

  std::vector<std::string> parse_targets(const char* end) {
    std::vector<std::string> names;
    const bool paren = skip_op("(");
    while (true) {
      names.push_back(expect_name());
      if (!skip_op(",")) break;
      if ((paren && is_op(")")) || is_name(end) || is_op(end)) break;
    }
    if (paren) expect_op(")");
    return names;
  }

  void parse_params(std::vector<Param>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (skip_op("=")) p.def = parse_expression(true);
      else if (!params.empty() && params.back().def)
        fail_here("non-default argument follows default argument");
      params.push_back(std::move(p));
    }
    expect_op(")");
  }

  // Jinja lets a macro take extra arguments only when its body mentions varargs/kwargs.
  void scan_macro(Stmt& m) {
    std::function<void(const Expr*)> ex = [&](const Expr* e) {
      if (!e) return;
      if (e->kind == EK::Name) {
        if (e->name == "varargs") m.uses_varargs = true;
        if (e->name == "kwargs") m.uses_kwargs = true;
        if (e->name == "caller") m.uses_caller = true;
      }
      for (const auto& c : e->a) ex(c.get());
    };
    std::function<void(const Body&)> st = [&](const Body& b) {
      for (const auto& s : b) {
        ex(s->expr.get());
        ex(s->cond.get());
        for (const auto& c : s->conds) ex(c.get());
        for (const auto& bb : s->bodies) st(bb);
        for (const auto& f : s->filters) ex(f.get());
        for (const auto& v : s->values) ex(v.get());
        for (const auto& p : s->params) ex(p.def.get());
        st(s->body);
        st(s->else_body);
      }
    };
    st(m.body);
  }

  // ---- expressions ----
  bool tuple_end(const std::vector<std::string>& extra) const {
    const Token& t = cur();
    if (t.type == Tok::VarEnd || t.type == Tok::BlockEnd || t.type == Tok::Eof) return true;
    if (t.type == Tok::Op && t.text == ")") return true;
    if (t.type == Tok::Name)
      for (const auto& e : extra)
        if (t.text == e) return true;
    return false;
  }

  ExprPtr parse_tuple(bool with_condexpr, const std::vector<std::string>& extra, bool explicit_parens) {
    const int line = cur().line;
    std::vector<ExprPtr> args;
    bool is_tuple = false;
    while (true) {
      if (!args.empty()) expect_op(",");
      if (tuple_end(extra)) break;
      args.push_back(parse_expression(with_condexpr));
      if (is_op(","))
        is_tuple = true;
      else
        break;
    }
    if (!is_tuple) {
      if (!args.empty()) return std::move(args[0]);
      if (!explicit_parens) fail_here("Expected an expression, got " + describe(cur()));
    }
    auto t = node(EK::Tuple, line);
    t->a = std::move(args);
    return t;
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard g(*this);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    const int line = cur().line;
    ExprPtr e = parse_or();
    while (skip_name("if")) {
      auto c = node(EK::CondExpr, line);
      c->a.push_back(parse_or());
      c->a.push_back(std::move(e));
      c->a.push_back(skip_name("else") ? parse_condexpr() : nullptr);
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(const std::string& op, ExprPtr l, ExprPtr r, int line) {
    auto b = node(EK::Binary, line);
    b->name = op;
    b->a.push_back(std::move(l));
    b->a.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const int line = cur().line;
      next();
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const int line = cur().line;
      next();
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard g(*this);
      auto u = node(EK::Unary, cur().line);
      next();
      u->name = "not";
      u->a.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = cur().line;
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().text == "==" || cur().text == "!=" || cur().text == "<" || cur().text == "<=" || cur().text == ">" ||
           cur().text == ">=")) {
        op = cur().text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && look().type == Tok::Name && look().text == "in") {
        op = "notin";
        next();
        next();
      } else {
        break;
      }
      if (!cmp) {
        cmp = node(EK::Compare, line);
        cmp->a.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->a.push_back(parse_math1());
    }
    return cmp ? std::move(cmp) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      l = binary(op, std::move(l), parse_concat(), line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const int line = cur().line;
      next();
      l = binary("~", std::move(l), parse_math2(), line);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const std::string op = cur().text;
      const int line = cur().line;
      next();
      l = binary(op, std::move(l), parse_pow(), line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const int line = cur().line;
      next();
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    DepthGuard g(*this);
    ExprPtr n;
    if (is_op("-") || is_op("+")) {
      auto u = node(EK::Unary, cur().line);
      u->name = cur().text;
      next();
      u->a.push_back(parse_unary(false));
      n = std::move(u);
    } else {
      n = parse_primary();
    }
    n = parse_postfix(std::move(n));
    if (with_filter) n = parse_filter_expr(std::move(n));
    return n;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    auto lit = [&](Value v) {
      auto e = node(EK::Literal, t.line);
      e->value = std::move(v);
      return e;
    };
    switch (t.type) {
      case Tok::Name: {
        ExprPtr e;
        if (t.text == "true" || t.text == "True") e = lit(Value::boolean(true));
        else if (t.text == "false" || t.text == "False") e = lit(Value::boolean(false));
        else if (t.text == "none" || t.text == "None") e = lit(Value::none());
        else {
          e = node(EK::Name, t.line);
          e->name = t.text;
        }
        next();
        return e;
      }
      case Tok::String: {
        std::string s;
        const int line = t.line;
        while (cur().type == Tok::String) {
          s += cur().text;
          next();
        }
        auto e = node(EK::Literal, line);
        e->value = Value::string(std::move(s));
        return e;
      }
      case Tok::Int: {
        auto e = lit(Value::integer(t.ival));
        next();
        return e;
      }
      case Tok::Float: {
        auto e = lit(Value::number(t.fval));
        next();
        return e;
      }
      case Tok::Op:
        if (t.text == "(") {
          next();
          ExprPtr e = parse_tuple(true, {}, true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          auto e = node(EK::List, t.line);
          next();
          while (!is_op("]")) {
            if (!e->a.empty()) expect_op(",");
            if (is_op("]")) break;
            e->a.push_back(parse_expression(true));
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          auto e = node(EK::Dict, t.line);
          next();
          while (!is_op("}")) {
            if (!e->a.empty()) expect_op(",");
            if (is_op("}")) break;
            e->a.push_back(parse_expression(true));
            expect_op(":");
            e->a.push_back(parse_expression(true));
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    if (t.type == Tok::Eof) fail_here("unexpected end of template, expected an expression");
    fail_here("unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr n) {
    while (true) {
      if (is_op(".")) {
        const int line = cur().line;
        next();
        if (cur().type == Tok::Name) {
          auto e = node(EK::Attr, line);
          e->name = cur().text;
          e->a.push_back(std::move(n));
          next();
          n = std::move(e);
        } else if (cur().type == Tok::Int) {
          auto e = node(EK::Item, line);
          e->a.push_back(std::move(n));
          auto k = node(EK::Literal, line);
          k->value = Value::integer(cur().ival);
          e->a.push_back(std::move(k));
          next();
          n = std::move(e);
        } else {
          fail_here("expected name or number after '.'");
        }
      } else if (is_op("[")) {
        const int line = cur().line;
        next();
        std::vector<ExprPtr> args;
        while (!is_op("]")) {
          if (!args.empty()) expect_op(",");
          if (is_op("]")) break;
          args.push_back(parse_subscribed());
        }
        expect_op("]");
        if (args.empty()) fail_here("expected a subscript inside '[]'");
        auto e = node(EK::Item, line);
        e->a.push_back(std::move(n));
        if (args.size() == 1) {
          e->a.push_back(std::move(args[0]));
        } else {
          auto t = node(EK::Tuple, line);
          t->a = std::move(args);
          e->a.push_back(std::move(t));
        }
        n = std::move(e);
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  ExprPtr parse_subscribed() {
    const int line = cur().line;
    std::vector<ExprPtr> parts;
    if (is_op(":")) {
      next();
      parts.push_back(nullptr);
    } else {
      ExprPtr e = parse_expression(true);
      if (!is_op(":")) return e;
      next();
      parts.push_back(std::move(e));
    }
    if (is_op(":")) parts.push_back(nullptr);
    else if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression(true));
    else parts.push_back(nullptr);
    if (is_op(":")) {
      next();
      if (!is_op("]") && !is_op(",")) parts.push_back(parse_expression(true));
      else parts.push_back(nullptr);
    } else {
      parts.push_back(nullptr);
    }
    auto s = node(EK::Slice, line);
    s->a.push_back(nullptr);
    for (auto& p : parts) s->a.push_back(std::move(p));
    return s;
  }

  // Arguments into e->a (after any existing operands) and e->kw.
  void parse_call_args(Expr& e) {
    expect_op("(");
    bool comma = false;
    while (!is_op(")")) {
      if (comma) {
        expect_op(",");
        if (is_op(")")) break;
      }
      if (is_op("*") || is_op("**")) fail_here("*args / **kwargs in calls are not supported");
      if (cur().type == Tok::Name && look().type == Tok::Op && look().text == "=") {
        e.kw.push_back(cur().text);
        next();
        next();
        e.a.push_back(parse_expression(true));
      } else {
        if (!e.kw.empty()) fail_here("invalid syntax for function call expression: positional argument after keyword");
        e.a.push_back(parse_expression(true));
      }
      comma = true;
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto e = node(EK::Call, cur().line);
    e->a.push_back(std::move(callee));
    parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter(ExprPtr target) {
    auto e = node(EK::Filter, cur().line);
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    if (!has_filter(name)) fail_here("No filter named '" + name + "'.");
    e->name = name;
    e->a.push_back(std::move(target));
    if (is_op("(")) parse_call_args(*e);
    return e;
  }

  ExprPtr parse_filter_expr(ExprPtr n) {
    while (true) {
      if (is_op("|")) {
        next();
        n = parse_filter(std::move(n));
      } else if (is_name("is")) {
        n = parse_test(std::move(n));
      } else if (is_op("(")) {
        n = parse_call(std::move(n));
      } else {
        return n;
      }
    }
  }

  ExprPtr parse_test(ExprPtr target) {
    auto e = node(EK::Test, cur().line);
    next();  // 'is'
    if (skip_name("not")) e->negate = true;
    std::string name = expect_name();
    while (is_op(".")) {
      next();
      name += "." + expect_name();
    }
    if (!has_test(name)) fail_here("No test named '" + name + "'.");
    e->name = name;
    e->a.push_back(std::move(target));
    const Token& t = cur();
    if (is_op("(")) {
      parse_call_args(*e);
    } else if ((t.type == Tok::Name || t.type == Tok::String || t.type == Tok::Int || t.type == Tok::Float ||
                (t.type == Tok::Op && (t.text == "[" || t.text == "{"))) &&
               !(t.type == Tok::Name && (t.text == "else" || t.text == "or" || t.text == "and"))) {
      if (is_name("is")) fail_here("You cannot chain multiple tests with is");
      ExprPtr arg = parse_primary();
      e->a.push_back(parse_postfix(std::move(arg)));
    }
    return e;
  }

  std::vector<Token> t_;
  size_t pos_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

std::unique_ptr<Program> parse(std::string_view source) { return Parser(lex(source)).run(); }

}  // namespace kiln::tmpl
