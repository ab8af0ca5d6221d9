#include "text/utf8.hpp"

namespace kiln::text::utf8 {

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
  const kiln::utf8::Lead l = kiln::utf8::lead(b);
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
