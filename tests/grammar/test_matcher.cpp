// The matcher against the independent recognizer: random grammars and inputs, masks against
// token-by-token acceptance, rollback, jump-forward, stop tokens and the shared mask cache.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <optional>
#include <random>
#include <thread>

#include "grammar/matcher.hpp"
#include "grammar/recognizer.hpp"

namespace kiln::grammar {
namespace {

// A random grammar over the alphabet "abc": rules of literals, classes, references (only to
// later rules, or after a consumed byte, so no left recursion) and repetitions.
Grammar random_grammar(std::mt19937& rng) {
  Grammar g;
  const int n = 2 + static_cast<int>(rng() % 4);
  std::vector<uint32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(g.rule(fmt::format("r{}", i)));
  auto byte = [&] { return g.byte(static_cast<uint8_t>('a' + rng() % 3)); };
  for (int i = 0; i < n; ++i) {
    std::vector<Sequence> alts;
    const int na = 1 + static_cast<int>(rng() % 3);
    for (int a = 0; a < na; ++a) {
      Sequence s;
      const int len = static_cast<int>(rng() % 4);
      bool consumed = false;
      for (int k = 0; k < len; ++k) {
        switch (rng() % 6) {
          case 0:
          case 1:
            s.push_back(byte());
            consumed = true;
            break;
          case 2:
            s.push_back(g.bytes(ByteSet::range('a', static_cast<uint8_t>('a' + rng() % 3))));
            consumed = true;
            break;
          case 3: {  // a reference: any rule after a consumed byte, else a later one
            const int lo = consumed ? 0 : i + 1;
            if (lo < n) s.push_back(Grammar::ref(ids[static_cast<size_t>(lo + static_cast<int>(rng() % (n - lo)))]));
            break;
          }
          case 4:
            s.push_back(g.repeat("rep", {byte()}, rng() % 2, rng() % 2 ? -1 : 2 + static_cast<int>(rng() % 2)));
            break;
          default:
            s.push_back(g.star("st", {byte(), byte()}));
        }
      }
      alts.push_back(std::move(s));
    }
    g.define(ids[static_cast<size_t>(i)], std::move(alts));
  }
  g.root = ids[0];
  return g;
}

std::shared_ptr<const TokenTable> abc_tokens() {
  // Every string over "abc" up to length 3, a duplicate, an unused id and a stop token (last).
  std::vector<std::string> v;
  for (int len = 1; len <= 3; ++len)
    for (int x = 0; x < (len == 1 ? 3 : len == 2 ? 9 : 27); ++x) {
      std::string s;
      for (int k = 0, y = x; k < len; ++k, y /= 3) s.push_back(static_cast<char>('a' + y % 3));
      v.push_back(s);
    }
  v.push_back("ab");  // duplicate bytes
  v.push_back("");    // unused
  v.push_back("</s>");
  return std::make_shared<const TokenTable>(v, std::vector<int32_t>{static_cast<int32_t>(v.size() - 1)});
}

bool bit(const std::vector<uint64_t>& m, size_t t) {
  return (m[t >> 6] >> (t & 63)) & 1;
}

TEST(Matcher, AgreesWithTheRecognizerOnRandomGrammars) {
  std::mt19937 rng(7);
  auto tokens = abc_tokens();
  int grammars = 0, checked = 0, accepted = 0;
  for (int gi = 0; gi < 300; ++gi) {
    Grammar g = random_grammar(rng);
    std::shared_ptr<const CompiledGrammar> cg;
    try {
      cg = std::make_shared<const CompiledGrammar>(g, tokens);
    } catch (const GrammarError&) {
      continue;  // a generated grammar that matches nothing reachable is fine to skip
    }
    ++grammars;
    Recognizer rec(g);
    for (int si = 0; si < 40; ++si) {
      std::string s;
      const size_t len = rng() % 8;
      for (size_t k = 0; k < len; ++k) s.push_back(static_cast<char>('a' + rng() % 3));
      std::optional<Matcher> m;
      try {
        m.emplace(cg);
      } catch (const GrammarError&) {
        break;
      }
      bool ok = true;
      try {
        for (char c : s) ok = ok && m->accept_bytes(std::string_view(&c, 1));
      } catch (const GrammarError&) {  // an ambiguous grammar past the matcher's caps: refused, not run
        break;
      }
      const bool want = rec.accepts(s);
      // Accepted bytes and completeness together must equal membership; every prefix of a member
      // must be accepted as a prefix.
      ASSERT_EQ(ok && m->can_end(), want) << "grammar:\n" << gi << " input '" << s << "'";
      if (want) ++accepted;
      ++checked;
    }
  }
  EXPECT_GT(grammars, 100);
  EXPECT_GT(accepted, 200);
  EXPECT_GT(checked, 4000);
}

TEST(Matcher, MaskBitsAreExactlyTheAcceptedTokens) {
  std::mt19937 rng(11);
  auto tokens = abc_tokens();
  int steps = 0;
  for (int gi = 0; gi < 150; ++gi) {
    Grammar g = random_grammar(rng);
    std::shared_ptr<const CompiledGrammar> cg;
    try {
      cg = std::make_shared<const CompiledGrammar>(g, tokens);
      Matcher probe(cg);
    } catch (const GrammarError&) {
      continue;
    }
    Matcher m(cg);
    std::vector<uint64_t> mask(tokens->mask_words());
    for (int step = 0; step < 6 && !m.is_ended(); ++step) {
      try {
        m.fill_mask(mask.data());
      } catch (const GrammarError&) {  // past the caps (see above)
        break;
      }
      std::vector<int32_t> allowed;
      for (size_t t = 0; t < tokens->vocab(); ++t) {
        const bool ok = m.accept_token(static_cast<int32_t>(t));
        if (ok) m.rollback(1);
        ASSERT_EQ(bit(mask, t), ok) << "grammar " << gi << " step " << step << " token " << t;
        if (ok) allowed.push_back(static_cast<int32_t>(t));
      }
      ++steps;
      if (allowed.empty()) break;
      ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
    }
  }
  EXPECT_GT(steps, 200);
}

Grammar literal_choice() {
  Grammar g;
  Sequence yes = g.literal("yes"), no = g.literal("no!");
  g.root = g.add("root", {yes, no}).index;
  return g;
}

TEST(Matcher, RollbackRestoresEveryEarlierState) {
  auto tokens = abc_tokens();
  Grammar g;
  g.root = g.add("root", {{g.star("s", {g.bytes(ByteSet::range('a', 'c'))}), g.byte('a')}}).index;
  auto cg = std::make_shared<const CompiledGrammar>(g, tokens);
  Matcher m(cg);
  std::vector<uint64_t> first(tokens->mask_words()), again(tokens->mask_words());
  m.fill_mask(first.data());
  ASSERT_TRUE(m.accept_bytes("bcb"));
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_bytes("a"));
  EXPECT_TRUE(m.can_end());
  EXPECT_EQ(m.history(), 2u);
  m.rollback(1);
  EXPECT_FALSE(m.can_end());
  m.rollback(5);  // clamps at the start
  EXPECT_EQ(m.history(), 0u);
  m.fill_mask(again.data());
  EXPECT_EQ(first, again);
}

TEST(Matcher, StopTokensOnlyWhereTheGrammarCanEnd) {
  auto tokens = abc_tokens();
  const auto stop = static_cast<int32_t>(tokens->vocab() - 1);
  Grammar g;
  g.root = g.add("root", {g.literal("ab"), g.literal("abc")}).index;
  Matcher m(std::make_shared<const CompiledGrammar>(g, tokens));
  EXPECT_FALSE(m.accept_token(stop));
  ASSERT_TRUE(m.accept_bytes("ab"));
  EXPECT_TRUE(m.can_end());
  EXPECT_FALSE(m.must_end());  // "c" may still follow
  std::vector<uint64_t> mask(tokens->mask_words());
  m.fill_mask(mask.data());
  EXPECT_TRUE(bit(mask, static_cast<size_t>(stop)));
  ASSERT_TRUE(m.accept_bytes("c"));
  EXPECT_TRUE(m.must_end());
  m.fill_mask(mask.data());
  for (size_t t = 0; t < tokens->vocab(); ++t) EXPECT_EQ(bit(mask, t), t == static_cast<size_t>(stop)) << t;
  EXPECT_TRUE(m.accept_token(stop));
  EXPECT_TRUE(m.is_ended());
  EXPECT_FALSE(m.accept_bytes("a"));
  m.rollback(1);
  EXPECT_FALSE(m.is_ended());
}

TEST(Matcher, ForcedBytesAreTheOnlyContinuation) {
  auto tokens = abc_tokens();
  Grammar g;
  Sequence s = g.literal("{\"name\": ");
  s.push_back(g.bytes(ByteSet::range('a', 'c')));
  s.push_back(g.byte('}'));
  g.root = g.add("root", {s}).index;
  Matcher m(std::make_shared<const CompiledGrammar>(g, tokens));
  EXPECT_EQ(m.forced(), "{\"name\": ");
  ASSERT_TRUE(m.accept_bytes("{\"name\": b"));
  EXPECT_EQ(m.forced(), "}");
  ASSERT_TRUE(m.accept_bytes("}"));
  EXPECT_EQ(m.forced(), "");
  EXPECT_TRUE(m.must_end());
}

TEST(Matcher, DuplicateTokensAndUnusedIds) {
  auto tokens = abc_tokens();
  Grammar g = literal_choice();
  g = Grammar();
  g.root = g.add("root", {g.literal("ab")}).index;
  Matcher m(std::make_shared<const CompiledGrammar>(g, tokens));
  std::vector<uint64_t> mask(tokens->mask_words());
  m.fill_mask(mask.data());
  const size_t dup = tokens->vocab() - 3, unused = tokens->vocab() - 2;
  EXPECT_TRUE(bit(mask, dup));
  EXPECT_FALSE(bit(mask, unused));
  EXPECT_TRUE(m.accept_token(static_cast<int32_t>(dup)));
}

TEST(Matcher, MasksAreSharedByStateAcrossMatchers) {
  auto tokens = abc_tokens();
  Grammar g;
  g.root = g.add("root", {{g.star("s", {g.bytes(ByteSet::range('a', 'b'))}), g.byte('c')}}).index;
  auto cg = std::make_shared<const CompiledGrammar>(g, tokens);
  std::vector<uint64_t> a(tokens->mask_words()), b(tokens->mask_words());
  Matcher m1(cg), m2(cg);
  m1.fill_mask(a.data());
  ASSERT_TRUE(m1.accept_bytes("ab"));
  m1.fill_mask(b.data());
  EXPECT_EQ(a, b);  // inside the star the state is the same
  m2.fill_mask(b.data());
  const MaskCacheStats st = cg->cache_stats();
  EXPECT_EQ(st.misses, 1u);
  EXPECT_EQ(st.hits, 2u);
  EXPECT_EQ(st.entries, 1u);
}

TEST(Matcher, LeftRecursionIsRefusedWithTheRuleName) {
  Grammar g;
  const uint32_t r = g.rule("expr");
  g.define(r, {{Grammar::ref(r), g.byte('a')}, {g.byte('b')}});
  g.root = r;
  try {
    CompiledGrammar cg(g, abc_tokens());
    FAIL() << "accepted a left-recursive grammar";
  } catch (const GrammarError& e) {
    EXPECT_NE(std::string(e.what()).find("'expr'"), std::string::npos) << e.what();
  }
}

TEST(Matcher, DeepRightRecursionRunsInConstantStack) {
  auto tokens = abc_tokens();
  Grammar g;
  g.root = g.repeat("root", {g.bytes(ByteSet::range('a', 'c'))}, 0, 20000).index;
  Matcher m(std::make_shared<const CompiledGrammar>(g, tokens));
  for (int i = 0; i < 20000; ++i) ASSERT_TRUE(m.accept_bytes("a")) << i;
  EXPECT_TRUE(m.must_end());
}

TEST(Utf8Range, EncodesEveryCodePointOnceAndNoSurrogates) {
  Grammar g;
  g.root = g.add("root", utf8_range(g, 0x70, 0x10FFFF)).index;
  Recognizer rec(g);
  auto enc = [](char32_t c) {
    std::string s;
    if (c < 0x80)
      s.push_back(static_cast<char>(c));
    else if (c < 0x800)
      s += {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
    else if (c < 0x10000)
      s += {static_cast<char>(0xE0 | (c >> 12)), static_cast<char>(0x80 | ((c >> 6) & 0x3F)),
            static_cast<char>(0x80 | (c & 0x3F))};
    else
      s += {static_cast<char>(0xF0 | (c >> 18)), static_cast<char>(0x80 | ((c >> 12) & 0x3F)),
            static_cast<char>(0x80 | ((c >> 6) & 0x3F)), static_cast<char>(0x80 | (c & 0x3F))};
    return s;
  };
  for (char32_t c :
       {0x6Fu, 0x70u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xD7FFu, 0xD800u, 0xDFFFu, 0xE000u, 0xFFFFu, 0x10000u, 0x10FFFFu})
    EXPECT_EQ(rec.accepts(enc(c)), c >= 0x70 && (c < 0xD800 || c > 0xDFFF)) << std::hex << static_cast<uint32_t>(c);
  EXPECT_FALSE(rec.accepts("\xC0\x80"));          // overlong
  EXPECT_FALSE(rec.accepts("\xF4\x90\x80\x80"));  // past U+10FFFF
  EXPECT_FALSE(rec.accepts("\x80"));
}

}  // namespace
}  // namespace kiln::grammar

