// Hugging Face tokenizer.json tokenizers: BPE with byte-level pre-tokenization (GPT-2 style: Qwen,
// Llama 3) and BPE with byte fallback over SentencePiece's "▁" convention (Gemma, Llama 2).
// Encode ids equal Hugging Face's encode(text, add_special_tokens=False) (plus the post-processor when
// EncodeOptions::add_special); decode equals its decode(ids).
//
// Thread safety: a Tokenizer is immutable after construction; encode/decode may run concurrently on
// any number of threads (each thread keeps its own BPE word cache). Copies share the loaded data.
//
// Input text that is not valid UTF-8 is repaired before encoding: each maximal invalid subpart becomes
// U+FFFD (as WHATWG TextDecoder / Rust from_utf8_lossy do), then encoded like any other text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::text {

using TokenId = std::int32_t;

struct AddedTokenSpec {
  std::string content;
  TokenId id = 0;
  bool special = true;
  bool lstrip = false, rstrip = false, normalized = false, single_word = false;
};

/**
 * A vocabulary given in memory rather than as tokenizer.json, e.g. mapped from a GGUF file:
 *  - kByteLevelBpe: tokens are in the GPT-2 byte-to-unicode alphabet ("Ġ" for space); the text is
 *    split by `split_regex` (default: the GPT-2 pattern) then byte-level encoded. Decoder: ByteLevel.
 *  - kSentencePieceBpe: tokens use "▁" for space; spaces become "▁" (prepended once at the start of
 *    the text when `add_space_prefix`); characters missing from the vocabulary fall back to the
 *    <0xXX> byte tokens (which must exist) or to `unk`. Decoder: ▁→space, byte fallback, and the
 *    leading space strip when `add_space_prefix`.
 * Merges are in rank order (first = applied first), each a pair of token strings. A SentencePiece
 * vocabulary without merges (llama-style GGUF: tokens + scores) gets them derived from `scores` the way
 * Hugging Face's converter does (every split of a token into two tokens, ranked by the token's score).
 * Tokens whose type is "control"/"user defined" in GGUF go in `added` (special = control).
 */
struct VocabSpec {
  enum class Type { kByteLevelBpe, kSentencePieceBpe } type = Type::kByteLevelBpe;
  std::vector<std::string> tokens;  ///< index = id
  std::vector<std::pair<std::string, std::string>> merges;
  std::vector<float> scores;        ///< per token; used only when `merges` is empty
  std::vector<AddedTokenSpec> added;
  std::string split_regex;          ///< kByteLevelBpe only; empty = GPT-2's pattern
  bool add_space_prefix = false;    ///< kSentencePieceBpe only
  std::optional<TokenId> unk, bos, eos;
  bool add_bos = false, add_eos = false;  ///< what EncodeOptions::add_special adds
};

struct EncodeOptions {
  /// Recognise special added tokens written in the text (Hugging Face's default). false: they are
  /// ordinary text (for untrusted user content). Non-special added tokens are always recognised.
  bool allow_special = true;
  /// Apply the post-processor (e.g. Gemma's leading <bos>), like add_special_tokens=True.
  bool add_special = false;
  /// Byte ranges [begin, end) of the text, sorted and disjoint, where special added tokens are not
  /// recognised (text from a request inside a rendered chat prompt): a special token overlapping
  /// one is ordinary text there, everywhere else it is the token. Non-special added tokens match
  /// everywhere (they are vocabulary, as in Hugging Face).
  std::vector<std::pair<std::size_t, std::size_t>> text_only;
};

struct DecodeOptions {
  bool skip_special = false;  ///< drop special added tokens (Hugging Face skip_special_tokens)
};

struct TokenizerData;  // the loaded pipeline (internal, text/tokenizer_data.hpp)

class Tokenizer {
 public:
  /** Loads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json. */
  static Tokenizer from_dir(const std::string& dir);
  /** From file contents; `config_json` may be empty. */
  static Tokenizer from_json(std::string_view tokenizer_json, std::string_view config_json = {});
  /** From an in-memory vocabulary (see VocabSpec). */
  static Tokenizer from_vocab(const VocabSpec& spec);

  std::vector<TokenId> encode(std::string_view text, const EncodeOptions& opts = {}) const;
  /** Appends to `out` (lets a caller reuse one buffer). */
  void encode_append(std::string_view text, std::vector<TokenId>& out, const EncodeOptions& opts = {}) const;
  /** Throws HostError for ids outside the vocabulary. */
  std::string decode(std::span<const TokenId> ids, const DecodeOptions& opts = {}) const;

  /** One past the largest id (model vocabulary and added tokens). */
  std::size_t vocab_size() const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  /** The bytes token `id` adds to text in the middle of a sequence, as the streaming decoder
   *  produces them before joining: "Ġthe" → " the", "<0x0A>" → "\n", an added token → its
   *  content; a partial UTF-8 sequence stays partial. Grammar masks match tokens by these. */
  std::string token_bytes(TokenId id) const;
  /** The raw vocabulary string ("Ġthe", "▁the", "<|im_end|>"); empty for an unused id. */
  std::string_view id_to_token(TokenId id) const;
  bool is_special(TokenId id) const;
  /** The text of every special added token (control tokens such as <|im_start|>, <bos>). */
  std::vector<std::string> special_token_texts() const;
  /** From tokenizer_config.json (bos_token, eos_token, pad_token) when they name a known token. */
  std::optional<TokenId> bos_id() const;
  std::optional<TokenId> eos_id() const;
  std::optional<TokenId> pad_id() const;
  const std::string& bos_token() const;  ///< "" when none
  const std::string& eos_token() const;

  const TokenizerData& data() const { return *data_; }

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerData> d) : data_(std::move(d)) {}
  std::shared_ptr<const TokenizerData> data_;
};

}  // namespace kiln::text
