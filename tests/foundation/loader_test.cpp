// The plugin loader against real .so files built by the suite: the good path, and every refusal
// (missing file, garbage file, no entry symbol, ABI major mismatch, minor too old, declined,
// malformed descriptors, duplicate names, create() failing) is one clear line, never a crash.
#include <gtest/gtest.h>

#include <string>

#include "core/error.hpp"
#include "plugin/parser_host.hpp"
#include "plugin/registry.hpp"
#include "source_paths.hpp"

namespace kiln {
namespace {

std::string plugin(const std::string& dir, const std::string& file) {
  return std::string(KILN_TEST_PLUGIN_DIR) + "/" + dir + "/" + file;
}

std::string only_refusal(const PluginRegistry& r) {
  EXPECT_EQ(r.refused().size(), 1u);
  return r.refused().empty() ? "" : r.refused()[0].reason;
}

TEST(Loader, LoadsGoodPluginAndFindsComponentsByKindAndName) {
  PluginRegistry r;
  ASSERT_TRUE(r.load_file(plugin("good", "test_good.so")));
  ASSERT_EQ(r.plugins().size(), 1u);
  EXPECT_EQ(r.plugins()[0].name, "test_good");
  EXPECT_EQ(r.plugins()[0].version, "1.2.3");
  EXPECT_EQ(r.plugins()[0].abi_major, KILN_ABI_MAJOR);
  ASSERT_NE(r.find(KILN_COMPONENT_TOOL_PARSER, "test_lines"), nullptr);
  ASSERT_NE(r.find(KILN_COMPONENT_REASONING_PARSER, "test_passthrough"), nullptr);
  EXPECT_EQ(r.find(KILN_COMPONENT_REASONING_PARSER, "test_lines"), nullptr) << "registries are per kind";
  EXPECT_EQ(r.names(KILN_COMPONENT_TOOL_PARSER), std::vector<std::string>{"test_lines"});
  EXPECT_TRUE(r.refused().empty());
}

TEST(Loader, CallsAParserThroughTheAbi) {
  PluginRegistry r;
  ASSERT_TRUE(r.load_file(plugin("good", "test_good.so")));
  ParserInstance p(*r.find(KILN_COMPONENT_TOOL_PARSER, "test_lines"), {});
  std::vector<ParseEvent> ev;
  p.feed("hello\nCALL get_weather {\"city\":", ev);
  p.feed("\"Paris\"}\nbye", ev);
  p.finish(ev);
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].kind, KILN_EVENT_CONTENT);
  EXPECT_EQ(ev[0].text, "hello\n");
  EXPECT_EQ(ev[1].kind, KILN_EVENT_TOOL_CALL_START);
  EXPECT_EQ(ev[1].name, "get_weather");
  EXPECT_EQ(ev[2].kind, KILN_EVENT_TOOL_CALL_ARGS);
  EXPECT_EQ(ev[2].text, "{\"city\":\"Paris\"}");
  EXPECT_EQ(ev[3].text, "bye");
}

TEST(Loader, LoadingTheSameFileTwiceIsANoOp) {
  PluginRegistry r;
  ASSERT_TRUE(r.load_file(plugin("good", "test_good.so")));
  ASSERT_TRUE(r.load_file(plugin("good", "test_good.so")));
  EXPECT_EQ(r.plugins().size(), 1u);
  EXPECT_TRUE(r.refused().empty());
}

TEST(Loader, RefusesMissingFile) {
  PluginRegistry r;
  EXPECT_FALSE(r.load_file(plugin("nowhere", "missing.so")));
  EXPECT_NE(only_refusal(r).find("file not found"), std::string::npos);
}

TEST(Loader, RefusesGarbageFile) {
  PluginRegistry r;
  EXPECT_FALSE(r.load_file(plugin("garbage", "garbage.so")));
  EXPECT_NE(only_refusal(r).find("cannot load"), std::string::npos);
}

TEST(Loader, RefusesSharedObjectWithoutEntrySymbol) {
  PluginRegistry r;
  EXPECT_FALSE(r.load_file(plugin("no_entry", "test_no_entry.so")));
  EXPECT_NE(only_refusal(r).find("not a kiln plugin (no 'kiln_plugin_get_descriptor' symbol"), std::string::npos);
}

TEST(Loader, RefusesAbiMajorMismatchAndPrintsBothVersions) {
  PluginRegistry r;
  EXPECT_FALSE(r.load_file(plugin("handmade_1", "handmade.so")));
  std::string why = only_refusal(r);
  EXPECT_NE(why.find("ABI major mismatch"), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(KILN_ABI_MAJOR + 1) + ".0"), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(KILN_ABI_MAJOR) + "." + std::to_string(KILN_ABI_MINOR)), std::string::npos) << why;
}

TEST(Loader, RefusesMinorOlderThanTheHostNeeds) {
  PluginRegistry r(PluginRegistry::Options{1});
  EXPECT_FALSE(r.load_file(plugin("handmade_2", "handmade.so")));
  std::string why = only_refusal(r);
  EXPECT_NE(why.find("ABI minor too old"), std::string::npos) << why;
  const std::string major = std::to_string(KILN_ABI_MAJOR);
  EXPECT_NE(why.find("plugin built for kiln ABI " + major + ".0"), std::string::npos) << why;
  EXPECT_NE(why.find("needs at least " + major + ".1"), std::string::npos) << why;
}

