// Full decode (Hugging Face Tokenizer::decode: each decoder step maps the list of token strings)
// and the streaming detokenizer, which reproduces it token by token.
#include <algorithm>

#include "core/error.hpp"
#include "text/byte_level.hpp"
#include "text/stream_decoder.hpp"
#include "text/tokenizer_data.hpp"

namespace kiln::text {

namespace {

struct Tok {
  std::string s;
  bool added;
};

void replace_in(std::string& s, const Pattern& p, const std::string& content) {
  std::string out;
  std::size_t last = 0;
  for (auto [b, e] : p.find_all(s)) {
    out.append(s, last, b - last);
    out += content;
    last = e;
  }
  if (last == 0 && out.empty()) return;
  out.append(s, last, std::string::npos);
  s.swap(out);
}

// The token's bytes under the byte-level alphabet; a token with a character outside the alphabet
// is taken as its raw UTF-8 (as Hugging Face does).
void byte_level_bytes(std::string_view s, std::string& out) {
  const auto& t = byte_level::tables();
  std::size_t mark = out.size();
  for (std::size_t i = 0; i < s.size();) {
    std::size_t len;
    char32_t cp = utf8::decode_at(s, i, len);
    if (cp >= 324 || t.to_byte[cp] < 0) {
      out.resize(mark);
      out.append(s);
      return;
    }
    out.push_back(static_cast<char>(t.to_byte[cp]));
    i += len;
  }
}

int fallback_byte(std::string_view s) {
  if (s.size() != 6 || s.substr(0, 3) != "<0x" || s[5] != '>') return -1;
  auto hex = [](char c) { return c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1; };
  int h = hex(s[3]), l = hex(s[4]);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

void strip_token(std::string& s, const DecStep& st) {
  const std::string& c = st.content;
  std::size_t b = 0, e = s.size();
  for (int k = 0; k < st.start && s.compare(b, c.size(), c) == 0; ++k) b += c.size();
  for (int k = 0; k < st.stop && e >= b + c.size() && s.compare(e - c.size(), c.size(), c) == 0; ++k) e -= c.size();
  s = s.substr(b, e - b);
}

void per_token_step(const DecStep& st, std::string& s, std::size_t index) {
  switch (st.kind) {
    case DecStep::kReplace:
      replace_in(s, st.pattern, st.content);
      break;
    case DecStep::kStrip:
      strip_token(s, st);
      break;
    case DecStep::kMetaspace: {
      Pattern p;
      p.literal = st.content;
      replace_in(s, p, " ");
      if (index == 0 && st.strip_first_space && !s.empty() && s[0] == ' ') s.erase(0, 1);
      break;
    }
    default:
      break;
  }
}

std::string_view token_string(const TokenizerData& d, TokenId id) {
  if (id < 0 || static_cast<std::size_t>(id) >= d.id_to_token.size())
    throw_error("[tokenizer] token id {} is out of range (the vocabulary has {} ids)", id, d.id_to_token.size());
  return d.id_to_token[static_cast<std::size_t>(id)];
}

}  // namespace

std::string Tokenizer::decode(std::span<const TokenId> ids, const DecodeOptions& opts) const {
  const TokenizerData& d = *data_;
  if (d.decoders.size() == 1 && d.decoders[0].kind == DecStep::kByteLevel) {
    // The whole chain is ByteLevel (GPT-2, Qwen, Llama 3): bytes straight into one buffer, with the
    // same grouping as the general path below (added tokens verbatim between lossy-decoded runs).
    std::string out, bytes;
    for (TokenId id : ids) {
      std::string_view s = token_string(d, id);
      if (d.is_added(id)) {
        if (opts.skip_special && d.is_special(id)) continue;
        utf8::append_lossy(out, bytes);
        bytes.clear();
        out.append(s);
      } else {
        byte_level_bytes(s, bytes);
      }
    }
    utf8::append_lossy(out, bytes);
    return out;
  }
  std::vector<Tok> toks;
  toks.reserve(ids.size());
  for (TokenId id : ids) {
    std::string_view s = token_string(d, id);
    if (opts.skip_special && d.is_special(id)) continue;
    toks.push_back({std::string(s), d.is_added(id)});
  }
  if (!d.has_decoder) {
    std::string r;
    for (std::size_t i = 0; i < toks.size(); ++i) {
      if (i) r += ' ';
      r += toks[i].s;
    }
    return r;
  }
  for (const DecStep& st : d.decoders) {
    std::vector<Tok> next;
    switch (st.kind) {
      case DecStep::kByteLevel: {
        // Runs of vocabulary tokens become bytes, decoded lossily; added tokens stay verbatim.
        std::string bytes;
        bool open = false;
        auto close = [&] {
          if (!open) return;
          std::string text;
          utf8::append_lossy(text, bytes);
          next.push_back({std::move(text), false});
          bytes.clear();
          open = false;
        };
        for (Tok& t : toks) {
          if (t.added) {
            close();
            next.push_back(std::move(t));
          } else {
            byte_level_bytes(t.s, bytes);
            open = true;
          }
        }
        close();
        break;
      }
      case DecStep::kByteFallback: {
        std::string run;
        auto close = [&] {
          if (run.empty()) return;
          if (utf8::is_valid(run)) {
            next.push_back({run, false});
          } else {
            for (std::size_t k = 0; k < run.size(); ++k) next.push_back({std::string(utf8::kReplacement), false});
          }
          run.clear();
        };
        for (Tok& t : toks) {
          int b = fallback_byte(t.s);
          if (b >= 0) {
            run.push_back(static_cast<char>(b));
          } else {
            close();
            next.push_back(std::move(t));
          }
        }
        close();
        break;
      }
      case DecStep::kFuse: {
        std::string all;
        for (const Tok& t : toks) all += t.s;
        next.push_back({std::move(all), false});
        break;
      }
      default:
        for (std::size_t i = 0; i < toks.size(); ++i) {
          per_token_step(st, toks[i].s, i);
          next.push_back(std::move(toks[i]));
        }
        break;
    }
    toks.swap(next);
  }
  std::string r;
  for (const Tok& t : toks) r += t.s;
  return r;
}

// ---------------------------------------------------------------------------------------------------
// Streaming. The decoder chain must be: per-token steps (Replace, Strip, Metaspace), then at most one
// joiner (ByteLevel or ByteFallback), then optionally Fuse, then optionally one Strip on the fused
// text. Every Hugging Face BPE tokenizer we know of fits (GPT-2/Qwen/Llama 3: ByteLevel; Gemma:
// Replace, ByteFallback, Fuse; Llama 2: Replace, ByteFallback, Fuse, Strip).

namespace {
struct Plan {
  std::vector<const DecStep*> per_token;
  enum { kNone, kByteLevel, kByteFallback } join = kNone;
  const DecStep* whole_strip = nullptr;
};

Plan make_plan(const TokenizerData& d) {
  Plan p;
  int phase = 0;  // 0 per-token, 1 after joiner, 2 after Fuse, 3 after final Strip
  auto refuse = [] { throw_error("[tokenizer] streaming decode does not support this decoder chain (see docs/text.md)"); };
  for (const DecStep& st : d.decoders) {
    switch (st.kind) {
      case DecStep::kReplace:
      case DecStep::kMetaspace:
        if (phase != 0) refuse();
        p.per_token.push_back(&st);
        break;
      case DecStep::kStrip:
        if (phase == 0) p.per_token.push_back(&st);
        else if (phase == 2) { p.whole_strip = &st; phase = 3; }
        else refuse();
        break;
      case DecStep::kByteLevel:
      case DecStep::kByteFallback:
        if (phase != 0) refuse();
        p.join = st.kind == DecStep::kByteLevel ? Plan::kByteLevel : Plan::kByteFallback;
        phase = 1;
        break;
      case DecStep::kFuse:
        if (phase > 1) refuse();
        phase = 2;
        break;
    }
  }
  if (p.join == Plan::kByteLevel && p.whole_strip) refuse();
  return p;
}
}  // namespace

std::string Tokenizer::token_bytes(TokenId id) const {
  const TokenizerData& d = *data_;
  std::string s(token_string(d, id));
  if (!d.has_decoder) return s;
  Plan p;
  try {
    p = make_plan(d);
  } catch (const HostError&) {
    return decode(std::span<const TokenId>(&id, 1));  // a chain streaming cannot run: its text alone
  }
  for (const DecStep* st : p.per_token) per_token_step(*st, s, 1);  // 1: not the sequence's first token
  switch (p.join) {
    case Plan::kByteLevel:
      if (!d.is_added(id)) {
        std::string b;
        byte_level_bytes(s, b);
        return b;
      }
      return s;
    case Plan::kByteFallback:
      if (int b = fallback_byte(s); b >= 0) return std::string(1, static_cast<char>(b));
      return s;
    case Plan::kNone:
      break;
  }
  return s;
}

StreamDecoder::StreamDecoder(const Tokenizer& tok, StreamOptions opts) : tok_(tok), opts_(std::move(opts)) {
  if (!tok_.data().has_decoder) throw_error("[tokenizer] streaming decode needs a decoder in tokenizer.json");
  Plan p = make_plan(tok_.data());
  if (!opts_.at_sequence_start) index_ = 1;
  if (p.whole_strip && opts_.at_sequence_start) lead_left_ = p.whole_strip->start;
  std::erase_if(opts_.stop, [](const std::string& s) { return s.empty(); });
}

std::string StreamDecoder::push(TokenId id) {
  std::string out;
  if (stopped_) return out;
  const TokenizerData& d = tok_.data();
  std::string_view raw = token_string(d, id);
  if (opts_.skip_special && d.is_special(id)) return out;
  Plan p = make_plan(d);  // cheap: a few pointers
  std::string s(raw);
  for (const DecStep* st : p.per_token) per_token_step(*st, s, index_);
  ++index_;
  std::string text;
  switch (p.join) {
    case Plan::kNone:
      text = std::move(s);
      break;
    case Plan::kByteLevel:
      if (d.is_added(id)) {
        bytes_.flush(text);
        text += s;
      } else {
        std::string b;
        byte_level_bytes(s, b);
        for (char c : b) bytes_.push(static_cast<unsigned char>(c), text);
      }
      break;
    case Plan::kByteFallback: {
      int b = fallback_byte(s);
      if (b >= 0) {
        fallback_run_.push_back(static_cast<char>(b));
      } else {
        if (!fallback_run_.empty()) {
          if (utf8::is_valid(fallback_run_)) text = fallback_run_;
          else for (std::size_t k = 0; k < fallback_run_.size(); ++k) text += utf8::kReplacement;
          fallback_run_.clear();
        }
        text += s;
      }
      break;
    }
  }
  emit(text, out);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out;
  if (stopped_) return out;
  std::string text;
  bytes_.flush(text);
  if (!fallback_run_.empty()) {
    if (utf8::is_valid(fallback_run_)) text = fallback_run_;
    else for (std::size_t k = 0; k < fallback_run_.size(); ++k) text += utf8::kReplacement;
    fallback_run_.clear();
  }
  emit(text, out);
  // End of text: the final Strip removes up to `stop` trailing characters.
  Plan p = make_plan(tok_.data());
  if (p.whole_strip && !stopped_) {
    const std::string& c = p.whole_strip->content;
    for (int k = 0; k < p.whole_strip->stop && tail_.size() >= c.size(); ++k) tail_.resize(tail_.size() - c.size());
    pending_ += tail_;
    tail_.clear();
  }
  release(out, true);
  return out;
}

void StreamDecoder::emit(std::string_view text, std::string& out) {
  if (text.empty() || stopped_) return;
  Plan p = make_plan(tok_.data());
  std::string t(text);
  if (p.whole_strip) {
    const std::string& c = p.whole_strip->content;
    std::size_t b = 0;
    while (lead_left_ > 0 && b < t.size()) {
      if (t.compare(b, c.size(), c) == 0) { b += c.size(); --lead_left_; }
      else lead_left_ = 0;
    }
    t.erase(0, b);
    if (t.empty()) return;
    lead_left_ = 0;
    if (p.whole_strip->stop > 0) {
      // Hold the trailing run of strip characters: the last `stop` of them vanish if the text ends.
      std::string all = tail_ + t;
      std::size_t e = all.size();
      while (e >= c.size() && all.compare(e - c.size(), c.size(), c) == 0) e -= c.size();
      tail_ = all.substr(e);
      t = all.substr(0, e);
      // Only `stop` characters can ever be stripped; older ones are final.
      std::size_t keep = c.size() * static_cast<std::size_t>(p.whole_strip->stop);
      if (tail_.size() > keep) {
        t += tail_.substr(0, tail_.size() - keep);
        tail_.erase(0, tail_.size() - keep);
      }
    }
  }
  pending_ += t;
  release(out, false);
}

void StreamDecoder::release(std::string& out, bool final) {
  if (opts_.stop.empty()) {
    out += pending_;
    pending_.clear();
    return;
  }
  // Earliest complete stop string wins (the longest one on a tie).
  std::size_t best = std::string::npos, best_len = 0;
  int which = -1;
  for (std::size_t k = 0; k < opts_.stop.size(); ++k) {
    std::size_t pos = pending_.find(opts_.stop[k]);
    if (pos != std::string::npos && (pos < best || (pos == best && opts_.stop[k].size() > best_len))) {
      best = pos;
      best_len = opts_.stop[k].size();
      which = static_cast<int>(k);
    }
  }
  if (which >= 0) {
    out.append(pending_, 0, best);
    pending_.clear();
    tail_.clear();
    stopped_ = true;
    stop_index_ = which;
    return;
  }
  if (final) {
    out += pending_;
    pending_.clear();
    return;
  }
  // Hold the longest suffix that is a proper prefix of some stop string.
  std::size_t hold = 0;
  for (const std::string& s : opts_.stop) {
    std::size_t maxl = std::min(s.size() - 1, pending_.size());
    for (std::size_t l = maxl; l > hold; --l)
      if (pending_.compare(pending_.size() - l, l, s, 0, l) == 0) { hold = l; break; }
  }
  out.append(pending_, 0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
}

}  // namespace kiln::text
