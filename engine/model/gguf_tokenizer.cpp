#include "model/gguf_tokenizer.hpp"

#include <algorithm>
#include <unordered_map>

#include "core/error.hpp"

namespace kiln::model {
namespace {

// Pre-tokenizer patterns for the tokenizer.ggml.pre names of the families kiln serves.
const char* split_regex_for(const std::string& pre) {
  if (pre == "qwen2" || pre == "qwen35")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  if (pre == "llama-bpe" || pre == "llama3")
    return R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return "";  // GPT-2's pattern (kiln_text's default)
}

}  // namespace

text::VocabSpec vocab_spec(const GgufVocab& v) {
  text::VocabSpec s;
  s.tokens = v.tokens;
  const auto type_of = [&](size_t i) { return i < v.token_types.size() ? v.token_types[i] : 1; };
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int t = type_of(i);
    if (t == 3 || t == 4) {
      text::AddedTokenSpec a;
      a.content = v.tokens[i];
      a.id = static_cast<text::TokenId>(i);
      a.special = t == 3;
      s.added.push_back(a);
    }
  }
  if (v.bos >= 0) s.bos = static_cast<text::TokenId>(v.bos);
  if (v.eos >= 0) s.eos = static_cast<text::TokenId>(v.eos);
  if (v.unk >= 0) s.unk = static_cast<text::TokenId>(v.unk);
  const auto read_merges = [&] {
    for (const auto& m : v.merges) {
      const size_t sp = m.find(' ', 1);
      if (sp == std::string::npos) throw_error("[gguf] BPE merge '{}' is not two tokens separated by a space", m);
      s.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
    }
  };
  if (v.is_bpe()) {
    s.type = text::VocabSpec::Type::kByteLevelBpe;
    read_merges();
    s.split_regex = split_regex_for(v.pre);
    s.add_bos = v.add_bos.value_or(false);
    return s;
  }
  if (v.is_sentencepiece_bpe()) {
    // Gemma 4: SentencePiece pieces ("▁" for a space, <0xXX> byte fallback) merged by the listed BPE
    // merges, no space prefix: Hugging Face's tokenizer.json for it, as llama.cpp's converter stores it.
    if (v.merges.empty()) throw_error("[gguf] tokenizer model '{}' needs tokenizer.ggml.merges", v.model);
    s.type = text::VocabSpec::Type::kSentencePieceBpe;
    read_merges();
    s.add_space_prefix = false;
    s.add_bos = v.add_bos.value_or(true);
    return s;
  }
  if (!v.is_sentencepiece())
    throw_error(
        "[gguf] tokenizer model '{}' is not supported yet (llama = SentencePiece, gpt2 = BPE, gemma4 = "
        "SentencePiece pieces with BPE merges)",
        v.model);
  s.type = text::VocabSpec::Type::kSentencePieceBpe;
  s.add_space_prefix = true;
  s.add_bos = v.add_bos.value_or(true);
  // SentencePiece merges by piece score; as BPE, a pair (a, b) whose concatenation is a normal piece
  // merges with that piece's rank (higher score first, then lower id).
  std::unordered_map<std::string, size_t> id;
  for (size_t i = 0; i < v.tokens.size(); ++i)
    if (type_of(i) == 1) id.emplace(v.tokens[i], i);
  struct Merge {
    float score;
    size_t target;
    std::string a, b;
  };
  std::vector<Merge> merges;
  for (const auto& [tok, i] : id) {
    for (size_t cut = 1; cut < tok.size(); ++cut) {
      if ((static_cast<unsigned char>(tok[cut]) & 0xC0) == 0x80) continue;  // not inside a UTF-8 char
      auto a = id.find(tok.substr(0, cut)), b = id.find(tok.substr(cut));
      if (a != id.end() && b != id.end())
        merges.push_back({i < v.scores.size() ? v.scores[i] : 0.0f, i, a->first, b->first});
    }
  }
  std::sort(merges.begin(), merges.end(), [&](const Merge& x, const Merge& y) {
    if (x.score != y.score) return x.score > y.score;
    if (x.target != y.target) return x.target < y.target;
    return id.at(x.a) < id.at(y.a);
  });
  for (auto& m : merges) s.merges.emplace_back(std::move(m.a), std::move(m.b));
  return s;
}

text::Tokenizer gguf_tokenizer(const GgufVocab& v) { return text::Tokenizer::from_vocab(vocab_spec(v)); }

}  // namespace kiln::model
