// `kiln tokenize` / `kiln detokenize` end to end against the library.
#include <gtest/gtest.h>

#include "real_models.hpp"
#include "source_paths.hpp"

namespace kiln::text {
namespace {

using namespace testing;

std::string run(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  *rc = ::pclose(p);
  return out;
}

TEST(Cli, TokenizeAndDetokenize) {
  fs::path kiln = fs::path(KILN_TEST_BIN_DIR) / "kiln";
  if (!fs::exists(kiln)) GTEST_SKIP() << "missing " << kiln << " (build the kiln target)";
  const RealModel& m = real_models()[1];  // gemma3: has a post-processor
  KILN_LOAD_REAL_OR_SKIP(tok, m);
  std::string dir = model_dir(m.pkg).string();
  fs::path in = fs::temp_directory_path() / ("kiln-cli-text-" + std::to_string(::getpid()));
  const std::string text = "Hello <start_of_turn>user\n  wörld \xF0\x9F\xA6\x99\n";
  { std::ofstream(in, std::ios::binary) << text; }
  int rc = -1;
  std::string out = run("'" + kiln.string() + "' tokenize --model '" + dir + "' < '" + in.string() + "'", &rc);
  ASSERT_EQ(rc, 0) << out;
  auto ids = nlohmann::json::parse(out).get<std::vector<TokenId>>();
  EXPECT_EQ(ids, tok->encode(text));
  out = run("'" + kiln.string() + "' tokenize --add-special --model '" + dir + "' < '" + in.string() + "'", &rc);
  ASSERT_EQ(rc, 0);
  EncodeOptions add;
  add.add_special = true;
  EXPECT_EQ(nlohmann::json::parse(out).get<std::vector<TokenId>>(), tok->encode(text, add));

  { std::ofstream(in, std::ios::binary) << nlohmann::json(ids).dump(); }
  out = run("'" + kiln.string() + "' detokenize --model '" + dir + "' < '" + in.string() + "'", &rc);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(out, text);

  { std::ofstream(in, std::ios::binary) << "[1, \"x\"]"; }
  out = run("'" + kiln.string() + "' detokenize --model '" + dir + "' < '" + in.string() + "' 2>&1", &rc);
  EXPECT_NE(rc, 0);
  EXPECT_NE(out.find("JSON array"), std::string::npos) << out;
  fs::remove(in);
}

}  // namespace
}  // namespace kiln::text
