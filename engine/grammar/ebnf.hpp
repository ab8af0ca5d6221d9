// EBNF grammar text, in llama.cpp's GBNF syntax, to a Grammar (and Grammar::to_text back):
//
//   root  ::= "{" ws pair ("," ws pair)* "}"     # the rule named root is the start
//   pair  ::= [a-z]+ ":" ws value
//   ws    ::= [ \t\n]*
//
// "literals" and [classes] take \n \r \t \\ \" \] \- \/ \uHHHH \UHHHHHHHH escapes; [^…]
// negates over code points; . is any character; ( ) groups; * + ? {m} {m,} {m,n} repeat; # starts
// a comment; a rule's alternatives may continue on the following lines. One extension: \xHH is
// the byte HH (so grammars over bytes, such as to_text() prints, read back exactly); for the
// character U+0080–U+00FF write \u00HH.
#pragma once

#include <string_view>

#include "grammar/grammar.hpp"

namespace kiln::grammar {

/** Throws GrammarError with "line L:C" for syntax errors and undefined rules. */
Grammar parse_ebnf(std::string_view text);

}  // namespace kiln::grammar