namespace kiln::grammar {
namespace {

TEST(TextRules, ExcludingAndUntilAgreeWithSubstringSearch) {
  std::mt19937 rng(3);
  const std::vector<std::string> markers = {"abc", "bca", "cc"};
  Grammar ex;
  ex.root = text_excluding(ex, "t", markers).index;
  Grammar until;
  until.root = text_until(until, "u", "abab").index;
  ex.validate();
  until.validate();
  Recognizer rex(ex), runtil(until);
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const size_t len = rng() % 10;
    for (size_t k = 0; k < len; ++k) s.push_back(static_cast<char>('a' + rng() % 3));
    bool has = false;
    for (const auto& m : markers) has = has || s.find(m) != std::string::npos;
    ASSERT_EQ(rex.accepts(s), !has) << s;
    const size_t at = s.find("abab");
    ASSERT_EQ(runtil.accepts(s), at != std::string::npos && at + 4 == s.size()) << s;
  }
  // Up to a terminator, never through another marker (reasoning that may not open a tool call).
  Grammar never;
  never.root = text_until(never, "n", "ab", {"ca"}).index;
  never.validate();
  Recognizer rn(never);
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const size_t len = rng() % 9;
    for (size_t k = 0; k < len; ++k) s.push_back(static_cast<char>('a' + rng() % 3));
    const size_t at = s.find("ab");
    const bool want = at != std::string::npos && at + 2 == s.size() && s.find("ca") == std::string::npos;
    ASSERT_EQ(rn.accepts(s), want) << s;
  }
}

}  // namespace
}  // namespace kiln::grammar

