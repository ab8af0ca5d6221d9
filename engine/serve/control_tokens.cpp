#include "serve/control_tokens.hpp"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

namespace kiln::serve {
namespace {

using nlohmann::json;

constexpr std::string_view kOpen = "\xEF\xB7\x90";   // U+FDD0
constexpr std::string_view kClose = "\xEF\xB7\x91";  // U+FDD1
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
constexpr size_t kUnclosedSpan = 64;  // longer than any control token's text

struct Controls {
  std::array<std::vector<const std::string*>, 256> by_first;  // longest first
  explicit Controls(const std::vector<std::string>& all) {
    for (const std::string& c : all)
      if (!c.empty()) by_first[static_cast<unsigned char>(c[0])].push_back(&c);
    for (auto& v : by_first)
      std::sort(v.begin(), v.end(), [](const std::string* a, const std::string* b) { return a->size() > b->size(); });
  }
};

std::string mark(const std::string& s, const Controls& c) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const std::string_view rest(s.data() + i, s.size() - i);
    if (rest.starts_with(kOpen) || rest.starts_with(kClose)) {  // the marks are ours alone
      out += kReplacement;
      i += kOpen.size();
      continue;
    }
    const std::string* hit = nullptr;
    for (const std::string* t : c.by_first[static_cast<unsigned char>(s[i])])
      if (rest.starts_with(*t)) {
        hit = t;
        break;
      }
    if (hit) {
      out += kOpen;
      out += *hit;
      out += kClose;
      i += hit->size();
    } else {
      out += s[i++];
    }
  }
  return out;
}

void mark_all(json& v, const Controls& c) {
  if (v.is_string()) {
    v = mark(v.get_ref<const std::string&>(), c);
  } else if (v.is_array()) {
    for (json& x : v) mark_all(x, c);
  } else if (v.is_object()) {
    json o = json::object();
    for (auto& [k, x] : v.items()) {
      mark_all(x, c);
      o[mark(k, c)] = std::move(x);
    }
    v = std::move(o);
  }
}

/** A mark at `i` (raw, or \u-escaped by a JSON filter with ensure_ascii): its length, else 0. */
size_t mark_at(const std::string& t, size_t i, bool open) {
  const std::string_view rest(t.data() + i, t.size() - i);
  if (rest.starts_with(open ? kOpen : kClose)) return kOpen.size();
  if (rest.size() >= 6 && rest[0] == '\\' && (rest[1] == 'u' || rest[1] == 'U')) {
    std::string hex(rest.substr(2, 4));
    std::transform(hex.begin(), hex.end(), hex.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (hex == (open ? "fdd0" : "fdd1")) return 6;
  }
  return 0;
}

}  // namespace

std::string mark_control_tokens(std::string_view request_json, const std::vector<std::string>& controls) {
  json body = json::parse(request_json);
  mark_all(body, Controls(controls));
  return body.dump();
}

std::vector<std::pair<size_t, size_t>> unmark_control_tokens(std::string& text) {
  std::vector<std::pair<size_t, size_t>> ranges;
  std::string out;
  out.reserve(text.size());
  size_t open_at = std::string::npos;
  for (size_t i = 0; i < text.size();) {
    if (size_t n = mark_at(text, i, true)) {
      if (open_at != std::string::npos && out.size() > open_at)  // unclosed (see below)
        ranges.emplace_back(open_at, std::min(out.size(), open_at + kUnclosedSpan));
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
  // A template that cut request text between the marks (a slice) leaves an open mark: what follows
  // it, up to the longest control token, stays text.
  if (open_at != std::string::npos && out.size() > open_at)
    ranges.emplace_back(open_at, std::min(out.size(), open_at + kUnclosedSpan));
  text = std::move(out);
  return ranges;
}

}  // namespace kiln::serve
