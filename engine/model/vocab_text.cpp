#include "model/vocab_text.hpp"

#include <array>

namespace kiln::model {
namespace {

// GPT-2's byte-level BPE maps every byte to a printable code point; this is its inverse.
const std::array<int, 512>& unicode_to_byte() {
  static const std::array<int, 512> table = [] {
    std::array<int, 512> t{};
    t.fill(-1);
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      const int cp = printable ? b : 256 + n++;
      t[static_cast<size_t>(cp)] = b;
    }
    return t;
  }();
  return table;
}

void append_byte_level(const std::string& piece, std::string* out) {
  for (size_t i = 0; i < piece.size();) {
    const auto c = static_cast<unsigned char>(piece[i]);
    int cp = c, len = 1;
    if (c >= 0xC0 && c < 0xE0 && i + 1 < piece.size()) {
      cp = ((c & 0x1F) << 6) | (static_cast<unsigned char>(piece[i + 1]) & 0x3F);
      len = 2;
    } else if (c >= 0xE0) {
      out->push_back(static_cast<char>(c));  // not a byte-level symbol: keep it
      ++i;
      continue;
    }
    const int b = cp < 512 ? unicode_to_byte()[static_cast<size_t>(cp)] : -1;
    if (b >= 0)
      out->push_back(static_cast<char>(b));
    else
      out->append(piece, i, static_cast<size_t>(len));
    i += static_cast<size_t>(len);
  }
}

}  // namespace

std::string token_bytes(const GgufVocab& v, int32_t id) {
  if (id < 0 || static_cast<size_t>(id) >= v.tokens.size()) return "";
  const std::string& p = v.tokens[static_cast<size_t>(id)];
  std::string out;
  if (v.is_bpe()) {
    append_byte_level(p, &out);
    return out;
  }
  if (p.size() == 6 && p.rfind("<0x", 0) == 0 && p.back() == '>') {
    out.push_back(static_cast<char>(std::stoi(p.substr(3, 2), nullptr, 16)));
    return out;
  }
  static const std::string space = "\xE2\x96\x81";  // U+2581, SentencePiece's word boundary
  for (size_t i = 0; i < p.size();) {
    if (p.compare(i, space.size(), space) == 0) {
      out.push_back(' ');
      i += space.size();
    } else {
      out.push_back(p[i++]);
    }
  }
  return out;
}

std::string detokenize(const GgufVocab& v, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) {
    const size_t i = static_cast<size_t>(id);
    if (i < v.token_types.size() && v.token_types[i] == 3) continue;
    out += token_bytes(v, id);
  }
  return out;
}

}  // namespace kiln::model
