// tokenizer.json / tokenizer_config.json → TokenizerData. Anything we do not implement is refused
// with an error naming the component, never silently approximated.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <unordered_map>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "text/byte_level.hpp"
#include "text/tokenizer_data.hpp"
#include "text/utf8.hpp"

namespace kiln::text {

using json = nlohmann::json;

namespace {

std::atomic<std::uint64_t> g_next_uid{1};

std::string str_or(const json& j, const char* key, const std::string& def) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : def;
}
bool bool_or(const json& j, const char* key, bool def) {
  auto it = j.find(key);
  return it != j.end() && it->is_boolean() ? it->get<bool>() : def;
}
int int_or(const json& j, const char* key, int def) {
  auto it = j.find(key);
  return it != j.end() && it->is_number_integer() ? it->get<int>() : def;
}

Pattern parse_pattern(const json& j, const char* where) {
  Pattern p;
  if (j.is_object() && j.contains("String") && j["String"].is_string()) {
    p.literal = j["String"].get<std::string>();
  } else if (j.is_object() && j.contains("Regex") && j["Regex"].is_string()) {
    p.regex = std::make_shared<Regex>(j["Regex"].get<std::string>());
  } else {
    throw_error("[tokenizer] {}: pattern must be {{\"String\": ...}} or {{\"Regex\": ...}}", where);
  }
  return p;
}

void parse_normalizer(const json& j, std::vector<NormStep>& out) {
  if (j.is_null()) return;
  std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const json& s : j.value("normalizers", json::array())) parse_normalizer(s, out);
  } else if (type == "NFC") {
    out.emplace_back(NormStep::kNfc);
  } else if (type == "Replace") {
    out.emplace_back(NormStep::kReplace, parse_pattern(j.value("pattern", json()), "Replace normalizer"), str_or(j, "content", ""));
  } else if (type == "Prepend") {
    out.emplace_back(NormStep::kPrepend, Pattern{}, str_or(j, "prepend", ""));
  } else {
    throw_error("[tokenizer] normalizer '{}' is not supported (supported: NFC, Replace, Prepend, Sequence)", type);
  }
}

PreStep::Prepend parse_prepend(const json& j) {
  std::string s = str_or(j, "prepend_scheme", "");
  if (s.empty()) return bool_or(j, "add_prefix_space", true) ? PreStep::kAlways : PreStep::kNever;
  if (s == "always") return PreStep::kAlways;
  if (s == "first") return PreStep::kFirst;
  if (s == "never") return PreStep::kNever;
  throw_error("[tokenizer] Metaspace prepend_scheme '{}' is unknown (always, first, never)", s);
}

void parse_pre(const json& j, std::vector<PreStep>& out) {
  if (j.is_null()) return;
  std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const json& s : j.value("pretokenizers", json::array())) parse_pre(s, out);
  } else if (type == "Split") {
    PreStep s(PreStep::kSplit);
    s.pattern = parse_pattern(j.value("pattern", json()), "Split pre-tokenizer");
    std::string b = str_or(j, "behavior", "Isolated");
    if (b == "Removed") s.behavior = SplitBehavior::kRemoved;
    else if (b == "Isolated") s.behavior = SplitBehavior::kIsolated;
    else if (b == "MergedWithPrevious") s.behavior = SplitBehavior::kMergedWithPrevious;
    else if (b == "MergedWithNext") s.behavior = SplitBehavior::kMergedWithNext;
    else if (b == "Contiguous") s.behavior = SplitBehavior::kContiguous;
    else throw_error("[tokenizer] Split behavior '{}' is unknown", b);
    s.invert = bool_or(j, "invert", false);
    if (s.pattern.regex && s.behavior == SplitBehavior::kIsolated && !s.invert) {
      if (s.pattern.regex->pattern() == kQwen2Pattern) s.fast_digits = 1;
      if (s.pattern.regex->pattern() == kLlama3Pattern) s.fast_digits = 3;
    }
    out.push_back(std::move(s));
  } else if (type == "ByteLevel") {
    PreStep s(PreStep::kByteLevel);
    s.add_prefix_space = bool_or(j, "add_prefix_space", true);
    s.use_regex = bool_or(j, "use_regex", true);
    if (s.use_regex) s.pattern.regex = std::make_shared<Regex>(std::string(kGpt2Pattern));
    out.push_back(std::move(s));
  } else if (type == "Metaspace") {
    PreStep s(PreStep::kMetaspace);
    s.replacement = str_or(j, "replacement", "\xE2\x96\x81");
    s.prepend = parse_prepend(j);
    s.split = bool_or(j, "split", true);
    out.push_back(std::move(s));
  } else {
    throw_error("[tokenizer] pre-tokenizer '{}' is not supported (supported: Split, ByteLevel, Metaspace, Sequence)", type);
  }
}

