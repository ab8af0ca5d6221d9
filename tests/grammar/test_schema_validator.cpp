// The test oracle (schema_validator.hpp) against the JSON-Schema-Test-Suite, draft 2020-12: every
// group whose schema stays inside the supported subset must agree with the suite on every
// instance. This checks the checker before test_random_outputs.cpp trusts it.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "grammar/schema_validator.hpp"
#include "source_paths.hpp"

namespace kiln::grammar {
namespace {

using test::SchemaValidator;
using Json = nlohmann::json;
namespace fs = std::filesystem;

const fs::path kSuite = fs::path(KILN_TEST_SOURCE_DIR) / "../shared/fixtures/json-schema-test-suite/tests/draft2020-12";

TEST(SchemaValidator, AgreesWithTestSuite) {
  if (!fs::is_directory(kSuite)) GTEST_SKIP() << "JSON-Schema-Test-Suite not found at " << kSuite;
  std::vector<std::pair<fs::path, std::string>> files;
  for (const auto& entry : fs::directory_iterator(kSuite)) {
    const std::string name = entry.path().filename().string();
    // format.json treats format as an annotation (the validator asserts it, as the engine does);
    // vocabulary.json needs a custom metaschema.
    if (entry.path().extension() == ".json" && name != "format.json" && name != "vocabulary.json")
      files.emplace_back(entry.path(), name);
  }
  for (const char* f : {"date-time.json", "date.json", "time.json", "duration.json", "uuid.json", "email.json",
                        "ipv4.json", "ipv6.json", "uri.json", "uri-reference.json", "unknown.json"})
    files.emplace_back(kSuite / "optional" / "format" / f, std::string("optional/format/") + f);
  std::sort(files.begin(), files.end());

  int groups = 0, checked_groups = 0, instances = 0;
  std::map<std::string, int> skipped_by;
  std::map<std::string, int> checked_by_file;
  for (const auto& [path, label] : files) {
    std::ifstream in(path);
    const Json all = Json::parse(in);
    for (const Json& group : all) {
      ++groups;
      std::unique_ptr<SchemaValidator> v;
      try {
        v = std::make_unique<SchemaValidator>(group["schema"]);
      } catch (const SchemaValidator::Unsupported& e) {
        ++skipped_by[e.what()];
        continue;
      }
      ++checked_groups;
      for (const Json& t : group["tests"]) {
        ++instances;
        ++checked_by_file[label];
        const bool expected = t["valid"].get<bool>();
        const bool got = v->valid(t["data"]);
        EXPECT_EQ(got, expected) << label << " | " << group["description"].get<std::string>() << " | "
                                 << t["description"].get<std::string>() << " | " << t["data"].dump() << " | "
                                 << v->explain(t["data"]);
      }
    }
  }
  fmt::print("validator vs suite: {} groups, {} checked ({} instances), {} skipped\n", groups, checked_groups,
             instances, groups - checked_groups);
  std::map<std::string, int> skipped_kw;  // bucket by the refused keyword, not the whole message
  for (auto& [why, n] : skipped_by) skipped_kw[why.substr(0, why.find('\'', why.find('\'') + 1) + 1)] += n;
  for (auto& [why, n] : skipped_kw) fmt::print("  skipped {:3}  {}\n", n, why);
  // The subset's own files must actually be exercised.
  for (const char* f : {"type.json",
                        "enum.json",
                        "const.json",
                        "properties.json",
                        "required.json",
                        "additionalProperties.json",
                        "items.json",
                        "prefixItems.json",
                        "minItems.json",
                        "maxItems.json",
                        "anyOf.json",
                        "oneOf.json",
                        "allOf.json",
                        "ref.json",
                        "pattern.json",
                        "minLength.json",
                        "maxLength.json",
                        "minimum.json",
                        "maximum.json",
                        "exclusiveMinimum.json",
                        "exclusiveMaximum.json",
                        "boolean_schema.json",
                        "optional/format/date-time.json",
                        "optional/format/email.json",
                        "optional/format/ipv6.json",
                        "optional/format/uri.json",
                        "optional/format/uri-reference.json",
                        "optional/format/duration.json"})
    EXPECT_GT(checked_by_file[f], 0) << f;
  EXPECT_GT(instances, 700);
}

TEST(SchemaValidator, StrictModeAndEquality) {
  const Json schema = Json::parse(R"({"type":"object","properties":{"a":{"const":1}},"required":["a"]})");
  SchemaValidator strict(schema, {.strict = true}), loose(schema);
  EXPECT_TRUE(strict.valid(Json::parse(R"({"a":1.0})")));
  EXPECT_FALSE(strict.valid(Json::parse(R"({"a":1,"b":2})")));
  EXPECT_TRUE(loose.valid(Json::parse(R"({"a":1,"b":2})")));
  EXPECT_FALSE(loose.valid(Json::parse(R"({"a":true})")));
  EXPECT_NE(strict.explain(Json::parse(R"({"a":2})")).find("/a"), std::string::npos);
  const SchemaValidator e(Json::parse(R"({"enum":[[1,{"x":2.0}],"a"]})"));
  EXPECT_TRUE(e.valid(Json::parse(R"([1.0,{"x":2}])")));
  EXPECT_FALSE(e.valid(Json::parse(R"([1,{"x":2,"y":0}])")));
  const SchemaValidator lengths(Json::parse(R"({"minLength":2,"maxLength":2})"));
  EXPECT_TRUE(lengths.valid("é😀"));
  EXPECT_FALSE(lengths.valid("é😀a"));
  const SchemaValidator integer(Json::parse(R"({"type":"integer","exclusiveMaximum":3})"));
  EXPECT_TRUE(integer.valid(Json::parse("2.0")));
  EXPECT_FALSE(integer.valid(Json::parse("2.5")));
  EXPECT_FALSE(integer.valid(Json::parse("3")));
  EXPECT_THROW(SchemaValidator(Json::parse(R"({"multipleOf":2})")), SchemaValidator::Unsupported);
  EXPECT_THROW(SchemaValidator(Json::parse(R"({"format":"hostname"})")), SchemaValidator::Unsupported);
}

TEST(SchemaValidator, FormatsBeyondTheSuite) {
  EXPECT_TRUE(SchemaValidator::valid_email("a.b@c-d.example"));
  EXPECT_FALSE(SchemaValidator::valid_email("a@-c.example"));
  EXPECT_FALSE(SchemaValidator::valid_email("a@"));
  EXPECT_FALSE(SchemaValidator::valid_email("\"\"@x"));
  EXPECT_TRUE(SchemaValidator::valid_ipv6("::ffff:1.2.3.4"));
  EXPECT_FALSE(SchemaValidator::valid_ipv6("1.2.3.4::"));
  EXPECT_FALSE(SchemaValidator::valid_ipv6(":::"));
  EXPECT_TRUE(SchemaValidator::valid_ipv6("1:2:3:4:5:6:7::"));
  EXPECT_FALSE(SchemaValidator::valid_ipv6("1:2:3:4:5:6:7:8::"));
  EXPECT_TRUE(SchemaValidator::valid_date("2000-02-29"));
  EXPECT_FALSE(SchemaValidator::valid_date("1900-02-29"));
  EXPECT_TRUE(SchemaValidator::valid_time("00:29:60-23:30"));
  EXPECT_FALSE(SchemaValidator::valid_time("23:59:60.Z"));
}

}  // namespace
}  // namespace kiln::grammar
