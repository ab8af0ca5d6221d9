#include "text/utf8.hpp"

namespace kiln::text::utf8 {

void append(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

namespace {
// For a lead byte: how many continuation bytes follow and the allowed range of the first one
// (the Unicode Table 3-7 ranges that exclude overlongs, surrogates and > U+10FFFF). need = -1: invalid.
struct Lead { int need; unsigned char lo, hi; };
inline Lead lead_info(unsigned char b) {
  if (b < 0x80) return {0, 0, 0};
  if (b < 0xC2) return {-1, 0, 0};
  if (b < 0xE0) return {1, 0x80, 0xBF};
  if (b == 0xE0) return {2, 0xA0, 0xBF};
  if (b == 0xED) return {2, 0x80, 0x9F};
  if (b < 0xF0) return {2, 0x80, 0xBF};
  if (b == 0xF0) return {3, 0x90, 0xBF};
  if (b < 0xF4) return {3, 0x80, 0xBF};
  if (b == 0xF4) return {3, 0x80, 0x8F};
  return {-1, 0, 0};
}
}  // namespace

bool is_valid(std::string_view s) {
  std::size_t i = 0, n = s.size();
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      std::uint64_t w;
      __builtin_memcpy(&w, s.data() + i, 8);
      if (w & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    const auto b = static_cast<unsigned char>(s[i]);
    if (b < 0x80) { ++i; continue; }
    Lead l = lead_info(b);
    if (l.need < 0 || i + static_cast<std::size_t>(l.need) >= n) return false;
    auto c1 = static_cast<unsigned char>(s[i + 1]);
    if (c1 < l.lo || c1 > l.hi) return false;
    for (int k = 2; k <= l.need; ++k) {
      auto c = static_cast<unsigned char>(s[i + k]);
      if (c < 0x80 || c > 0xBF) return false;
    }
    i += 1 + l.need;
  }
  return true;
}

void append_lossy(std::string& out, std::string_view s) {
  if (is_valid(s)) { out.append(s); return; }
  LossyStream st;
  for (char c : s) st.push(static_cast<unsigned char>(c), out);
  st.flush(out);
}

void LossyStream::push(unsigned char b, std::string& out) {
  if (need_ > 0) {
    if (b >= lo_ && b <= hi_) {
      buf_[have_++] = static_cast<char>(b);
      lo_ = 0x80, hi_ = 0xBF;
      if (--need_ == 0) { out.append(buf_, have_); have_ = 0; }
      return;
    }
    // The pending bytes are a maximal invalid subpart; `b` starts afresh.
    out.append(kReplacement);
    need_ = have_ = 0;
    lo_ = 0x80, hi_ = 0xBF;
  }
  Lead l = lead_info(b);
  if (l.need == 0) { out.push_back(static_cast<char>(b)); return; }
  if (l.need < 0) { out.append(kReplacement); return; }
  buf_[0] = static_cast<char>(b);
  have_ = 1, need_ = l.need, lo_ = l.lo, hi_ = l.hi;
}

void LossyStream::flush(std::string& out) {
  if (need_ > 0) out.append(kReplacement);
  need_ = have_ = 0;
  lo_ = 0x80, hi_ = 0xBF;
}

}  // namespace kiln::text::utf8
