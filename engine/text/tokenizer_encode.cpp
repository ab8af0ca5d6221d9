// Encoding: repair UTF-8 → split out added tokens → normalize → pre-tokenize → BPE (cached per word).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <unordered_map>

#include "core/error.hpp"
#include "text/tokenizer_data.hpp"
#include "text/unicode.hpp"
#include "text/utf8.hpp"

namespace kiln::text {

namespace {

// Per-thread cache of word → ids, so concurrent encodes never lock: open addressing over an arena
// of word bytes and a flat id store (no allocation per entry).
class WordCache {
 public:
  std::uint64_t owner = 0;

  void reset(std::uint64_t uid) {
    owner = uid;
    keys_.clear();
    store_.clear();
    slots_.assign(1 << 14, Slot{});
    count_ = 0;
  }
  /** The cached ids of `w`, or false. */
  bool find(std::string_view w, std::size_t h, const TokenId*& ids, std::size_t& n) const {
    if (slots_.empty()) return false;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.klen == 0) return false;
      if (s.hash == h && s.klen == w.size() && std::memcmp(keys_.data() + s.koff, w.data(), w.size()) == 0) {
        ids = store_.data() + s.voff;
        n = s.vlen;
        return true;
      }
    }
  }
  void insert(std::string_view w, std::size_t h, const std::vector<TokenId>& ids) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = h & mask;
    while (slots_[i].klen != 0) i = (i + 1) & mask;
    slots_[i] = {h, static_cast<std::uint32_t>(keys_.size()), static_cast<std::uint32_t>(w.size()),
                 static_cast<std::uint32_t>(store_.size()), static_cast<std::uint32_t>(ids.size())};
    keys_.append(w);
    store_.insert(store_.end(), ids.begin(), ids.end());
    ++count_;
  }
  std::size_t size() const { return count_; }

 private:
  struct Slot {
    std::size_t hash = 0;
    std::uint32_t koff = 0, klen = 0, voff = 0, vlen = 0;  // klen == 0: empty
  };
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(old.size() * 2, Slot{});
    const std::size_t mask = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.klen == 0) continue;
      std::size_t i = s.hash & mask;
      while (slots_[i].klen != 0) i = (i + 1) & mask;
      slots_[i] = s;
    }
  }
  std::string keys_;
  std::vector<TokenId> store_;
  std::vector<Slot> slots_;
  std::size_t count_ = 0;
};
thread_local WordCache tl_cache;
constexpr std::size_t kMaxCachedWordBytes = 128;
constexpr std::size_t kMaxCacheEntries = 1 << 18;

void replace_all(std::string_view in, const Pattern& p, std::string_view content, std::string& out) {
  std::size_t last = 0;
  if (p.regex) {
    for (auto [b, e] : p.regex->find_all(in)) {
      out.append(in.substr(last, b - last));
      out.append(content);
      last = e;
    }
  } else if (!p.literal.empty()) {
    for (std::size_t pos; (pos = in.find(p.literal, last)) != std::string_view::npos; last = pos + p.literal.size()) {
      out.append(in.substr(last, pos - last));
      out.append(content);
    }
  }
  out.append(in.substr(last));
}

// True when the normalizers would return `s` unchanged (the common case: ASCII text and NFC), so
// the segment is used in place instead of being copied through each step.
bool normalize_is_noop(const TokenizerData& d, std::string_view s) {
  for (const NormStep& st : d.normalizers) {
    switch (st.kind) {
      case NormStep::kNfc:
        if (uni::maybe_needs_nfc(s)) return false;
        break;
      case NormStep::kReplace:
        if (st.pattern.regex || st.pattern.literal.empty() || s.find(st.pattern.literal) != std::string_view::npos) return false;
        break;
      case NormStep::kPrepend:
        if (!s.empty()) return false;
        break;
    }
  }
  return true;
}

struct Encoder {
  const TokenizerData& d;
  std::vector<TokenId>& out;
  std::vector<TokenId> syms;
  std::string scratch;

