// Runtime values of the Jinja engine, modelled on the Python objects Jinja2 sees when transformers
// renders a chat template: None/bool/int/float/str/list/tuple/dict, jinja2 Undefined, namespace(),
// loop, and callables (macros, builtins, bound str/dict methods). Printing follows Python str()/repr().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "template/template.hpp"

namespace kiln::tmpl {

class Evaluator;
struct Value;

enum class Kind : uint8_t { Undefined, None, Bool, Int, Float, String, List, Dict, Namespace, Loop, Callable };
/** Lists also stand for tuples and dict views; only printing and equality look at the tag. */
enum class ListTag : uint8_t { List, Tuple, Keys, Values, Items };

/** Containers nested deeper than this are refused (recursive printing/destruction stay bounded). */
inline constexpr int kMaxNesting = 256;

struct Array {
  std::vector<Value> items;
  ListTag tag = ListTag::List;
  int depth = 1;
  bool has_ns = false;  ///< holds a namespace/loop somewhere (those may not go into a namespace: no cycles)
};

/** Insertion-ordered dict (Python 3.7+ semantics) with a hash index on the key's canonical form. */
struct Object {
  std::vector<std::pair<Value, Value>> items;
  std::unordered_map<std::string, size_t> str_index;  ///< str keys (the common case: no key building)
  std::unordered_map<std::string, size_t> index;      ///< other keys by hash_key()
  int depth = 1;
  bool has_ns = false;
  const Value* find(const Value& key) const;
  const Value* find(const std::string& str_key) const;
  void set(const Value& key, Value v);
};

struct CallArgs {
  std::vector<Value> pos;
  std::vector<std::pair<std::string, Value>> kw;
};

struct Callable {
  std::string name;
  std::string repr;     ///< what printing it shows
  bool has_ns = false;  ///< captures a value holding a namespace
  std::function<Value(Evaluator&, CallArgs&)> fn;
};

struct Value {
  Kind kind = Kind::Undefined;
  bool b = false;
  int64_t i = 0;
  double f = 0;
  std::string s;  ///< String: the text. Undefined: the error Jinja gives when it is used ("'x' is undefined")
  std::shared_ptr<Array> arr;
  std::shared_ptr<Object> obj;  ///< Dict, Namespace and Loop attributes
  std::shared_ptr<Callable> fn;

  static Value undefined(std::string message = {});
  static Value none();
  static Value boolean(bool v);
  static Value integer(int64_t v);
  static Value number(double v);
  static Value string(std::string v);
  static Value list(std::vector<Value> items, ListTag tag = ListTag::List);
  static Value dict(std::shared_ptr<Object> o);
  static Value empty_dict();
  static Value namespace_(std::shared_ptr<Object> o);
  static Value callable(std::string name, std::function<Value(Evaluator&, CallArgs&)> fn, bool has_ns = false);

  bool is_undefined() const { return kind == Kind::Undefined; }
  bool is_none() const { return kind == Kind::None; }
  bool is_string() const { return kind == Kind::String; }
  bool is_number() const { return kind == Kind::Int || kind == Kind::Float || kind == Kind::Bool; }
  bool is_list() const { return kind == Kind::List; }
  bool is_dict() const { return kind == Kind::Dict; }
  int nesting() const;
  bool holds_namespace() const;
};

// ---- errors (line 0: the evaluator fills in the current line) ----
[[noreturn]] void fail(const std::string& message);
[[noreturn]] void fail_limit(const std::string& message);
/** Using an Undefined where Jinja raises UndefinedError. */
[[noreturn]] void fail_undefined(const Value& v);

// ---- Python semantics ----
bool truthy(const Value& v);
std::string type_name(const Value& v);  ///< Python's type(v).__name__ ('str', 'NoneType', ...)
std::string to_str(const Value& v);     ///< str(v)
std::string repr(const Value& v);       ///< repr(v)
std::string repr_string(const std::string& s);
std::string format_float(double d);  ///< Python repr(float)
bool equals(const Value& a, const Value& b);
/** -1/0/1 like Python's <, raising TypeError text for unorderable pairs. */
int compare(const Value& a, const Value& b, const char* op = "<");
/** Canonical hash key (True == 1 == 1.0); throws "unhashable type" for lists/dicts. */
std::string hash_key(const Value& v);
/** len(); throws for values without a length. */
int64_t length(const Value& v);
/** Iterates like Python iter(): list items, dict keys, string characters; Undefined is empty. */
std::vector<Value> iterate(const Value& v);

struct JsonOptions {
  bool ensure_ascii = false;
  bool has_indent = false;
  std::string indent;
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
};
/** json.dumps(v, ...) as transformers' tojson calls it. */
std::string to_json(const Value& v, const JsonOptions& opt);

}  // namespace kiln::tmpl
