#include "text/unicode.hpp"

#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>

#include <cstring>

#include "core/error.hpp"

namespace kiln::text::uni {

// clang-format off
const std::uint8_t kAsciiClass[128] = {
  0,0,0,0,0,0,0,0,0,3,3,3,3,3,0,0,   0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,
  3,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,   2,2,2,2,2,2,2,2,2,2,0,0,0,0,0,0,
  0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,   1,1,1,1,1,1,1,1,1,1,1,0,0,0,0,0,
  0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,   1,1,1,1,1,1,1,1,1,1,1,0,0,0,0,0,
};
// clang-format on

Class classify_slow(char32_t cp) {
  if (u_isUWhiteSpace(static_cast<UChar32>(cp))) return kSpace;
  switch (u_charType(static_cast<UChar32>(cp))) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return kLetter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return kNumber;
    default:
      return kOther;
  }
}

bool is_word_char(char32_t cp) {
  if (cp == '_') return true;
  Class c = classify(cp);
  return c == kLetter || c == kNumber;
}

char32_t fold(char32_t cp) {
  if (cp < 128) return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp;
  return static_cast<char32_t>(u_foldCase(static_cast<UChar32>(cp), U_FOLD_CASE_DEFAULT));
}

bool maybe_needs_nfc(std::string_view s) {
  std::size_t i = 0;
  for (; i + 8 <= s.size(); i += 8) {  // ASCII fast path, 8 bytes at a time
    std::uint64_t w;
    std::memcpy(&w, s.data() + i, 8);
    if (!(w & 0x8080808080808080ULL)) continue;
    for (std::size_t k = 0; k < 8; ++k)
      if (static_cast<unsigned char>(s[i + k]) >= 0xCC) return true;
  }
  for (; i < s.size(); ++i)
    if (static_cast<unsigned char>(s[i]) >= 0xCC) return true;
  return false;
}

void nfc(std::string_view in, std::string& out) {
  if (!maybe_needs_nfc(in)) { out.append(in); return; }
  UErrorCode err = U_ZERO_ERROR;
  const icu::Normalizer2* n = icu::Normalizer2::getNFCInstance(err);
  if (U_FAILURE(err)) throw HostError(std::string("[tokenizer] ICU NFC is unavailable: ") + u_errorName(err));
  icu::UnicodeString u = icu::UnicodeString::fromUTF8(icu::StringPiece(in.data(), static_cast<int32_t>(in.size())));
  if (n->isNormalized(u, err) && U_SUCCESS(err)) { out.append(in); return; }
  err = U_ZERO_ERROR;
  icu::UnicodeString r = n->normalize(u, err);
  if (U_FAILURE(err)) throw HostError(std::string("[tokenizer] NFC normalization failed: ") + u_errorName(err));
  r.toUTF8String(out);
}

}  // namespace kiln::text::uni
