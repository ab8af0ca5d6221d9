// UTF-8 repair and the hand-written pre-tokenizer split (cross-checked against PCRE2).
#include <gtest/gtest.h>

#include <random>

#include "text/regex.hpp"
#include "text/tokenizer_data.hpp"
#include "text/utf8.hpp"
#include "text_test_util.hpp"

namespace kiln::text {
namespace {

std::string lossy(std::string_view s) {
  std::string o;
  utf8::append_lossy(o, s);
  return o;
}
const std::string R(utf8::kReplacement);

TEST(Utf8, ValidAndInvalid) {
  EXPECT_TRUE(utf8::is_valid("hello \xC3\xA9 \xF0\x9F\xA6\x99"));
  EXPECT_FALSE(utf8::is_valid("\xC0\xAF"));
  EXPECT_FALSE(utf8::is_valid("\xED\xA0\x80"));      // surrogate
  EXPECT_FALSE(utf8::is_valid("\xF4\x90\x80\x80"));  // > U+10FFFF
  EXPECT_FALSE(utf8::is_valid("abc\xE2\x82"));       // truncated
}

TEST(Utf8, MaximalSubpartReplacement) {
  // The WHATWG / Unicode "maximal subpart" examples.
  EXPECT_EQ(lossy("\xE2\x82"), R);
  EXPECT_EQ(lossy("\xE2\x82x"), R + "x");
  EXPECT_EQ(lossy("\xED\xA0\x80"), R + R + R);
  EXPECT_EQ(lossy("\xF0\x9F\x98"), R);
  EXPECT_EQ(lossy("\xC0\xAF"), R + R);
  EXPECT_EQ(lossy("\xFF\xE2\x82\xAC"), R + "\xE2\x82\xAC");
  EXPECT_EQ(lossy("\xF1\x80\x80\xE1\x80\xC2"), R + R + R);
}

TEST(Utf8, StreamEqualsWholeForAnyChunking) {
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string s;
    int n = std::uniform_int_distribution<int>(0, 24)(rng);
    for (int i = 0; i < n; ++i) {
      int k = std::uniform_int_distribution<int>(0, 3)(rng);
      if (k == 0) s += static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
      else if (k == 1) s += static_cast<char>(std::uniform_int_distribution<int>(0x80, 0xBF)(rng));
      else if (k == 2) s += "\xF0\x9F\xA6\x99";
      else s += static_cast<char>(std::uniform_int_distribution<int>(0xC2, 0xF4)(rng));
    }
    utf8::LossyStream st;
    std::string out;
    for (char c : s) {
      std::size_t before = out.size();
      st.push(static_cast<unsigned char>(c), out);
      ASSERT_TRUE(utf8::is_valid(std::string_view(out).substr(before)));
    }
    st.flush(out);
    ASSERT_EQ(out, lossy(s));
    ASSERT_TRUE(utf8::is_valid(out));
  }
}

std::vector<std::string> split_fast(std::string_view s, int digits) {
  std::vector<std::string> r;
  split_gpt4_style(s, digits, [&](std::size_t b, std::size_t e) { r.emplace_back(s.substr(b, e - b)); });
  return r;
}
std::vector<std::string> split_pcre(const Regex& re, std::string_view s) {
  std::vector<std::string> r;
  std::size_t last = 0;
  for (auto [b, e] : re.find_all(s)) {
    if (b > last) r.emplace_back(s.substr(last, b - last));  // (the pattern matches everything)
    r.emplace_back(s.substr(b, e - b));
    last = e;
  }
  if (last < s.size()) r.emplace_back(s.substr(last));
  return r;
}

TEST(Split, KnownCases) {
  using V = std::vector<std::string>;
  EXPECT_EQ(split_fast("Hello world", 1), (V{"Hello", " world"}));
  EXPECT_EQ(split_fast("   x", 1), (V{"  ", " x"}));
  EXPECT_EQ(split_fast("a\n\n  b  ", 1), (V{"a", "\n\n", " ", " b", "  "}));
  EXPECT_EQ(split_fast("I'LL it's 12345", 1), (V{"I", "'LL", " it", "'s", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(split_fast("12345", 3), (V{"123", "45"}));
  EXPECT_EQ(split_fast(" !!!\n\nx", 1), (V{" !!!\n\n", "x"}));
  EXPECT_EQ(split_fast("x'\xC5\xBF", 1), (V{"x", "'\xC5\xBF"}));  // 'ſ folds to 's
  // U+0085 is White_Space (Oniguruma's \s), so it joins the whitespace run.
  EXPECT_EQ(split_fast("a\xC2\x85\xC2\x85", 1), (V{"a", "\xC2\x85\xC2\x85"}));
}

TEST(Split, WhitespaceRewrite) {
  EXPECT_EQ(rewrite_whitespace_classes(R"(a\sb)"), R"(a[\t-\r\x{85}\p{Zs}\x{2028}\x{2029}]b)");
  EXPECT_EQ(rewrite_whitespace_classes(R"([^\s\p{L}])"), R"([^\t-\r\x{85}\p{Zs}\x{2028}\x{2029}\p{L}])");
  EXPECT_EQ(rewrite_whitespace_classes(R"(\S\\s)"), R"([^\t-\r\x{85}\p{Zs}\x{2028}\x{2029}]\\s)");
}

TEST(Split, HandWrittenEqualsPcre2OnRandomText) {
  Regex qwen{std::string(kQwen2Pattern)}, llama{std::string(kLlama3Pattern)};
  std::mt19937 rng(42);
  for (int iter = 0; iter < 1500; ++iter) {
    std::string s = testing::random_text(rng, 1 + iter % 40);
    ASSERT_EQ(split_fast(s, 1), split_pcre(qwen, s)) << "input: " << s;
    ASSERT_EQ(split_fast(s, 3), split_pcre(llama, s)) << "input: " << s;
  }
}

TEST(Regex, BadPatternIsAClearError) {
  try {
    Regex r("(unclosed");
    FAIL();
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("[tokenizer]"), std::string::npos);
  }
}

}  // namespace
}  // namespace kiln::text
