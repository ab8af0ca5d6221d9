// Streaming detokenizer: token ids in one at a time, text deltas out. The deltas concatenate to
// exactly Tokenizer::decode() of the same ids (cut at the first stop string, which is not emitted),
// and a delta never ends inside a UTF-8 sequence:
//   - byte-level tokens: bytes are held until a character completes (or is known to be invalid,
//     which yields U+FFFD exactly where the full decode has it);
//   - byte-fallback <0xXX> tokens: a run is held until a non-byte token or finish() decides it
//     (a run that is not valid UTF-8 decodes to one U+FFFD per byte, as in Hugging Face);
//   - leading-space rules (Metaspace decoder, Strip after Fuse) apply to the first token of the
//     stream only when `at_sequence_start` (set false when continuing after a prompt);
//   - stop strings: text that could be the start of a stop string is held back until it either
//     completes the stop string (then everything from it on is dropped and stopped() is true) or
//     cannot (then it is released).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

namespace kiln::text {

struct StreamOptions {
  std::vector<std::string> stop;  ///< stop strings (empty ones are ignored)
  bool skip_special = false;
  bool at_sequence_start = true;
};

class StreamDecoder {
 public:
  /** Throws HostError if the tokenizer's decoder chain has a shape streaming cannot reproduce. */
  explicit StreamDecoder(const Tokenizer& tok, StreamOptions opts = {});

  /** Feeds one token; returns the text that became final (possibly empty). Ignored after a stop. */
  std::string push(TokenId id);
  /** End of the sequence: returns everything still held back. */
  std::string finish();

  bool stopped() const { return stopped_; }
  /** Index into StreamOptions::stop of the stop string that matched, or -1. */
  int stop_index() const { return stop_index_; }

 private:
  void emit(std::string_view text, std::string& out);  // strip stage → stop stage
  void release(std::string& out, bool final);

  Tokenizer tok_;
  StreamOptions opts_;
  std::size_t index_ = 0;  // tokens seen by the decoder chain (after skip_special)
  // Joiner state.
  utf8::LossyStream bytes_;
  std::string fallback_run_;
  // Strip-after-Fuse state.
  int lead_left_ = 0;
  std::string tail_;  // trailing strip characters held back
  // Stop-string state.
  std::string pending_;
  bool stopped_ = false;
  int stop_index_ = -1;
};

}  // namespace kiln::text
