// Maps the tokenizer embedded in a GGUF (GgufVocab) onto kiln_text's Tokenizer, so GGUF models need
// no tokenizer.json: SentencePiece-style vocabularies ("llama") become BPE with byte fallback (merges
// derived from the piece scores, as Hugging Face's SentencePiece converter does), byte-level BPE
// ("gpt2") keeps its merges and the pre-tokenizer regex named by tokenizer.ggml.pre, and Gemma 4's
// ("gemma4") SentencePiece pieces keep their BPE merges.
#pragma once

#include "model/gguf.hpp"
#include "text/tokenizer.hpp"

namespace kiln::model {

/** Throws HostError("[gguf] ...") for vocabulary types kiln cannot map yet. */
text::VocabSpec vocab_spec(const GgufVocab& vocab);
text::Tokenizer gguf_tokenizer(const GgufVocab& vocab);

}  // namespace kiln::model
