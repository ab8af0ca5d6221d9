// Splits a template into data and tag tokens, applying Jinja's whitespace control as transformers
// configures it: trim_blocks (drop the newline after a block/comment tag), lstrip_blocks (drop
// indentation before a block/comment tag alone on its line), `-`/`+` markers, newline
// normalisation and keep_trailing_newline=False.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::tmpl {

enum class Tok : uint8_t { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  int line;
  std::string text;  ///< Data text, name, decoded string literal, operator
  int64_t ival = 0;
  double fval = 0;
};

/** Throws TemplateError(Syntax) with a line number. */
std::vector<Token> lex(std::string_view source);

const char* token_description(const Token& t);

}  // namespace kiln::tmpl
