// kiln's ordered JSON parse (request bodies): key order kept, repeated keys as Python's json.loads
// takes them, nlohmann's errors, and linear time for objects with very many keys.
#include "core/json_ordered.hpp"

#include <gtest/gtest.h>

#include <string>

namespace kiln {
namespace {

TEST(OrderedJson, ObjectsKeepTheirKeyOrderAtEveryDepth) {
  const std::string text =
      R"({"z": 1, "a": {"y": [true, null, {"q": 1.5, "b": "x"}], "c": -2}, "m": 18446744073709551615})";
  const OrderedJson j = parse_ordered_json(text);
  EXPECT_EQ(j.dump(), R"({"z":1,"a":{"y":[true,null,{"q":1.5,"b":"x"}],"c":-2},"m":18446744073709551615})");
  EXPECT_EQ(j, OrderedJson::parse(text));  // the same value nlohmann's own parse makes
  EXPECT_EQ(parse_ordered_json("[]").dump(), "[]");
  EXPECT_EQ(parse_ordered_json(R"("\u00e9")").get<std::string>(), "\xC3\xA9");
}

TEST(OrderedJson, ARepeatedKeyKeepsItsFirstPlaceAndTakesItsLastValue) {
  EXPECT_EQ(parse_ordered_json(R"({"a": 1, "b": 2, "a": {"x": 3}})").dump(), R"({"a":{"x":3},"b":2})");
}

TEST(OrderedJson, BadTextThrowsNlohmannsErrorsWithThePosition) {
  try {
    parse_ordered_json(R"({"a": [1, 2})");
    FAIL() << "no error";
  } catch (const OrderedJson::parse_error& e) {
    EXPECT_EQ(e.byte, 12u);
  }
  EXPECT_THROW(parse_ordered_json("1e999"), OrderedJson::out_of_range);
  EXPECT_THROW(parse_ordered_json(""), OrderedJson::parse_error);
  EXPECT_THROW(parse_ordered_json(R"({"a": 1} x)"), OrderedJson::parse_error);
}

TEST(OrderedJson, AnObjectOfManyKeysParsesInLinearTime) {
  // A million keys: linear, about a second; inserting with a search of the keys so far (nlohmann's
  // ordered parse) compares 5e11 keys, past the suite's 900-second test timeout.
  std::string text = "{";
  for (int i = 0; i < 1000000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  const OrderedJson j = parse_ordered_json(text);
  ASSERT_EQ(j.size(), 1000000u);
  EXPECT_EQ(j.begin().key(), "k0");
  const auto& items = j.get_ref<const OrderedJson::object_t&>();
  EXPECT_EQ(items.back().first, "k999999");
  EXPECT_EQ(items.back().second, 999999);
}

TEST(OrderedJson, TextNestingDeeperThanTheLimitIsAParseError) {
  const std::string deep = std::string(300, '[') + std::string(300, ']');
  EXPECT_THROW(parse_ordered_json(deep), OrderedJson::parse_error);  // 256 by default
  EXPECT_EQ(parse_ordered_json(deep, 300).dump(), deep);
  EXPECT_THROW(parse_ordered_json(R"({"a": {"b": 1}})", 1), OrderedJson::parse_error);
  EXPECT_EQ(parse_ordered_json(R"({"a": {"b": 1}})", 2).dump(), R"({"a":{"b":1}})");
}

// Objects nested with siblings after them: each level's members grow their vector while the deeper
// levels are already built; growing moves them (a copy would be depth squared, and recursive).
TEST(OrderedJson, DeepObjectsWithSiblingsParseWhole) {
  std::string text;
  for (int i = 0; i < 250; ++i) text += R"({"a":)";
  text += "0";
  for (int i = 0; i < 250; ++i) text += R"(,"b":1,"c":2,"d":3,"e":4,"f":5})";
  const OrderedJson j = parse_ordered_json(text);
  EXPECT_EQ(j.dump(), text);
}

TEST(OrderedJson, AppendMemberAddsAtTheEnd) {
  OrderedJson o = OrderedJson::object();
  append_member(o, "z", 1);
  append_member(o, "a", 2);
  EXPECT_EQ(o.dump(), R"({"z":1,"a":2})");
  EXPECT_EQ(o["a"], 2);
}

}  // namespace
}  // namespace kiln