void parse_decoder(const json& j, std::vector<DecStep>& out) {
  std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const json& s : j.value("decoders", json::array())) parse_decoder(s, out);
  } else if (type == "ByteLevel") {
    out.emplace_back(DecStep::kByteLevel);
  } else if (type == "ByteFallback") {
    out.emplace_back(DecStep::kByteFallback);
  } else if (type == "Fuse") {
    out.emplace_back(DecStep::kFuse);
  } else if (type == "Strip") {
    DecStep s(DecStep::kStrip);
    s.content = str_or(j, "content", " ");
    s.start = int_or(j, "start", 0);
    s.stop = int_or(j, "stop", 0);
    std::size_t len = 0;
    if (s.content.empty() || !utf8::is_valid(s.content) || (utf8::decode_at(s.content, 0, len), len != s.content.size()))
      throw_error("[tokenizer] Strip decoder content must be one character, got '{}'", s.content);
    out.push_back(std::move(s));
  } else if (type == "Replace") {
    DecStep s(DecStep::kReplace);
    s.pattern = parse_pattern(j.value("pattern", json()), "Replace decoder");
    s.content = str_or(j, "content", "");
    out.push_back(std::move(s));
  } else if (type == "Metaspace") {
    DecStep s(DecStep::kMetaspace);
    s.content = str_or(j, "replacement", "\xE2\x96\x81");
    s.strip_first_space = parse_prepend(j) != PreStep::kNever;
    out.push_back(std::move(s));
  } else {
    throw_error("[tokenizer] decoder '{}' is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, Replace, Metaspace, Sequence)", type);
  }
}

void parse_post(const json& j, TokenizerData& d) {
  if (j.is_null()) return;
  std::string type = str_or(j, "type", "");
  if (type == "Sequence") {
    for (const json& s : j.value("processors", json::array())) parse_post(s, d);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets; ids are unchanged.
  } else if (type == "TemplateProcessing") {
    const json& specials = j.value("special_tokens", json::object());
    bool seen_a = false;
    for (const json& item : j.value("single", json::array())) {
      if (item.contains("Sequence")) {
        seen_a = true;
      } else if (item.contains("SpecialToken")) {
        std::string name = str_or(item["SpecialToken"], "id", "");
        auto it = specials.find(name);
        if (it == specials.end() || !it->contains("ids"))
          throw_error("[tokenizer] TemplateProcessing names special token '{}' missing from its special_tokens", name);
        for (const json& id : (*it)["ids"]) (seen_a ? d.post_suffix : d.post_prefix).push_back(id.get<TokenId>());
      }
    }
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    d.post_prefix.push_back(j.at("cls").at(1).get<TokenId>());
    d.post_suffix.push_back(j.at("sep").at(1).get<TokenId>());
  } else {
    throw_error("[tokenizer] post-processor '{}' is not supported (supported: TemplateProcessing, ByteLevel, Bert/RobertaProcessing, Sequence)", type);
  }
}

std::string special_name(const json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object()) return str_or(*it, "content", "");
  return "";
}