  void word(std::string_view w) {
    if (w.empty()) return;
    const Bpe& b = d.bpe;
    if (d.byte_level && w.size() == 1) {
      out.push_back(b.byte_ids[static_cast<unsigned char>(w[0])]);
      return;
    }
    const bool cacheable = w.size() <= kMaxCachedWordBytes;
    WordCache& c = tl_cache;
    std::size_t h = 0;
    if (cacheable) {
      if (c.owner != d.uid) c.reset(d.uid);
      h = std::hash<std::string_view>{}(w);
      const TokenId* ids;
      std::size_t n;
      if (c.find(w, h, ids, n)) {
        out.insert(out.end(), ids, ids + n);
        return;
      }
    }
    syms.clear();
    if (d.byte_level) {
      if (b.ignore_merges) {
        scratch.clear();
        const auto& t = byte_level_chars();
        for (char ch : w) scratch.append(t[static_cast<unsigned char>(ch)]);
        if (TokenId id = b.vocab.find(scratch); id >= 0) syms.push_back(id);
      }
      if (syms.empty()) {
        for (char ch : w) syms.push_back(b.byte_ids[static_cast<unsigned char>(ch)]);
        b.merge(syms);
      }
    } else {
      if (b.ignore_merges) {
        if (TokenId id = b.vocab.find(w); id >= 0) syms.push_back(id);
      }
      if (syms.empty()) {
        b.char_symbols(w, syms);
        b.merge(syms);
      }
    }
    out.insert(out.end(), syms.begin(), syms.end());
    if (cacheable) {
      if (c.size() >= kMaxCacheEntries) c.reset(d.uid);
      c.insert(w, h, syms);
    }
  }

  static const std::array<std::string, 256>& byte_level_chars();

  struct Piece {
    std::string s;
    bool at_origin;
  };

  // Splits one piece by a Split step into `out` (HF SplitDelimiterBehavior semantics).
  static void split_piece(const PreStep& st, Piece&& p, std::vector<Piece>& outp) {
    std::vector<std::pair<std::size_t, std::size_t>> m = st.pattern.regex ? st.pattern.regex->find_all(p.s) : st.pattern.find_all(p.s);
    const std::size_t n = p.s.size();
    if (st.invert) {  // the pattern describes the pieces to keep; the gaps become the delimiters
      std::vector<std::pair<std::size_t, std::size_t>> gaps;
      std::size_t last = 0;
      for (auto [b, e] : m) {
        if (b > last) gaps.emplace_back(last, b);
        last = e;
      }
      if (last < n) gaps.emplace_back(last, n);
      m = std::move(gaps);
    }
    // Pieces as (begin, end, is_delimiter).
    struct Seg { std::size_t b, e; bool delim; };
    std::vector<Seg> segs;
    std::size_t last = 0;
    for (auto [b, e] : m) {
      if (b > last) segs.push_back({last, b, false});
      segs.push_back({b, e, true});
      last = e;
    }
    if (last < n) segs.push_back({last, n, false});
    std::vector<std::pair<std::size_t, std::size_t>> res;
    switch (st.behavior) {
      case SplitBehavior::kRemoved:
        for (auto& s : segs) if (!s.delim) res.emplace_back(s.b, s.e);
        break;
      case SplitBehavior::kIsolated:
        for (auto& s : segs) res.emplace_back(s.b, s.e);
        break;
      case SplitBehavior::kContiguous: {
        bool prev_delim = false;
        for (auto& s : segs) {
          if (s.delim && prev_delim) res.back().second = s.e;
          else res.emplace_back(s.b, s.e);
          prev_delim = s.delim;
        }
        break;
      }
      case SplitBehavior::kMergedWithPrevious: {
        bool prev_nondelim = false;
        for (auto& s : segs) {
          if (s.delim && prev_nondelim) res.back().second = s.e;
          else res.emplace_back(s.b, s.e);
          prev_nondelim = !s.delim;
        }
        break;
      }
      case SplitBehavior::kMergedWithNext: {
        bool prev_delim = false;
        for (auto& s : segs) {
          if (!s.delim && prev_delim) res.back().second = s.e;
          else res.emplace_back(s.b, s.e);
          prev_delim = s.delim;
        }
        break;
      }
    }
    for (auto [b, e] : res)
      if (e > b) outp.push_back({p.s.substr(b, e - b), p.at_origin && b == 0});
  }

