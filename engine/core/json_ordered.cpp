#include "core/json_ordered.hpp"

#include <string>
#include <unordered_map>
#include <vector>

namespace kiln {
namespace {

using Members = OrderedJson::object_t::Container;

constexpr const char* kTooDeep = "JSON nests deeper than ";

/**
 * Room for one more member. The members are pair<const string, json>: the const key makes the
 * pair's move throwing, so std::vector would grow by copying every member's whole subtree (deep
 * JSON would cost depth squared, and recursion). Here the keys are copied and the values moved.
 */
void reserve_one(Members& m) {
  if (m.size() < m.capacity()) return;
  Members grown;
  grown.reserve(m.empty() ? 4 : 2 * m.size());
  for (auto& [k, v] : m) grown.emplace_back(k, std::move(v));
  m.swap(grown);
}

/** nlohmann SAX events to an ordered_json tree; each open object has a hash index of its keys. */
class Builder {
 public:
  using number_integer_t = OrderedJson::number_integer_t;
  using number_unsigned_t = OrderedJson::number_unsigned_t;
  using number_float_t = OrderedJson::number_float_t;
  using string_t = OrderedJson::string_t;
  using binary_t = OrderedJson::binary_t;

  Builder(OrderedJson& root, size_t max_depth) : root_(root), max_depth_(max_depth) {}
  bool too_deep_ = false;  ///< parsing stopped at max_depth

  bool null() { return put(OrderedJson(nullptr)); }
  bool boolean(bool v) { return put(OrderedJson(v)); }
  bool number_integer(number_integer_t v) { return put(OrderedJson(v)); }
  bool number_unsigned(number_unsigned_t v) { return put(OrderedJson(v)); }
  bool number_float(number_float_t v, const string_t&) { return put(OrderedJson(v)); }
  bool string(string_t& v) { return put(OrderedJson(std::move(v))); }
  bool binary(binary_t& v) { return put(OrderedJson::binary(std::move(v))); }
  bool start_object(std::size_t) {
    if (open_.size() >= max_depth_) return too_deep_ = true, false;
    OrderedJson* at = slot(OrderedJson::object());
    open_.push_back({at, {}});
    return true;
  }
  bool key(string_t& k) {
    Open& o = open_.back();
    auto& items = static_cast<Members&>(o.value->get_ref<OrderedJson::object_t&>());
    auto [it, fresh] = o.index.try_emplace(k, items.size());
    if (fresh) reserve_one(items), items.emplace_back(std::move(k), OrderedJson());
    pending_ = &items[it->second].second;  // a repeated key: its first slot takes the new value
    return true;
  }
  bool end_object() {
    open_.pop_back();
    return true;
  }
  bool start_array(std::size_t) {
    if (open_.size() >= max_depth_) return too_deep_ = true, false;
    OrderedJson* at = slot(OrderedJson::array());
    open_.push_back({at, {}});
    return true;
  }
  bool end_array() {
    open_.pop_back();
    return true;
  }
  [[noreturn]] bool parse_error(std::size_t, const std::string&, const OrderedJson::exception& e) {
    // What nlohmann made, as its own parse does: a syntax error with its position, or a number
    // out of range.
    if (const auto* pe = dynamic_cast<const OrderedJson::parse_error*>(&e)) throw *pe;
    if (const auto* oe = dynamic_cast<const OrderedJson::out_of_range*>(&e)) throw *oe;
    throw e;
  }

 private:
  struct Open {
    OrderedJson* value;
    std::unordered_map<std::string, size_t> index;  ///< objects: key → position
  };

  bool put(OrderedJson v) {
    slot(std::move(v));
    return true;
  }
  /** Where the next value goes: the root, an array's end, or the pending key's slot. */
  OrderedJson* slot(OrderedJson v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    OrderedJson* parent = open_.back().value;
    if (parent->is_array()) {
      auto& a = parent->get_ref<OrderedJson::array_t&>();
      a.push_back(std::move(v));
      return &a.back();
    }
    *pending_ = std::move(v);
    return pending_;
  }

  OrderedJson& root_;
  size_t max_depth_;
  std::vector<Open> open_;
  OrderedJson* pending_ = nullptr;
};

}  // namespace

bool nests_too_deep(const nlohmann::json::exception& e) {
  return e.id == 101 && std::string_view(e.what()).find(kTooDeep) != std::string_view::npos;
}

void append_member(OrderedJson& object, std::string key, OrderedJson value) {
  auto& members = static_cast<Members&>(object.get_ref<OrderedJson::object_t&>());
  reserve_one(members);
  members.emplace_back(std::move(key), std::move(value));
}

OrderedJson parse_ordered_json(std::string_view text, size_t max_depth) {
  OrderedJson root;
  Builder b(root, max_depth);
  if (!OrderedJson::sax_parse(text, &b) && b.too_deep_)
    throw OrderedJson::parse_error::create(101, 0, kTooDeep + std::to_string(max_depth) + " arrays and objects",
                                           nullptr);
  return root;
}

}  // namespace kiln