// tokenizer.json is mostly model.vocab (150k-260k entries) and model.merges (150k-500k pairs). A DOM
// for those costs most of the load time, so a SAX pass streams them into flat lists and builds a
// DOM only for the rest (normalizer, pre-tokenizer, added tokens, ...).
struct BigParts {
  std::vector<std::pair<std::string, std::int64_t>> vocab;
  std::vector<std::pair<std::string, std::string>> merges;  // second empty and first "a b": legacy form
  bool vocab_seen = false, merges_seen = false;
};

class LoaderSax : public nlohmann::json_sax<json> {
 public:
  LoaderSax(json& root, BigParts& big) : root_(root), big_(big) {}

  bool null() override { return value(json()); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return number(v); }
  bool number_unsigned(number_unsigned_t v) override { return number(static_cast<std::int64_t>(v)); }
  bool number_float(number_float_t v, const string_t&) override {
    if (mode_ != kDom) return fail("a vocabulary id or merge is not an integer/string");
    return value(v);
  }
  bool string(string_t& v) override {
    if (mode_ == kMerges) { big_.merges.emplace_back(std::move(v), std::string()); return true; }
    if (mode_ == kMergePair) {
      if (pair_n_ == 0) big_.merges.emplace_back(std::move(v), std::string());
      else if (pair_n_ == 1) big_.merges.back().second = std::move(v);
      else return fail("a merge has more than two parts");
      ++pair_n_;
      return true;
    }
    if (mode_ == kVocab) return fail("a vocabulary id is not an integer");
    return value(std::move(v));
  }
  bool binary(binary_t&) override { return fail("binary values are not JSON"); }
  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }
  bool start_object(std::size_t) override {
    if (mode_ == kDom && in_model() && key_ == "vocab") { mode_ = kVocab; big_.vocab_seen = true; big_.vocab.reserve(1 << 18); return true; }
    if (mode_ != kDom) return fail("unexpected object inside model.vocab or model.merges");
    return open(json::object());
  }
  bool end_object() override {
    if (mode_ == kVocab) { mode_ = kDom; return true; }
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t) override {
    if (mode_ == kDom && in_model() && key_ == "merges") { mode_ = kMerges; big_.merges_seen = true; big_.merges.reserve(1 << 19); return true; }
    if (mode_ == kMerges) { mode_ = kMergePair; pair_n_ = 0; return true; }
    if (mode_ != kDom) return fail("unexpected array inside model.vocab or a merge");
    return open(json::array());
  }
  bool end_array() override {
    if (mode_ == kMergePair) {
      if (pair_n_ != 2) return fail("a merge is not a pair");
      mode_ = kMerges;
      return true;
    }
    if (mode_ == kMerges) { mode_ = kDom; return true; }
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t pos, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = fmt::format("at byte {}: {}", pos, e.what());
    return false;
  }
  const std::string& error() const { return error_; }

 private:
  enum Mode { kDom, kVocab, kMerges, kMergePair };
  bool in_model() const { return stack_.size() == 2 && stack_[0] == &root_ && depth_keys_model_; }
  bool fail(const std::string& m) {
    error_ = m;
    return false;
  }
  bool number(std::int64_t v) {
    if (mode_ == kVocab) { big_.vocab.emplace_back(std::move(key_), v); return true; }
    if (mode_ != kDom) return fail("a merge part is not a string");
    return value(v);
  }
  json* place(json&& v) {
    if (stack_.empty()) { root_ = std::move(v); return &root_; }
    json& top = *stack_.back();
    if (top.is_object()) {
      json& slot = top[key_];
      slot = std::move(v);
      return &slot;
    }
    top.push_back(std::move(v));
    return &top.back();
  }
  bool value(json&& v) {
    place(std::move(v));
    return true;
  }
  bool open(json&& v) {
    bool model = stack_.size() == 1 && key_ == "model";
    json* p = place(std::move(v));
    stack_.push_back(p);
    if (stack_.size() == 2) depth_keys_model_ = model;
    return true;
  }

  json& root_;
  BigParts& big_;
  std::vector<json*> stack_;
  std::string key_, error_;
  Mode mode_ = kDom;
  int pair_n_ = 0;
  bool depth_keys_model_ = false;
};