namespace kiln::grammar {
namespace {

// One compiled grammar, its mask cache shared by matchers on several threads (as requests on the
// engine's parallel sampling stage share it): every thread's masks equal a lone matcher's.
TEST(Matcher, ThreadsSharingOneGrammarGetTheMasksOfALoneMatcher) {
  auto tokens = abc_tokens();
  std::mt19937 rng(5);
  Grammar g;
  do {
    g = random_grammar(rng);
    try {
      Matcher probe(std::make_shared<const CompiledGrammar>(g, tokens));
      break;
    } catch (const GrammarError&) {
    }
  } while (true);
  // The walks each thread takes, and the masks a lone matcher gives along them.
  auto lone = std::make_shared<const CompiledGrammar>(g, tokens);
  std::vector<std::vector<int32_t>> walks(4);
  std::vector<std::vector<std::vector<uint64_t>>> want(4);
  for (size_t t = 0; t < walks.size(); ++t) {
    Matcher m(lone);
    std::mt19937 r(static_cast<unsigned>(t));
    for (int step = 0; step < 30; ++step) {
      std::vector<uint64_t> mask(tokens->mask_words());
      m.fill_mask(mask.data());
      want[t].push_back(mask);
      std::vector<int32_t> ok;
      for (size_t id = 0; id < tokens->vocab(); ++id)
        if (bit(mask, id) && !tokens->is_stop(static_cast<int32_t>(id))) ok.push_back(static_cast<int32_t>(id));
      if (ok.empty()) break;
      walks[t].push_back(ok[r() % ok.size()]);
      ASSERT_TRUE(m.accept_token(walks[t].back()));
    }
  }
  auto shared = std::make_shared<const CompiledGrammar>(g, tokens, 4096);  // small: eviction under contention
  std::vector<std::thread> threads;
  std::atomic<int> mismatches{0};
  for (size_t t = 0; t < walks.size(); ++t)
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        Matcher m(shared);
        std::vector<uint64_t> mask(tokens->mask_words());
        for (size_t k = 0; k < want[t].size(); ++k) {
          m.fill_mask(mask.data());
          if (mask != want[t][k]) ++mismatches;
          if (k < walks[t].size() && !m.accept_token(walks[t][k])) ++mismatches;
        }
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(mismatches.load(), 0);
}

}  // namespace
}  // namespace kiln::grammar

