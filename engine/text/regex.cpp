#define PCRE2_CODE_UNIT_WIDTH 8
#include "text/regex.hpp"

#include <pcre2.h>

#include "core/error.hpp"

namespace kiln::text {

namespace {
// White_Space without the class brackets: usable inside [...] and wrapped outside.
constexpr const char* kWs = "\\t-\\r\\x{85}\\p{Zs}\\x{2028}\\x{2029}";
}  // namespace

std::string rewrite_whitespace_classes(const std::string& p) {
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      char e = p[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWs) : "[" + std::string(kWs) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWs) + "]";
      } else {
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal, not the end of the class.
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

Regex::Regex(const std::string& pattern) : pattern_(pattern) {
  std::string p = rewrite_whitespace_classes(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  auto* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(), PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(err, msg, sizeof msg);
    throw_error("[tokenizer] regex '{}' does not compile (PCRE2 at offset {}: {}); check the tokenizer.json pattern",
                pattern, off, reinterpret_cast<const char*>(msg));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is unavailable
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::find_all(std::string_view text) const {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  auto* code = static_cast<pcre2_code*>(code_);
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  std::size_t pos = 0;
  while (pos <= text.size()) {
    int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      pcre2_match_data_free(md);
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof msg);
      throw_error("[tokenizer] regex '{}' failed on input: {}", pattern_, reinterpret_cast<const char*>(msg));
    }
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    std::size_t b = ov[0], e = ov[1];
    if (e == b) {
      // Empty match: skip one whole character so matching makes progress (as JS and Rust do).
      if (b >= text.size()) break;
      std::size_t step = 1;
      while (b + step < text.size() && (static_cast<unsigned char>(text[b + step]) & 0xC0) == 0x80) ++step;
      pos = b + step;
      continue;
    }
    out.emplace_back(b, e);
    pos = e;
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace kiln::text
