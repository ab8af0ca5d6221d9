// PCRE2 (JIT) wrapper for the regexes tokenizer.json carries (Split pre-tokenizer, Replace
// normalizer/decoder). Patterns are rewritten so that \s means Unicode White_Space, as in the
// Oniguruma engine Hugging Face tokenizers uses (PCRE2's own \s omits U+0085).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::text {

class Regex {
 public:
  /** Throws HostError("[tokenizer] ...") when the pattern does not compile. */
  explicit Regex(const std::string& pattern);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  /** All non-overlapping matches [begin, end) in valid UTF-8 `text`, left to right. */
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view text) const;
  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*
};

/** The \s rewrite, exposed for tests. */
std::string rewrite_whitespace_classes(const std::string& pattern);

}  // namespace kiln::text