namespace kiln::grammar {
namespace {

// An ambiguous recursion doubles its open parses with every byte: the request fails with a clear
// error at the cap instead of taking the server's memory and time.
TEST(Matcher, AmbiguityBeyondTheCapsIsAnErrorNotABlowUp) {
  Grammar g;
  const uint32_t r = g.rule("r");
  g.define(r, {{g.byte('x'), Grammar::ref(r), g.byte('y')}, {g.byte('x'), Grammar::ref(r), g.byte('z')}, {}});
  g.root = r;
  Matcher m(std::make_shared<const CompiledGrammar>(g, abc_tokens()));
  bool refused = false;
  try {
    for (int i = 0; i < 64; ++i) m.accept_bytes("x");
  } catch (const GrammarError& e) {
    refused = std::string(e.what()).find("too ambiguous") != std::string::npos;
  }
  EXPECT_TRUE(refused);
}

// A chain of rule references as deep as the grammar is long closes without recursion.
TEST(Matcher, DeepReferenceChainsDoNotOverflowTheStack) {
  Grammar g;
  constexpr int kDepth = 200000;
  std::vector<uint32_t> ids;
  for (int i = 0; i < kDepth; ++i) ids.push_back(g.rule("r"));
  for (int i = 0; i + 1 < kDepth; ++i)
    g.define(ids[static_cast<size_t>(i)], {{Grammar::ref(ids[static_cast<size_t>(i) + 1]), g.byte('a')}});
  g.define(ids.back(), {{g.byte('b')}});
  g.root = ids[0];
  Matcher m(std::make_shared<const CompiledGrammar>(g, abc_tokens()));
  EXPECT_TRUE(m.accept_bytes("b"));
}

}  // namespace
}  // namespace kiln::grammar