  void pretokenize(std::string_view s, bool at_origin) {
    const auto& pre = d.pre;
    if (pre.size() == 2 && pre[0].kind == PreStep::kSplit && pre[0].fast_digits > 0 && pre[1].kind == PreStep::kByteLevel &&
        !pre[1].add_prefix_space && !pre[1].use_regex) {
      split_gpt4_style(s, pre[0].fast_digits, [&](std::size_t b, std::size_t e) { word(s.substr(b, e - b)); });
      return;
    }
    if (pre.empty()) { word(s); return; }
    std::vector<Piece> pieces{{std::string(s), at_origin}}, next;
    for (const PreStep& st : pre) {
      next.clear();
      for (Piece& p : pieces) {
        switch (st.kind) {
          case PreStep::kSplit:
            if (st.fast_digits > 0) {
              split_gpt4_style(p.s, st.fast_digits, [&](std::size_t b, std::size_t e) { next.push_back({p.s.substr(b, e - b), p.at_origin && b == 0}); });
            } else {
              split_piece(st, std::move(p), next);
            }
            break;
          case PreStep::kByteLevel: {
            if (st.add_prefix_space && (p.s.empty() || p.s[0] != ' ')) p.s.insert(0, " ");
            if (st.use_regex) split_piece(st, std::move(p), next);
            else next.push_back(std::move(p));
            break;
          }
          case PreStep::kMetaspace: {
            std::string r;
            replace_all(p.s, Pattern{" ", nullptr}, st.replacement, r);
            bool starts = r.compare(0, st.replacement.size(), st.replacement) == 0;
            if (!starts && (st.prepend == PreStep::kAlways || (st.prepend == PreStep::kFirst && p.at_origin))) r.insert(0, st.replacement);
            if (st.split) {
              PreStep sp(PreStep::kSplit);
              sp.pattern.literal = st.replacement;
              sp.behavior = SplitBehavior::kMergedWithNext;
              split_piece(sp, Piece{std::move(r), p.at_origin}, next);
            } else {
              next.push_back({std::move(r), p.at_origin});
            }
            break;
          }
        }
      }
      pieces.swap(next);
    }
    for (const Piece& p : pieces) word(p.s);
  }

  // Segment of text between raw added tokens: normalize, then split out normalized added tokens.
  void segment(std::string_view s, bool at_origin) {
    if (d.normalizers.empty() || normalize_is_noop(d, s)) {
      if (d.added_normalized.empty()) { pretokenize(s, at_origin); return; }
    }
    std::string n;
    normalize(d, s, n);
    if (d.added_normalized.empty()) { pretokenize(n, at_origin); return; }
    segment_identity = n == s;  // then positions in n are positions in the input
    with_added(d.added_normalized, n, [&](std::string_view t, std::size_t off) { pretokenize(t, at_origin && off == 0); },
               segment_offset, true);
  }

  bool allow_special = true;
  const std::vector<std::pair<std::size_t, std::size_t>>* text_only = nullptr;
  std::size_t segment_offset = 0, segment_len = 0;  // the segment being normalised, in the input
  bool segment_identity = false;                     // normalising left it unchanged

  /** Whether [b, e) of the input overlaps a text-only range. */
  bool in_text_only(std::size_t b, std::size_t e) const {
    if (!text_only || text_only->empty()) return false;
    auto it = std::upper_bound(text_only->begin(), text_only->end(), std::make_pair(b, SIZE_MAX));
    if (it != text_only->begin() && std::prev(it)->second > b) return true;
    return it != text_only->end() && it->first < e;
  }

  // HF AddedVocabulary::find_matches: leftmost-longest over all added tokens; a special token that is
  // not allowed, or a single_word token not on word boundaries, is left in the text.
  template <class F>
  void with_added(const AddedMatcher& m, std::string_view s, F&& text, std::size_t base = 0, bool normalized = false) {
    std::size_t start_offset = 0, i = 0;
    const std::size_t n = s.size();
    while (i < n) {
      if (!m.first[static_cast<unsigned char>(s[i])]) { ++i; continue; }
      std::size_t end = 0;
      std::int32_t k = m.longest_at(s, i, end);
      if (k < 0) { ++i; continue; }
      const AddedTokenSpec& t = d.added[static_cast<std::size_t>(k)];
      // Positions in a normalised segment do not map back to the input: a text-only range anywhere
      // in the segment keeps its special tokens text.
      const bool text_here = normalized && !segment_identity ? in_text_only(base, base + segment_len)
                                                             : in_text_only(base + i, base + end);
      if (t.special && (!allow_special || text_here)) { i = end; continue; }
      if (t.single_word) {
        bool left_ok = true, right_ok = true;
        if (i > 0) {
          std::size_t p = i - 1;
          while (p > 0 && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
          std::size_t len;
          left_ok = !uni::is_word_char(utf8::decode_at(s, p, len));
        }
        if (end < n) {
          std::size_t len;
          right_ok = !uni::is_word_char(utf8::decode_at(s, end, len));
        }
        if (!left_ok || !right_ok) { i = end; continue; }
      }
      std::size_t b = i, e = end;
      if (t.lstrip) {
        while (b > start_offset) {
          std::size_t p = b - 1;
          while (p > start_offset && (static_cast<unsigned char>(s[p]) & 0xC0) == 0x80) --p;
          std::size_t len;
          if (!uni::is_whitespace(utf8::decode_at(s, p, len))) break;
          b = p;
        }
      }
      if (t.rstrip) {
        while (e < n) {
          std::size_t len;
          if (!uni::is_whitespace(utf8::decode_at(s, e, len))) break;
          e += len;
        }
      }
      if (b > start_offset) text(s.substr(start_offset, b - start_offset), start_offset);
      out.push_back(t.id);
      start_offset = e;
      i = e;
    }
    if (start_offset < n) text(s.substr(start_offset), start_offset);
  }
};

const std::array<std::string, 256>& Encoder::byte_level_chars() {
  static const std::array<std::string, 256> t = [] {
    std::array<std::string, 256> r;
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      utf8::append(r[static_cast<std::size_t>(b)], printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + extra++));
    }
    return r;
  }();
  return t;
}

}  // namespace

