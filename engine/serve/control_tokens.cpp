#include "serve/control_tokens.hpp"

#include <algorithm>
#include <cctype>

namespace kiln::serve {
namespace {

constexpr std::string_view kOpen = "\xEF\xB7\x90";   // U+FDD0
constexpr std::string_view kClose = "\xEF\xB7\x91";  // U+FDD1
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

/** A byte trie of the control tokens' texts (forward, or reversed for suffixes). */
class Trie {
 public:
  Trie() : nodes_(1) {}
  void add(std::string_view s) {
    int32_t n = 0;
    for (unsigned char ch : s) {
      int32_t next = child(n, ch);
      if (next < 0) {
        next = static_cast<int32_t>(nodes_.size());
        nodes_[static_cast<size_t>(n)].next.emplace_back(ch, next);
        nodes_.emplace_back();
      }
      n = next;
    }
    nodes_[static_cast<size_t>(n)].terminal = true;
  }
  /** Length of the longest token that `s` starts with (0: none). */
  size_t longest_at(std::string_view s) const {
    size_t best = 0;
    int32_t n = 0;
    for (size_t i = 0; i < s.size(); ++i) {
      n = child(n, static_cast<unsigned char>(s[i]));
      if (n < 0) break;
      if (nodes_[static_cast<size_t>(n)].terminal) best = i + 1;
    }
    return best;
  }
  /** Whether `s` (non-empty) is a proper prefix of a token: all of it walks the trie. */
  bool proper_prefix(std::string_view s) const {
    int32_t n = 0;
    for (unsigned char ch : s)
      if ((n = child(n, ch)) < 0) return false;
    return !nodes_[static_cast<size_t>(n)].next.empty();
  }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    bool terminal = false;
  };
  int32_t child(int32_t n, unsigned char ch) const {
    for (const auto& [c, to] : nodes_[static_cast<size_t>(n)].next)
      if (c == ch) return to;
    return -1;
  }
  std::vector<Node> nodes_;
};

struct Controls {
  Trie forward, backward;
  size_t longest = 0;
  explicit Controls(const std::vector<std::string>& all) {
    for (const std::string& c : all) {
      if (c.empty()) continue;
      forward.add(c);
      backward.add(std::string(c.rbegin(), c.rend()));
      longest = std::max(longest, c.size());
    }
  }
};

/** `\ufdd0` / `\ufdd1` written out in ASCII (any case): an escaped mark, as unmark reads them. */
size_t escaped_mark_at(std::string_view rest) {
  if (rest.size() < 6 || rest[0] != '\\' || (rest[1] != 'u' && rest[1] != 'U')) return 0;
  std::string hex(rest.substr(2, 4));
  std::transform(hex.begin(), hex.end(), hex.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return hex == "fdd0" || hex == "fdd1" ? 6 : 0;
}

void wrap(std::string& out, std::string_view text) {
  out += kOpen;
  out += text;
  out += kClose;
}

std::string mark(const std::string& s, const Controls& c) {
  std::string out;
  out.reserve(s.size() + 8);
  // A string that starts with the end of a control token (or ends with its start) could make one
  // when a template prints it next to another request string: those pieces are marked too, so a
  // token spanning the joint overlaps a mark and stays text.
  size_t head = 0;
  for (size_t k = std::min(c.longest, s.size()); k >= 1 && !head; --k) {
    std::string rev(s.rend() - static_cast<std::ptrdiff_t>(k), s.rend());
    if (c.backward.proper_prefix(rev)) head = k;
  }
  size_t tail = 0;
  for (size_t k = std::min(c.longest, s.size() - head); k >= 1 && !tail; --k)
    if (c.forward.proper_prefix(std::string_view(s).substr(s.size() - k))) tail = k;
  if (head) wrap(out, std::string_view(s).substr(0, head));
  const size_t end = s.size() - tail;
  for (size_t i = head; i < end;) {
    const std::string_view rest(s.data() + i, end - i);
    if (rest.starts_with(kOpen) || rest.starts_with(kClose)) {  // the marks are ours alone
      out += kReplacement;
      i += kOpen.size();
    } else if (escaped_mark_at(rest)) {  // so are their escaped spellings (see unmark)
      out += "\\ufffd";
      i += 6;
    } else if (const size_t n = c.forward.longest_at(rest)) {
      wrap(out, rest.substr(0, n));
      i += n;
    } else {
      out += s[i++];
    }
  }
  if (tail) wrap(out, std::string_view(s).substr(end));
  return out;
}

/** A mark at `i` (raw, or \u-escaped by a JSON filter with ensure_ascii): its length, else 0. */
size_t mark_at(const std::string& t, size_t i, bool open) {
  const std::string_view rest(t.data() + i, t.size() - i);
  if (rest.starts_with(open ? kOpen : kClose)) return kOpen.size();
  if (escaped_mark_at(rest)) {
    const char last = static_cast<char>(std::tolower(static_cast<unsigned char>(rest[5])));
    if (last == (open ? '0' : '1')) return 6;
  }
  return 0;
}

}  // namespace

ChatInput mark_control_tokens(const ChatInput& chat, const std::vector<std::string>& controls) {
  // Tool-call arguments sent as JSON text were parsed when the input was built, so their strings
  // (escapes decoded) are marked like any other.
  const Controls c(controls);
  return chat.map_strings([&](const std::string& s) { return mark(s, c); });
}

std::vector<std::pair<size_t, size_t>> unmark_control_tokens(std::string& text, size_t longest) {
  std::vector<std::pair<size_t, size_t>> ranges;
  std::string out;
  out.reserve(text.size());
  size_t open_at = std::string::npos;
  // A template that cut request text between the marks (a slice) leaves an open mark: what follows
  // it, up to the longest control token, stays text.
  const auto unclosed = [&] {
    if (open_at != std::string::npos && out.size() > open_at)
      ranges.emplace_back(open_at, std::min(out.size(), open_at + longest));
  };
  for (size_t i = 0; i < text.size();) {
    if (size_t n = mark_at(text, i, true)) {
      unclosed();
      open_at = out.size();
      i += n;
    } else if (size_t m = mark_at(text, i, false)) {
      if (open_at != std::string::npos && out.size() > open_at) ranges.emplace_back(open_at, out.size());
      open_at = std::string::npos;
      i += m;
    } else {
      out += text[i++];
    }
  }
  unclosed();
  // Ranges may overlap where an unclosed one ran on: merge those (the tokenizer wants them disjoint;
  // touching ones stay apart, each holding its own token).
  std::sort(ranges.begin(), ranges.end());
  std::vector<std::pair<size_t, size_t>> merged;
  for (const auto& r : ranges) {
    if (!merged.empty() && r.first < merged.back().second)
      merged.back().second = std::max(merged.back().second, r.second);
    else
      merged.push_back(r);
  }
  text = std::move(out);
  return merged;
}

}  // namespace kiln::serve
