// Small tokenizers built in memory for the unit tests: a byte-level BPE (GPT-2 style), a Gemma-style
// byte-fallback BPE from tokenizer.json text, and a Llama-2-style one (Prepend + Strip decoder).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "text/byte_level.hpp"
#include "text/tokenizer.hpp"
#include "text/utf8.hpp"

namespace kiln::text::testing {

inline std::string bl(std::string_view raw) {  // raw bytes → byte-level alphabet string
  std::string s;
  for (char c : raw) utf8::append(s, byte_level::tables().to_char[static_cast<unsigned char>(c)]);
  return s;
}

inline VocabSpec toy_byte_level_spec() {
  VocabSpec v;
  v.type = VocabSpec::Type::kByteLevelBpe;
  for (int b = 0; b < 256; ++b) v.tokens.push_back(bl(std::string(1, static_cast<char>(b))));
  auto merge = [&](std::string a, std::string b) {
    v.merges.emplace_back(bl(a), bl(b));
    v.tokens.push_back(bl(a + b));
  };
  merge("t", "h");
  merge(" ", "th");
  merge("th", "e");
  merge(" th", "e");
  merge("l", "l");
  merge("e", "ll");
  merge("h", "ell");
  merge("hell", "o");
  merge("\xC3", "\xA9");  // é
  merge(" ", " ");
  v.added.push_back({"<|end|>", static_cast<TokenId>(v.tokens.size()), true});
  v.tokens.push_back("<|end|>");
  v.added.push_back({"<think>", static_cast<TokenId>(v.tokens.size()), false});
  v.tokens.push_back("<think>");
  v.eos = v.added[0].id;
  v.split_regex = R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
  return v;
}

/** Gemma-3-shaped tokenizer.json: Replace ' '→▁, Split ' ' MergedWithPrevious, byte fallback, <bos>. */
inline std::string toy_gemma_json(bool llama2_style = false) {
  using json = nlohmann::json;
  json vocab = json::object();
  int id = 0;
  for (const char* s : {"<pad>", "<eos>", "<bos>", "<unk>"}) vocab[s] = id++;
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    vocab[buf] = id++;
  }
  for (const char* s : {"\xE2\x96\x81", "a", "b", "c", "h", "e", "l", "o", "\xC3\xA9"}) vocab[s] = id++;
  json merges = json::array();
  auto merge = [&](std::string a, std::string b) {
    merges.push_back({a, b});
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
  };
  merge("h", "e");
  merge("l", "l");
  merge("he", "ll");
  merge("hell", "o");
  merge("\xE2\x96\x81", "hello");
  merge("a", "b");
  merge("\xE2\x96\x81", "\xE2\x96\x81");
  json added = json::array();
  auto add = [&](const std::string& s, bool special, int tid = -1) {
    if (tid < 0) tid = id++;
    added.push_back({{"id", tid}, {"content", s}, {"special", special}, {"lstrip", false}, {"rstrip", false},
                     {"normalized", false}, {"single_word", false}});
    return tid;
  };
  add("<pad>", true, 0);
  add("<eos>", true, 1);
  add("<bos>", true, 2);
  add("<start_of_turn>", true);
  add("\n\n", false);
  json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merges}, {"unk_token", "<unk>"}, {"byte_fallback", true}, {"fuse_unk", true}};
  j["added_tokens"] = added;
  if (llama2_style) {
    j["normalizer"] = {{"type", "Sequence"},
                       {"normalizers", {{{"type", "Prepend"}, {"prepend", "\xE2\x96\x81"}},
                                        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}}}}};
    j["pre_tokenizer"] = nullptr;
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}}, {{"type", "Fuse"}},
                                  {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  } else {
    j["normalizer"] = {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\xE2\x96\x81"}};
    j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"String", " "}}}, {"behavior", "MergedWithPrevious"}, {"invert", false}};
    j["decoder"] = {{"type", "Sequence"},
                    {"decoders", {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
                                  {{"type", "ByteFallback"}}, {{"type", "Fuse"}}}}};
  }
  j["post_processor"] = {{"type", "TemplateProcessing"},
                         {"single", {{{"SpecialToken", {{"id", "<bos>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
                         {"special_tokens", {{"<bos>", {{"id", "<bos>"}, {"ids", {2}}, {"tokens", {"<bos>"}}}}}}};
  return j.dump();
}

}  // namespace kiln::text::testing
