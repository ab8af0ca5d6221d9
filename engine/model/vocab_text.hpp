// Turning ids back into text with the vocabulary embedded in a GGUF, for `kiln generate` on GGUF
// models when no tokenizer.json exists. Decoding only: encoding prompts is kiln_text's job.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/gguf.hpp"

namespace kiln::model {

/** The bytes of one token: SentencePiece ("▁" = space, "<0xNN>" = a byte) or byte-level BPE. */
std::string token_bytes(const GgufVocab& vocab, int32_t id);
/** Concatenated token bytes; control tokens (type 3) are dropped. */
std::string detokenize(const GgufVocab& vocab, const std::vector<int32_t>& ids);

}  // namespace kiln::model