void build_model(const json& m, BigParts& big, TokenizerData& d) {
  std::string type = str_or(m, "type", "BPE");
  if (type != "BPE") throw_error("[tokenizer] model type '{}' is not supported (only BPE)", type);
  if (!str_or(m, "continuing_subword_prefix", "").empty() || !str_or(m, "end_of_word_suffix", "").empty())
    throw_error("[tokenizer] BPE continuing_subword_prefix / end_of_word_suffix are not supported");
  if (m.contains("dropout") && m["dropout"].is_number() && m["dropout"].get<double>() > 0)
    throw_error("[tokenizer] BPE dropout is not supported (it makes encoding random)");
  Bpe& b = d.bpe;
  if (!big.vocab_seen) throw_error("[tokenizer] model.vocab must be an object of token → id");
  std::size_t max_id = 0;
  for (const auto& [tok, id] : big.vocab) {
    if (id < 0 || id > INT32_MAX) throw_error("[tokenizer] id {} for token '{}' is out of range", id, tok);
    max_id = std::max(max_id, static_cast<std::size_t>(id) + 1);
  }
  b.vocab.build(big.vocab);
  if (!d.byte_level) {
    b.bmp_chars.assign(0x10000, -1);
    b.vocab.for_each([&](std::string_view tok, TokenId id) {
      std::size_t len;
      if (!tok.empty() && tok.size() < 4 && utf8::is_valid(tok) && (utf8::decode_at(tok, 0, len), len == tok.size())) {
        auto& slot = b.bmp_chars[utf8::decode_at(tok, 0, len)];
        if (slot < 0) slot = id;
      }
    });
  }
  big.vocab = {};
  b.max_id = max_id;
  b.byte_fallback = bool_or(m, "byte_fallback", false);
  b.ignore_merges = bool_or(m, "ignore_merges", false);
  b.fuse_unk = bool_or(m, "fuse_unk", false);
  std::string unk = str_or(m, "unk_token", "");
  if (!unk.empty()) {
    b.unk = b.vocab.find(unk);
    if (b.unk < 0) throw_error("[tokenizer] unk_token '{}' is not in the vocabulary", unk);
  }
  if (d.byte_level) {
    const auto& t = byte_level::tables();
    for (int byte = 0; byte < 256; ++byte) {
      std::string s;
      utf8::append(s, t.to_char[static_cast<std::size_t>(byte)]);
      TokenId id = b.vocab.find(s);
      if (id < 0) throw_error("[tokenizer] byte-level vocabulary lacks the token for byte {:#04x} ('{}')", byte, s);
      b.byte_ids[static_cast<std::size_t>(byte)] = id;
    }
  } else if (b.byte_fallback) {
    for (int byte = 0; byte < 256; ++byte) {
      std::string s = fmt::format("<0x{:02X}>", byte);
      TokenId id = b.vocab.find(s);
      if (id < 0) throw_error("[tokenizer] byte_fallback is set but the vocabulary lacks '{}'", s);
      b.byte_ids[static_cast<std::size_t>(byte)] = id;
    }
  }
  b.merges.reserve(big.merges.size());
  std::string left, right, joined;
  std::int32_t rank = 0;
  for (auto& [first, second] : big.merges) {
    if (second.empty()) {  // legacy "left right" string
      auto sp = first.find(' ', 1);
      if (sp == std::string::npos) throw_error("[tokenizer] merge '{}' is not 'left right'", first);
      left.assign(first, 0, sp);
      right.assign(first, sp + 1);
    } else {
      left.swap(first);
      right.swap(second);
    }
    joined = left + right;
    TokenId a = b.vocab.find(left), c = b.vocab.find(right), r = b.vocab.find(joined);
    if (a < 0 || c < 0 || r < 0)
      throw_error("[tokenizer] merge #{} ('{}' + '{}') uses or makes a token missing from the vocabulary", rank, left, right);
    b.merges.insert(a, c, {rank, r});
    ++rank;
  }
}

}  // namespace

