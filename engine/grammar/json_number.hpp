// JSON numbers as grammar rules: unconstrained numbers, integers (including integral values written
// with a fraction or an exponent), and exact decimal ranges for minimum / maximum / exclusive*.
//
// A bounded range is built as a DFA over the digits that compares them with each bound as they
// come (a longer integer part is larger; equal lengths compare digit by digit, then the fraction),
// then written out as right-linear rules. Bounded numbers are written without an exponent: the
// language is then exactly the plain decimal spellings of the values in range.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "grammar/grammar.hpp"

namespace kiln::grammar {

/** An exact decimal: sign, integer digits (no leading zeros; "0" for zero), fraction digits (no
 *  trailing zeros). Zero is never negative. */
struct Decimal {
  bool negative = false;
  std::string int_digits = "0";
  std::string frac_digits;
  bool is_zero() const { return int_digits == "0" && frac_digits.empty(); }
  bool is_integral() const { return frac_digits.empty(); }
};

/** Parses JSON number text (exponents expanded); throws GrammarError for bad syntax or exponents
 *  beyond ±1000 (the digit strings would be that long). */
Decimal parse_decimal(std::string_view text);
/** -1, 0, 1 as a < b, a == b, a > b. */
int compare(const Decimal& a, const Decimal& b);

struct NumberBound {
  Decimal value;
  bool exclusive = false;
};

struct NumberSpec {
  std::optional<NumberBound> lo, hi;
  bool integer = false;    ///< only integral values
  bool canonical = false;  ///< generation: integers as -?(0|[1-9][0-9]*) only, exponents of at most 2 digits
};

/** Tightens `spec` with a lower (or upper) bound. */
void add_lower(NumberSpec& spec, const NumberBound& b);
void add_upper(NumberSpec& spec, const NumberBound& b);
/** Whether `value` satisfies the spec. */
bool number_in(const NumberSpec& spec, const Decimal& value);

/** A rule for the numbers `spec` allows. Unbounded: full JSON number syntax (integers: integral
 *  values, see json_number.cpp for the exponent forms covered). Bounded: no exponent. An empty
 *  range gives a rule without alternatives. */
Element number_grammar(Grammar& g, const NumberSpec& spec, std::string_view name = "number");

/** `value` in normalized scientific notation: one non-zero digit before the point (any digits
 *  before it for zero), any trailing zeros, an exponent with optional sign and leading zeros
 *  (9.007199254740992e+15, 1E2, 1.50e-3). With number_grammar({value, value}) this gives the
 *  spellings a serializer writes for a number. */
Element scientific_grammar(Grammar& g, const Decimal& value, std::string_view name = "scientific");

}  // namespace kiln::grammar
