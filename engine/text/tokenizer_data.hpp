// The loaded tokenizer pipeline (internal to engine/text): the steps of tokenizer.json flattened
// into plain structs, the BPE tables and the added-token matcher.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "text/bpe.hpp"
#include "text/regex.hpp"
#include "text/tokenizer.hpp"

namespace kiln::text {

struct Pattern {  // tokenizer.json {"String": ...} or {"Regex": ...}
  std::string literal;
  std::shared_ptr<Regex> regex;  // set for Regex patterns
  /** Matches [begin, end), left to right, non-overlapping. */
  std::vector<std::pair<std::size_t, std::size_t>> find_all(std::string_view s) const;
};

struct NormStep {
  enum Kind { kNfc, kReplace, kPrepend } kind;
  Pattern pattern;      // kReplace
  std::string content;  // kReplace, kPrepend
  NormStep(Kind k, Pattern p = {}, std::string c = {}) : kind(k), pattern(std::move(p)), content(std::move(c)) {}
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreStep {
  enum Kind { kSplit, kByteLevel, kMetaspace } kind;
  explicit PreStep(Kind k) : kind(k) {}
  // kSplit
  Pattern pattern;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  int fast_digits = 0;  // >0: pattern is the Qwen2 (1) / Llama 3 (3) regex, run by the hand-written splitter
  // kByteLevel
  bool add_prefix_space = false;
  bool use_regex = false;  // GPT-2 pattern (kept in `pattern`)
  // kMetaspace
  std::string replacement;
  enum Prepend { kAlways, kFirst, kNever } prepend = kAlways;
  bool split = true;
};

struct DecStep {
  enum Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace, kMetaspace } kind;
  explicit DecStep(Kind k) : kind(k) {}
  std::string content;   // kStrip (one character), kReplace (replacement), kMetaspace (replacement char)
  Pattern pattern;       // kReplace
  int start = 0, stop = 0;          // kStrip
  bool strip_first_space = false;   // kMetaspace (prepend_scheme != never)
};

/** Added tokens matched leftmost-longest with a byte trie (one trie for raw, one for normalized text). */
struct AddedMatcher {
  struct Node {
    std::vector<std::pair<unsigned char, std::int32_t>> next;  // sorted by byte
    std::int32_t token = -1;                                   // index into TokenizerData::added
  };
  std::vector<Node> nodes{1};
  std::array<bool, 256> first{};  // bytes that can start a token
  bool empty() const { return nodes.size() == 1; }
  void insert(std::string_view s, std::int32_t token);
  /** Longest token starting at s[i] (index into added) and its end, or -1. */
  std::int32_t longest_at(std::string_view s, std::size_t i, std::size_t& end) const;
};

struct TokenizerData {
  std::uint64_t uid = 0;  // distinguishes instances for the per-thread BPE cache

  std::vector<NormStep> normalizers;
  std::vector<PreStep> pre;
  bool byte_level = false;  // model symbols are bytes (a ByteLevel pre-tokenizer is present)
  Bpe bpe;

  std::vector<AddedTokenSpec> added;
  AddedMatcher added_raw, added_normalized;
  std::unordered_map<TokenId, std::int32_t> added_by_id;  // id → index into added

  std::vector<TokenId> post_prefix, post_suffix;  // TemplateProcessing "single" around sequence A

  std::vector<DecStep> decoders;
  bool has_decoder = false;

  // id → token text; views into bpe.vocab's keys and added[].content (both stable once loaded).
  std::vector<std::string_view> id_to_token;
  std::unordered_map<std::string, TokenId> added_by_content;

  std::string bos_token, eos_token, pad_token;

  bool is_added(TokenId id) const { return added_by_id.count(id) != 0; }
  bool is_special(TokenId id) const {
    auto it = added_by_id.find(id);
    return it != added_by_id.end() && added[static_cast<std::size_t>(it->second)].special;
  }
};

/** Applies the normalizer steps to `in`, appending to `out`. */
void normalize(const TokenizerData& d, std::string_view in, std::string& out);

/** Builds the pipeline from parsed tokenizer.json / tokenizer_config.json text. */
std::shared_ptr<TokenizerData> load_tokenizer_json(std::string_view tokenizer_json, std::string_view config_json);

/** The Qwen2 (digits = 1) / Llama 3 (digits = 3) pre-tokenizer split, hand-written. Calls f(begin, end). */
template <class F>
void split_gpt4_style(std::string_view s, int digits, F&& f);

/** The regex strings the hand-written splitter implements exactly. */
inline constexpr std::string_view kQwen2Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace kiln::text

#include "text/split_gpt4.hpp"