void AddedMatcher::insert(std::string_view s, std::int32_t token) {
  if (s.empty()) return;
  std::int32_t cur = 0;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    auto& next = nodes[static_cast<std::size_t>(cur)].next;
    auto it = std::lower_bound(next.begin(), next.end(), c, [](const auto& e, unsigned char v) { return e.first < v; });
    if (it != next.end() && it->first == c) {
      cur = it->second;
    } else {
      auto idx = static_cast<std::int32_t>(nodes.size());
      next.insert(it, {c, idx});
      nodes.emplace_back();
      cur = idx;
    }
  }
  auto& slot = nodes[static_cast<std::size_t>(cur)].token;
  if (slot < 0) slot = token;
  first[static_cast<unsigned char>(s[0])] = true;
}

std::int32_t AddedMatcher::longest_at(std::string_view s, std::size_t i, std::size_t& end) const {
  std::int32_t cur = 0, best = -1;
  for (std::size_t j = i; j < s.size(); ++j) {
    auto c = static_cast<unsigned char>(s[j]);
    const auto& next = nodes[static_cast<std::size_t>(cur)].next;
    auto it = std::lower_bound(next.begin(), next.end(), c, [](const auto& e, unsigned char v) { return e.first < v; });
    if (it == next.end() || it->first != c) break;
    cur = it->second;
    if (nodes[static_cast<std::size_t>(cur)].token >= 0) { best = nodes[static_cast<std::size_t>(cur)].token; end = j + 1; }
  }
  return best;
}

std::shared_ptr<TokenizerData> load_tokenizer_json(std::string_view tokenizer_json, std::string_view config_json) {
  json j, cfg;
  BigParts big;
  {
    LoaderSax sax(j, big);
    bool ok = false;
    try {
      ok = json::sax_parse(tokenizer_json, &sax);
    } catch (const json::exception& e) {
      throw_error("[tokenizer] tokenizer.json is not valid JSON: {}", e.what());
    }
    if (!ok) throw_error("[tokenizer] tokenizer.json is not valid JSON or has an unexpected shape: {}", sax.error());
  }
  try {
    if (!config_json.empty()) cfg = json::parse(config_json);
  } catch (const json::exception& e) {
    throw_error("[tokenizer] tokenizer_config.json is not valid JSON: {}", e.what());
  }
  auto d = std::make_shared<TokenizerData>();
  d->uid = g_next_uid++;
  try {
    if (!j.is_object() || !j.contains("model")) throw_error("[tokenizer] tokenizer.json has no 'model' object");
    parse_normalizer(j.value("normalizer", json()), d->normalizers);
    parse_pre(j.value("pre_tokenizer", json()), d->pre);
    for (std::size_t i = 0; i < d->pre.size(); ++i)
      if (d->pre[i].kind == PreStep::kByteLevel) {
        if (i + 1 != d->pre.size()) throw_error("[tokenizer] a ByteLevel pre-tokenizer must be the last pre-tokenizer step");
        d->byte_level = true;
      }
    build_model(j["model"], big, *d);
    parse_post(j.value("post_processor", json()), *d);
    if (j.contains("decoder") && !j["decoder"].is_null()) {
      parse_decoder(j["decoder"], d->decoders);
      d->has_decoder = true;
    }

    d->id_to_token.resize(d->bpe.max_id);
    d->bpe.vocab.for_each([&](std::string_view tok, TokenId id) { d->id_to_token[static_cast<std::size_t>(id)] = tok; });
    for (const json& a : j.value("added_tokens", json::array())) {
      AddedTokenSpec t;
      t.id = a.at("id").get<TokenId>();
      t.content = a.at("content").get<std::string>();
      t.special = bool_or(a, "special", false);
      t.lstrip = bool_or(a, "lstrip", false);
      t.rstrip = bool_or(a, "rstrip", false);
      t.normalized = bool_or(a, "normalized", !t.special);
      t.single_word = bool_or(a, "single_word", false);
      if (t.id < 0) throw_error("[tokenizer] added token '{}' has negative id {}", t.content, t.id);
      if (!utf8::is_valid(t.content)) throw_error("[tokenizer] added token {} is not valid UTF-8", t.id);
      d->added.push_back(std::move(t));
    }
    for (std::size_t k = 0; k < d->added.size(); ++k) {
      const AddedTokenSpec& t = d->added[k];
      if (static_cast<std::size_t>(t.id) >= d->id_to_token.size()) d->id_to_token.resize(static_cast<std::size_t>(t.id) + 1);
      d->id_to_token[static_cast<std::size_t>(t.id)] = t.content;
      d->added_by_id[t.id] = static_cast<std::int32_t>(k);
      d->added_by_content.emplace(t.content, t.id);
      if (t.normalized && !d->normalizers.empty()) {
        std::string n;
        normalize(*d, t.content, n);
        d->added_normalized.insert(n, static_cast<std::int32_t>(k));
      } else {
        d->added_raw.insert(t.content, static_cast<std::int32_t>(k));
      }
    }
    for (TokenId id : d->post_prefix)
      if (static_cast<std::size_t>(id) >= d->id_to_token.size()) throw_error("[tokenizer] post-processor id {} is out of range", id);
    for (TokenId id : d->post_suffix)
      if (static_cast<std::size_t>(id) >= d->id_to_token.size()) throw_error("[tokenizer] post-processor id {} is out of range", id);

    if (cfg.is_object()) {
      d->bos_token = special_name(cfg, "bos_token");
      d->eos_token = special_name(cfg, "eos_token");
      d->pad_token = special_name(cfg, "pad_token");
    }
  } catch (const json::exception& e) {
    throw_error("[tokenizer] tokenizer.json has an unexpected shape: {}", e.what());
  }
  return d;
}

