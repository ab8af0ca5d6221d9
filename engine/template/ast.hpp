// Syntax tree of a parsed template. One node type each for expressions and statements keeps the
// parser and evaluator small; `kind` says which fields are used.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "template/value.hpp"

namespace kiln::tmpl {

struct Expr;
struct Stmt;
using ExprPtr = std::unique_ptr<Expr>;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

enum class EK : uint8_t {
  Literal,   // value
  Name,      // name
  Attr,      // a[0].name
  Item,      // a[0][a[1]]
  Slice,     // a[0][a[1]:a[2]:a[3]] (null parts allowed)
  Call,      // a[0](a[1..] , kw_names for the trailing ones)
  Filter,    // a[0] | name(a[1..])
  Test,      // a[0] is [not] name(a[1..])
  Unary,     // op a[0]: "-", "+", "not"
  Binary,    // a[0] op a[1]: + - * / // % ** ~ and or
  Compare,   // a[0] ops[k] a[k+1] ...: == != < <= > >= in notin
  CondExpr,  // a[1] if a[0] else a[2] (a[2] may be null)
  List,      // [a...]
  Tuple,     // (a...)
  Dict,      // {a[0]: a[1], ...}
};

struct Expr {
  EK kind;
  int line = 0;
  std::string name;               // Name, Attr, Call/Filter/Test name, operator
  Value value;                    // Literal
  std::vector<ExprPtr> a;         // operands
  std::vector<std::string> kw;    // keyword names for the last kw.size() arguments
  std::vector<std::string> ops;   // Compare operators
  bool negate = false;            // Test: "is not"
};

enum class SK : uint8_t {
  Data,       // text
  Print,      // expr
  If,         // conds[i] -> bodies[i]; else_body
  For,        // targets in expr [if cond]: body, else_body
  Set,        // targets = expr; or targets.attr (ns_attr) = expr
  SetBlock,   // targets[0] = captured body, filters
  Macro,      // name(params = defaults): body
  CallBlock,  // expr (a Call) with caller(params): body
  FilterBlock,// filters applied to captured body
  With,       // targets = values: body
  Break,
  Continue,
};

struct Param {
  std::string name;
  ExprPtr def;  // may be null
};

struct Stmt {
  SK kind;
  int line = 0;
  std::string text;                      // Data
  ExprPtr expr;                          // Print, For iterable, Set value, CallBlock call
  ExprPtr cond;                          // For filter
  std::vector<std::string> targets;      // For/Set/SetBlock names
  std::string ns_attr;                   // Set: `set ns.attr = ...`
  std::vector<ExprPtr> conds;            // If
  std::vector<Body> bodies;              // If branches
  Body body, else_body;
  std::string name;                      // Macro name
  std::vector<Param> params;             // Macro / CallBlock caller params
  std::vector<ExprPtr> filters;          // FilterBlock / SetBlock: Filter nodes whose a[0] is null
  std::vector<ExprPtr> values;           // With
  bool uses_varargs = false, uses_kwargs = false, uses_caller = false;  // Macro
};

/** A parsed template: owns the tree that macros and the evaluator point into. */
struct Program {
  Body body;
};

}  // namespace kiln::tmpl
