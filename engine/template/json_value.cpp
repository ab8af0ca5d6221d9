#include "template/json_value.hpp"

namespace kiln::tmpl {

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > kMaxNesting) fail_limit("JSON input nested deeper than " + std::to_string(kMaxNesting) + " levels");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      // Python ints are unbounded; ours are 64-bit, so larger ones become floats.
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value::number(static_cast<double>(u));
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      auto o = std::make_shared<Object>();
      for (const auto& [k, v] : j.items()) o->set(Value::string(k), from_json(v, depth + 1));
      return Value::dict(o);
    }
    default: fail("unsupported JSON value (binary)");
  }
}

}  // namespace kiln::tmpl