std::vector<std::pair<std::size_t, std::size_t>> Pattern::find_all(std::string_view s) const {
  if (regex) return regex->find_all(s);
  std::vector<std::pair<std::size_t, std::size_t>> r;
  if (literal.empty()) return r;
  for (std::size_t pos = 0; (pos = s.find(literal, pos)) != std::string_view::npos; pos += literal.size())
    r.emplace_back(pos, pos + literal.size());
  return r;
}

void normalize(const TokenizerData& d, std::string_view in, std::string& out) {
  std::string cur(in), next;
  for (const NormStep& st : d.normalizers) {
    next.clear();
    switch (st.kind) {
      case NormStep::kNfc:
        uni::nfc(cur, next);
        break;
      case NormStep::kReplace:
        replace_all(cur, st.pattern, st.content, next);
        break;
      case NormStep::kPrepend:
        if (!cur.empty()) next = st.content;
        next += cur;
        break;
    }
    cur.swap(next);
  }
  out.append(cur);
}

void Tokenizer::encode_append(std::string_view text, std::vector<TokenId>& out, const EncodeOptions& opts) const {
  const TokenizerData& d = *data_;
  std::string repaired;
  if (!utf8::is_valid(text)) {
    utf8::append_lossy(repaired, text);
    text = repaired;
  }
  if (opts.add_special) out.insert(out.end(), d.post_prefix.begin(), d.post_prefix.end());
  Encoder e{d, out, {}, {}};
  e.allow_special = opts.allow_special;
  // Ranges index the text as given; a lossy UTF-8 repair moves them, so then none applies (request
  // text arrives as valid UTF-8 through JSON).
  e.text_only = repaired.empty() ? &opts.text_only : nullptr;
  e.segment_len = text.size();
  if (d.added_raw.empty()) e.segment(text, true);
  else e.with_added(d.added_raw, text, [&](std::string_view t, std::size_t off) { e.segment_offset = off; e.segment_len = t.size(); e.segment(t, off == 0); });
  if (opts.add_special) out.insert(out.end(), d.post_suffix.begin(), d.post_suffix.end());
}

std::vector<TokenId> Tokenizer::encode(std::string_view text, const EncodeOptions& opts) const {
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 4);
  encode_append(text, out, opts);
  return out;
}

std::size_t Tokenizer::vocab_size() const { return data_->id_to_token.size(); }

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  std::string key(token);
  if (auto it = data_->added_by_content.find(key); it != data_->added_by_content.end()) return it->second;
  if (TokenId id = data_->bpe.vocab.find(key); id >= 0) return id;
  return std::nullopt;
}

std::string_view Tokenizer::id_to_token(TokenId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= data_->id_to_token.size()) return {};
  return data_->id_to_token[static_cast<std::size_t>(id)];
}

bool Tokenizer::is_special(TokenId id) const { return data_->is_special(id); }

std::vector<std::string> Tokenizer::special_token_texts() const {
  std::vector<std::string> out;
  for (const AddedTokenSpec& t : data_->added)
    if (t.special) out.push_back(t.content);
  return out;
}
std::optional<TokenId> Tokenizer::bos_id() const { return data_->bos_token.empty() ? std::nullopt : token_to_id(data_->bos_token); }
std::optional<TokenId> Tokenizer::eos_id() const { return data_->eos_token.empty() ? std::nullopt : token_to_id(data_->eos_token); }
std::optional<TokenId> Tokenizer::pad_id() const { return data_->pad_token.empty() ? std::nullopt : token_to_id(data_->pad_token); }
const std::string& Tokenizer::bos_token() const { return data_->bos_token; }
const std::string& Tokenizer::eos_token() const { return data_->eos_token; }

}  // namespace kiln::text