namespace {
std::string read_file(const std::string& path, bool required) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    if (required) throw_error("[tokenizer] cannot open {}: give a model directory holding tokenizer.json", path);
    return {};
  }
  std::ostringstream ss;
  ss << f.rdbuf();
  return std::move(ss).str();
}
}  // namespace

Tokenizer Tokenizer::from_dir(const std::string& dir) {
  std::string tj = read_file(dir + "/tokenizer.json", true);
  std::string cj = read_file(dir + "/tokenizer_config.json", false);
  return Tokenizer(load_tokenizer_json(tj, cj));
}

Tokenizer Tokenizer::from_json(std::string_view tokenizer_json, std::string_view config_json) {
  return Tokenizer(load_tokenizer_json(tokenizer_json, config_json));
}

Tokenizer Tokenizer::from_vocab(const VocabSpec& spec) {
  // Expressed as the equivalent tokenizer.json so both paths share one loader.
  json j;
  json vocab = json::object();
  for (std::size_t i = 0; i < spec.tokens.size(); ++i)
    if (!spec.tokens[i].empty()) vocab[spec.tokens[i]] = static_cast<TokenId>(i);
  json merges = json::array();
  for (const auto& [a, b] : spec.merges) merges.push_back(json::array({a, b}));
  if (spec.merges.empty() && !spec.scores.empty()) {
    // Hugging Face's SentencePieceExtractor: for each token, every split into two vocabulary tokens
    // (ordered by their ids), all ranked by the token's score, highest first (stable).
    if (spec.scores.size() != spec.tokens.size())
      throw_error("[tokenizer] VocabSpec has {} scores for {} tokens", spec.scores.size(), spec.tokens.size());
    std::unordered_map<std::string_view, TokenId> ids;
    for (std::size_t i = 0; i < spec.tokens.size(); ++i) ids.emplace(spec.tokens[i], static_cast<TokenId>(i));
    struct M { std::string_view a, b; float score; TokenId ia, ib; };
    std::vector<M> all;
    for (std::size_t t = 0; t < spec.tokens.size(); ++t) {
      std::string_view tok = spec.tokens[t];
      if (!utf8::is_valid(tok)) continue;
      std::vector<M> local;
      for (std::size_t cut = utf8::seq_len(static_cast<unsigned char>(tok.empty() ? 0 : tok[0])); cut < tok.size();
           cut += utf8::seq_len(static_cast<unsigned char>(tok[cut]))) {
        auto l = ids.find(tok.substr(0, cut)), r = ids.find(tok.substr(cut));
        if (l != ids.end() && r != ids.end()) local.push_back({l->first, r->first, spec.scores[t], l->second, r->second});
      }
      std::sort(local.begin(), local.end(), [](const M& x, const M& y) { return x.ia != y.ia ? x.ia < y.ia : x.ib < y.ib; });
      all.insert(all.end(), local.begin(), local.end());
    }
    std::stable_sort(all.begin(), all.end(), [](const M& x, const M& y) { return x.score > y.score; });
    for (const M& m : all) merges.push_back(json::array({std::string(m.a), std::string(m.b)}));
  }
  json model = {{"type", "BPE"}, {"vocab", std::move(vocab)}, {"merges", std::move(merges)}};
  auto token_name = [&](std::optional<TokenId> id) -> std::string {
    if (!id || *id < 0 || static_cast<std::size_t>(*id) >= spec.tokens.size())
      throw_error("[tokenizer] VocabSpec special id is outside the {} tokens", spec.tokens.size());
    return spec.tokens[static_cast<std::size_t>(*id)];
  };
  if (spec.unk) model["unk_token"] = token_name(spec.unk);
  if (spec.type == VocabSpec::Type::kByteLevelBpe) {
    std::string re = spec.split_regex.empty() ? std::string(kGpt2Pattern) : spec.split_regex;
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"}, {"pattern", {{"Regex", re}}}, {"behavior", "Isolated"}, {"invert", false}},
                            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}}}};
    j["decoder"] = {{"type", "ByteLevel"}};
  } else {
    model["byte_fallback"] = true;
    model["fuse_unk"] = true;
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"},
                          {"prepend_scheme", spec.add_space_prefix ? "first" : "never"}, {"split", false}};
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders",
                     {{{"type", "Metaspace"}, {"replacement", "\xE2\x96\x81"}, {"prepend_scheme", spec.add_space_prefix ? "first" : "never"}},
                      {{"type", "ByteFallback"}},
                      {{"type", "Fuse"}}}}};
  }
  j["model"] = std::move(model);
  json added = json::array();
  for (const auto& a : spec.added)
    added.push_back({{"id", a.id}, {"content", a.content}, {"special", a.special}, {"lstrip", a.lstrip},
                     {"rstrip", a.rstrip}, {"normalized", a.normalized}, {"single_word", a.single_word}});
  j["added_tokens"] = std::move(added);
  json single = json::array();
  json specials = json::object();
  if (spec.add_bos) {
    std::string n = token_name(spec.bos);
    single.push_back({{"SpecialToken", {{"id", n}, {"type_id", 0}}}});
    specials[n] = {{"id", n}, {"ids", {*spec.bos}}, {"tokens", {n}}};
  }
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (spec.add_eos) {
    std::string n = token_name(spec.eos);
    single.push_back({{"SpecialToken", {{"id", n}, {"type_id", 0}}}});
    specials[n] = {{"id", n}, {"ids", {*spec.eos}}, {"tokens", {n}}};
  }
  j["post_processor"] = {{"type", "TemplateProcessing"}, {"single", std::move(single)}, {"special_tokens", std::move(specials)}};
  json cfg = json::object();
  if (spec.bos) cfg["bos_token"] = token_name(spec.bos);
  if (spec.eos) cfg["eos_token"] = token_name(spec.eos);
  return Tokenizer(load_tokenizer_json(j.dump(), cfg.dump()));
}

}  // namespace kiln::text
