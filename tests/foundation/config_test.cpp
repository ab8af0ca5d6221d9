// YAML configuration: valid files, defaults, and errors that name file:line:col and the expected form.
#include "core/config.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

namespace kiln {
namespace {

std::string error_of(const std::string& yaml) {
  try {
    Config::load_string(yaml, "test.yaml");
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Config, EmptyDocumentIsValid) {
  Config c = Config::load_string("", "empty.yaml");
  EXPECT_FALSE(c.server);
  EXPECT_TRUE(c.models.empty());
}

TEST(Config, PluginsOnlyIsEnough) {
  Config c = Config::load_string("plugins:\n  paths: [/opt/kiln/plugins, /tmp/x]\n", "p.yaml");
  ASSERT_TRUE(c.plugins);
  EXPECT_EQ(c.plugins->paths, (std::vector<std::string>{"/opt/kiln/plugins", "/tmp/x"}));
  EXPECT_FALSE(c.server);
}

TEST(Config, FullConfigWithDefaults) {
  Config c = Config::load_string(R"(
server:
  host: 0.0.0.0
  port: 9000
  api_keys: [k1]
  max_request_bytes: 4MiB
backend:
  kind: cpu
models:
  - name: qwen
    path: /models/qwen3
    tool_parser: qwen3_coder
    reasoning_parser: qwen3
    cache: {memory: 2GiB, block_tokens: 32}
    sampling: {temperature: 0.7, top_k: 20, seed: 42}
  - name: small
    path: /models/small
    cache: {memory: 0.25}
)",
                                 "full.yaml");
  ASSERT_TRUE(c.server);
  EXPECT_EQ(c.server->port, 9000);
  EXPECT_EQ(c.server->max_request_bytes, 4u << 20);
  EXPECT_EQ(c.server->request_timeout_s, 600);
  EXPECT_EQ(c.backend->kind, "cpu");
  ASSERT_EQ(c.models.size(), 2u);
  EXPECT_EQ(c.models[0].cache.memory_bytes, 2ull << 30);
  EXPECT_EQ(c.models[0].cache.block_tokens, 32);
  EXPECT_EQ(*c.models[0].sampling.temperature, 0.7);
  EXPECT_EQ(*c.models[0].sampling.seed, 42u);
  EXPECT_FALSE(c.models[0].sampling.top_p);
  EXPECT_EQ(c.models[1].cache.memory_bytes, 0u);
  EXPECT_DOUBLE_EQ(c.models[1].cache.memory_fraction, 0.25);
  EXPECT_EQ(c.models[1].max_batch_tokens, 2048);
  // The effective configuration round-trips through the parser.
  Config again = Config::load_string(c.to_yaml(), "again.yaml");
  EXPECT_EQ(again.models[0].cache.memory_bytes, 2ull << 30);
  EXPECT_EQ(again.models[1].name, "small");
}

TEST(Config, UnknownKeyNamesLineColumnAndSuggestion) {
  std::string e = error_of("server:\n  host: x\n  prot: 80\n");
  EXPECT_EQ(e.rfind("test.yaml:3:3: unknown key 'prot' in server (did you mean 'port'?)", 0), 0u) << e;
  EXPECT_NE(e.find("expected one of: host, port"), std::string::npos) << e;
}

TEST(Config, UnknownTopLevelSection) {
  std::string e = error_of("servers:\n  port: 1\n");
  EXPECT_EQ(e.rfind("test.yaml:1:1: unknown key 'servers' in top level (did you mean 'server'?)", 0), 0u) << e;
}

TEST(Config, WrongTypes) {
  EXPECT_EQ(
      error_of("server:\n  port: eighty\n").rfind("test.yaml:2:9: server.port must be a port number (got 'eighty')", 0),
      0u);
  EXPECT_EQ(
      error_of("server:\n  port: 70000\n").rfind("test.yaml:2:9: server.port must be a port number in [0, 65535]", 0),
      0u);
  EXPECT_EQ(
      error_of("plugins:\n  paths: /one/path\n").rfind("test.yaml:2:10: plugins.paths must be a list of strings", 0),
      0u);
  EXPECT_EQ(error_of("models: {name: a}\n").rfind("test.yaml:1:9: models must be a list", 0), 0u);
  EXPECT_EQ(error_of("server: 5\n").rfind("test.yaml:1:9: server must be a mapping", 0), 0u);
  EXPECT_EQ(error_of("backend:\n  kind: metal\n")
                .rfind("test.yaml:2:9: backend.kind must be one of auto, vulkan, cpu, reference (got 'metal')", 0),
            0u);
  EXPECT_EQ(error_of("backend:\n  allow_cpu_fallback: maybe\n")
                .rfind("test.yaml:2:23: backend.allow_cpu_fallback must be true or false", 0),
            0u);
  std::string mem = error_of("models:\n  - name: a\n    path: p\n    cache: {memory: lots}\n");
  EXPECT_EQ(mem.rfind("test.yaml:4:21: models[0].cache.memory must be a size such as 2GiB or a fraction", 0), 0u)
      << mem;
}

TEST(Config, QuantizedKvCacheAndPerLayerDtypes) {
  const Config c = Config::load_string(
      "models:\n  - name: a\n    path: p\n    cache: {kv_dtype: q4, kv_layers: {0: f16, -1: q8}}\n", "test.yaml");
  EXPECT_EQ(c.models[0].cache.kv_dtype, "q4");
  EXPECT_EQ(c.models[0].cache.kv_layers, (std::map<int, std::string>{{0, "f16"}, {-1, "q8"}}));
  const std::string m = "models:\n  - name: a\n    path: p\n    cache: ";
  std::string e = error_of(m + "{kv_dtype: q8_0}\n");
  EXPECT_EQ(e.rfind("test.yaml:4:23: models[0].cache.kv_dtype must be one of f32, f16, bf16, q8, q4 (got 'q8_0')", 0),
            0u)
      << e;
  e = error_of(m + "{kv_layers: {last: f16}}\n");
  EXPECT_NE(e.find("models[0].cache.kv_layers keys must be layer indices"), std::string::npos) << e;
  e = error_of(m + "{kv_layers: {3: int8}}\n");
  EXPECT_NE(e.find("models[0].cache.kv_layers.3 must be one of f32, f16, bf16, q8, q4 (got 'int8')"), std::string::npos)
      << e;
  e = error_of(m + "{kv_layers: [f16]}\n");
  EXPECT_NE(e.find("must be a map of layer index to dtype"), std::string::npos) << e;
}

TEST(Config, MissingRequiredKey) {
  std::string e = error_of("models:\n  - name: a\n");
  EXPECT_EQ(e.rfind("test.yaml:2:5: models[0] is missing required key 'path'", 0), 0u) << e;
}

TEST(Config, DuplicateModelNames) {
  std::string e = error_of("models:\n  - {name: a, path: x}\n  - {name: a, path: y}\n");
  EXPECT_EQ(e.rfind("test.yaml:3:12: duplicate model name 'a'", 0), 0u) << e;
}

TEST(Config, AliasesAndJsonWhitespace) {
  Config c = Config::load_string(R"(models:
  - name: a
    path: /m/a
    aliases: [gpt-4o, "claude-*"]
    json_whitespace: flexible
  - name: b
    path: /m/b
)",
                                 "a.yaml");
  EXPECT_EQ(c.models[0].aliases, (std::vector<std::string>{"gpt-4o", "claude-*"}));
  EXPECT_EQ(c.models[0].json_whitespace, "flexible");
  EXPECT_TRUE(c.models[1].aliases.empty());
  EXPECT_EQ(c.models[1].json_whitespace, "compact");
  EXPECT_NE(
      error_of("models:\n  - name: a\n    path: /m\n    aliases: [x]\n  - name: b\n    path: /m\n    aliases: [x]\n")
          .find("test.yaml:7:15: alias 'x' is given twice"),
      std::string::npos)
      << error_of(
             "models:\n  - name: a\n    path: /m\n    aliases: [x]\n  - name: b\n    path: /m\n    aliases: [x]\n");
  EXPECT_NE(error_of("models:\n  - name: a\n    path: /m\n    aliases: [b]\n  - name: b\n    path: /m\n")
                .find("alias 'b' is the name of another model"),
            std::string::npos);
  EXPECT_NE(error_of("models:\n  - name: a\n    path: /m\n    json_whitespace: loose\n")
                .find("json_whitespace must be compact or flexible"),
            std::string::npos);
}

TEST(Config, SyntaxErrorHasPosition) {
  std::string e = error_of("server:\n  port: [1, 2\n");
  EXPECT_EQ(e.rfind("test.yaml:", 0), 0u) << e;
  EXPECT_NE(e.find("YAML syntax error"), std::string::npos) << e;
}

TEST(Config, MissingFileIsAClearError) {
  try {
    Config::load_file("/definitely/not/here.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "/definitely/not/here.yaml: cannot read the file (does it exist and is it readable?)");
  }
}

TEST(Config, RelativePathsResolveAgainstTheConfigFolder) {
  auto dir = std::filesystem::temp_directory_path() / "kiln_config_test";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "c.yaml") << "plugins: {paths: [plug]}\nmodels: [{name: m, path: ../models/m}]\n";
  Config c = Config::load_file((dir / "c.yaml").string());
  EXPECT_EQ(c.plugins->paths[0], (dir / "plug").string());
  EXPECT_EQ(c.models[0].path, (dir.parent_path() / "models/m").string());
  std::filesystem::remove_all(dir);
}

TEST(Config, ByteSizes) {
  uint64_t v = 0;
  EXPECT_TRUE(parse_byte_size("1048576", &v));
  EXPECT_EQ(v, 1048576u);
  EXPECT_TRUE(parse_byte_size("4GiB", &v));
  EXPECT_EQ(v, 4ull << 30);
  EXPECT_TRUE(parse_byte_size("1.5 MiB", &v));
  EXPECT_EQ(v, 1572864u);
  EXPECT_TRUE(parse_byte_size("2GB", &v));
  EXPECT_EQ(v, 2000000000u);
  for (const char* bad : {"", "GiB", "12 parsecs", "-1", "1e999", "1.2.3MiB"})
    EXPECT_FALSE(parse_byte_size(bad, &v)) << bad;
}

}  // namespace
}  // namespace kiln