TEST(Loader, AcceptsOlderMinorWhenTheHostAllowsIt) {
  PluginRegistry r;  // min_abi_minor 0
  EXPECT_TRUE(r.load_file(plugin("handmade_2", "handmade.so")));
}

TEST(Loader, RefusesPluginThatDeclinesTheHost) {
  PluginRegistry r;
  EXPECT_FALSE(r.load_file(plugin("handmade_3", "handmade.so")));
  EXPECT_NE(only_refusal(r).find("declined this host"), std::string::npos);
}

TEST(Loader, RefusesMalformedDescriptors) {
  for (auto [dir, expect] : {std::pair{"handmade_4", "descriptor too small"}, std::pair{"handmade_5", "has no vtable"},
                             std::pair{"handmade_6", "vtable is too small"},
                             std::pair{"handmade_7", "kind 2 (a plugin cache policy), which was retired in kiln ABI 2.0"}}) {
    PluginRegistry r;
    EXPECT_FALSE(r.load_file(plugin(dir, "handmade.so")));
    EXPECT_NE(only_refusal(r).find(expect), std::string::npos) << dir << ": " << r.refused()[0].reason;
    EXPECT_TRUE(r.components().empty());
  }
}

TEST(Loader, RefusesDuplicateNameAndKeepsTheFirst) {
  PluginRegistry r;
  ASSERT_TRUE(r.load_file(plugin("good", "test_good.so")));
  EXPECT_FALSE(r.load_file(plugin("dup", "test_dup.so")));
  std::string why = only_refusal(r);
  EXPECT_NE(why.find("duplicate tool-parser name 'test_lines'"), std::string::npos) << why;
  EXPECT_NE(why.find("test_good"), std::string::npos) << why;
  EXPECT_EQ(r.plugins().size(), 1u);
  EXPECT_EQ(r.components().size(), 2u);
}

TEST(Loader, CreateFailureIsAnErrorNotACrash) {
  PluginRegistry r;
  ASSERT_TRUE(r.load_file(plugin("create_fails", "test_create_fails.so")));
  const Component* c = r.find(KILN_COMPONENT_TOOL_PARSER, "test_refuses");
  ASSERT_NE(c, nullptr);
  try {
    ParserInstance p(*c, {});
    FAIL() << "create should have failed";
  } catch (const HostError& e) {
    EXPECT_NE(std::string(e.what()).find("create failed: this parser needs tools"), std::string::npos) << e.what();
  }
  // An exception inside feed() comes back as an error, too.
  ParserInstance p(*c, ParserRequest{-1, "[]", ""});
  std::vector<ParseEvent> ev;
  EXPECT_THROW(p.feed("explode", ev), HostError);
  p.feed("fine", ev);
  ASSERT_EQ(ev.size(), 1u);
}

TEST(Loader, LoadDirsScansFoldersAndRefusesMissingOnes) {
  PluginRegistry r;
  r.load_dirs({std::string(KILN_TEST_PLUGIN_DIR) + "/good", std::string(KILN_TEST_PLUGIN_DIR) + "/absent"});
  EXPECT_EQ(r.plugins().size(), 1u);
  EXPECT_NE(only_refusal(r).find("plugin folder not found"), std::string::npos);
}

TEST(Loader, ComponentKindNamesRoundTrip) {
  for (auto k : {KILN_COMPONENT_MODEL, KILN_COMPONENT_REASONING_PARSER, KILN_COMPONENT_TOOL_PARSER}) {
    kiln_component_kind back{};
    ASSERT_TRUE(parse_component_kind(component_kind_name(k), &back));
    EXPECT_EQ(back, k);
  }
  kiln_component_kind x{};
  EXPECT_FALSE(parse_component_kind("parser", &x));
}

}  // namespace
}  // namespace kiln

// The same plugin source linked statically (KILN_PLUGIN_STATIC): no dlopen, same registry.
extern "C" const kiln_plugin_descriptor* kiln_plugin_descriptor_test_good(uint32_t, uint32_t);

namespace kiln {
namespace {
TEST(Loader, StaticallyLinkedPluginRegistersWithoutDlopen) {
  PluginRegistry r;
  ASSERT_TRUE(r.register_static(&kiln_plugin_descriptor_test_good, "<static test_good>"));
  EXPECT_EQ(r.plugins()[0].file, "<static test_good>");
  ParserInstance p(*r.find(KILN_COMPONENT_REASONING_PARSER, "test_passthrough"), ParserRequest{1, "", ""});
  std::vector<ParseEvent> ev;
  p.feed("thinking...", ev);
  ASSERT_EQ(ev.size(), 1u);
  EXPECT_EQ(ev[0].kind, KILN_EVENT_REASONING);
  // Loading the dynamic build of the same plugin now clashes by name: refused, not crashed.
  EXPECT_FALSE(r.load_file(std::string(KILN_TEST_PLUGIN_DIR) + "/good/test_good.so"));
}
}  // namespace
}  // namespace kiln
