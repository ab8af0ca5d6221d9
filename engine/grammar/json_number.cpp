#include "grammar/json_number.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <tuple>
#include <vector>

namespace kiln::grammar {

Decimal parse_decimal(std::string_view text) {
  auto bad = [&] { return GrammarError(fmt::format("'{}' is not a JSON number", text)); };
  size_t i = 0;
  Decimal d;
  bool neg = i < text.size() && text[i] == '-';
  if (neg) ++i;
  std::string digits;  // all mantissa digits; `point` of them belong to the integer part
  auto is_digit = [&](size_t k) { return k < text.size() && text[k] >= '0' && text[k] <= '9'; };
  if (!is_digit(i)) throw bad();
  while (is_digit(i)) digits += text[i++];
  long point = static_cast<long>(digits.size());
  if (i < text.size() && text[i] == '.') {
    ++i;
    if (!is_digit(i)) throw bad();
    while (is_digit(i)) digits += text[i++];
  }
  if (i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    ++i;
    bool eneg = i < text.size() && text[i] == '-';
    if (i < text.size() && (text[i] == '-' || text[i] == '+')) ++i;
    if (!is_digit(i)) throw bad();
    long e = 0;
    while (is_digit(i)) {
      e = std::min<long>(e * 10 + (text[i++] - '0'), 100000);
    }
    if (e > 1000)
      throw GrammarError(fmt::format("number '{}' has an exponent beyond ±1000; write a smaller bound", text));
    point += eneg ? -e : e;
  }
  if (i != text.size()) throw bad();
  // Place the decimal point `point` digits into `digits` (padding with zeros either side).
  if (point < 0) {
    digits.insert(0, static_cast<size_t>(-point), '0');
    point = 0;
  }
  if (point > static_cast<long>(digits.size())) digits.append(static_cast<size_t>(point) - digits.size(), '0');
  std::string ip = digits.substr(0, static_cast<size_t>(point)), fp = digits.substr(static_cast<size_t>(point));
  ip.erase(0, std::min(ip.find_first_not_of('0'), ip.size()));
  while (!fp.empty() && fp.back() == '0') fp.pop_back();
  d.int_digits = ip.empty() ? "0" : ip;
  d.frac_digits = fp;
  d.negative = neg && !d.is_zero();
  return d;
}

namespace {
int compare_magnitude(const Decimal& a, const Decimal& b) {
  if (a.int_digits.size() != b.int_digits.size()) return a.int_digits.size() < b.int_digits.size() ? -1 : 1;
  if (int c = a.int_digits.compare(b.int_digits)) return c < 0 ? -1 : 1;
  if (int c = a.frac_digits.compare(b.frac_digits)) return c < 0 ? -1 : 1;  // no trailing zeros: plain compare
  return 0;
}
}  // namespace

int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  const int m = compare_magnitude(a, b);
  return a.negative ? -m : m;
}

void add_lower(NumberSpec& spec, const NumberBound& b) {
  if (!spec.lo) {
    spec.lo = b;
    return;
  }
  const int c = compare(b.value, spec.lo->value);
  if (c > 0 || (c == 0 && b.exclusive)) spec.lo = b;
}

void add_upper(NumberSpec& spec, const NumberBound& b) {
  if (!spec.hi) {
    spec.hi = b;
    return;
  }
  const int c = compare(b.value, spec.hi->value);
  if (c < 0 || (c == 0 && b.exclusive)) spec.hi = b;
}

bool number_in(const NumberSpec& spec, const Decimal& v) {
  if (spec.integer && !v.is_integral()) return false;
  if (spec.lo) {
    const int c = compare(v, spec.lo->value);
    if (c < 0 || (c == 0 && spec.lo->exclusive)) return false;
  }
  if (spec.hi) {
    const int c = compare(v, spec.hi->value);
    if (c > 0 || (c == 0 && spec.hi->exclusive)) return false;
  }
  return true;
}

namespace {

enum Cmp : int8_t { LT = -1, EQ = 0, GT = 1 };

// Compares an unsigned decimal, digit by digit as it is read, with a fixed non-negative bound.
struct Comparator {
  const Decimal* bound = nullptr;  // null: no bound, always EQ
  struct State {
    bool frac = false;
    int16_t pos = 0;  // integer digits read (capped at len+1), or fraction digits read (capped at len)
    Cmp st = EQ;      // over the digits compared so far
    auto operator<=>(const State&) const = default;
  };
  Cmp int_result(const State& s) const {
    const auto n = static_cast<int>(bound->int_digits.size());
    return s.pos < n ? LT : s.pos > n ? GT : s.st;
  }
  State int_digit(State s, char c) const {
    if (!bound) return s;
    const auto n = static_cast<int>(bound->int_digits.size());
    if (s.pos < n && s.st == EQ) s.st = c < bound->int_digits[s.pos] ? LT : c > bound->int_digits[s.pos] ? GT : EQ;
    s.pos = static_cast<int16_t>(std::min(s.pos + 1, n + 1));
    return s;
  }
  State dot(State s) const {
    if (!bound) return s;
    return State{true, 0, int_result(s)};
  }
  State frac_digit(State s, char c) const {
    if (!bound || s.st != EQ) return s;
    const auto n = static_cast<int>(bound->frac_digits.size());
    const char b = s.pos < n ? bound->frac_digits[s.pos] : '0';
    s.st = c < b ? LT : c > b ? GT : EQ;
    s.pos = static_cast<int16_t>(std::min(s.pos + 1, n));
    return s;
  }
  // At the end of the number: equal so far but bound digits left (they end in a non-zero digit,
  // the fraction having no trailing zeros) means below the bound.
  Cmp result(const State& s) const {
    if (!bound) return EQ;
    const Cmp c = s.frac ? s.st : int_result(s);
    const auto left = static_cast<int>(bound->frac_digits.size()) - (s.frac ? s.pos : 0);
    return c == EQ && left > 0 ? LT : c;
  }
};

// Bounds on the magnitude of a number in one sign branch; `empty` when no magnitude fits.
struct MagnitudeBounds {
  std::optional<NumberBound> lo, hi;
  bool empty = false;
};

enum Phase : int8_t { START, ZERO, INT, DOT, FRAC };

// Canonical (generated) numbers have at most this many digits before and after the point: an
// integer then is exact as a double (as JavaScript clients and the tool parsers read it), and a
// weak model left free cannot write digits until max_tokens.
constexpr int kCanonicalDigits = 15;

struct DfaState {
  Phase phase = START;
  Comparator::State lo, hi;
  int8_t int_len = 0, frac_len = 0;  // canonical: digits so far (capped)
  auto operator<=>(const DfaState&) const = default;
};

// Builds the DFA of unsigned decimals within `mb`, prunes states that cannot reach acceptance and
// writes one rule per state.
class RangeBuilder {
 public:
  RangeBuilder(Grammar& g, const MagnitudeBounds& mb, bool integer, bool canonical, std::string_view name)
      : g_(g), mb_(mb), integer_(integer), canonical_(canonical), name_(name) {
    if (mb.lo) lo_.bound = &mb.lo->value;
    if (mb.hi) hi_.bound = &mb.hi->value;
  }

  Element build() {
    explore();
    prune();
    return emit();
  }

 private:
  bool accepting(const DfaState& s) const {
    if (s.phase == START || s.phase == DOT) return false;
    if (mb_.lo) {
      const Cmp c = lo_.result(s.lo);
      if (c == LT || (c == EQ && mb_.lo->exclusive)) return false;
    }
    if (mb_.hi) {
      const Cmp c = hi_.result(s.hi);
      if (c == GT || (c == EQ && mb_.hi->exclusive)) return false;
    }
    return true;
  }

  std::optional<DfaState> step(const DfaState& s, char c) const {
    const bool digit = c >= '0' && c <= '9';
    DfaState n = s;
    switch (s.phase) {
      case START:
        if (!digit) return std::nullopt;
        n.int_len = 1;
        n.phase = c == '0' ? ZERO : INT;
        n.lo = lo_.int_digit(s.lo, c);
        n.hi = hi_.int_digit(s.hi, c);
        return n;
      case ZERO:
      case INT:
        if (c == '.') {
          if (integer_ && canonical_) return std::nullopt;
          n.phase = DOT;
          n.lo = lo_.dot(s.lo);
          n.hi = hi_.dot(s.hi);
          return n;
        }
        if (!digit || s.phase == ZERO) return std::nullopt;
        if (canonical_ && s.int_len >= kCanonicalDigits) return std::nullopt;
        if (canonical_) n.int_len = static_cast<int8_t>(s.int_len + 1);
        n.lo = lo_.int_digit(s.lo, c);
        n.hi = hi_.int_digit(s.hi, c);
        return n;
      case DOT:
      case FRAC:
        if (!digit || (integer_ && c != '0')) return std::nullopt;
        if (canonical_ && s.frac_len >= kCanonicalDigits) return std::nullopt;
        if (canonical_) n.frac_len = static_cast<int8_t>(s.frac_len + 1);
        n.phase = FRAC;
        n.lo = lo_.frac_digit(s.lo, c);
        n.hi = hi_.frac_digit(s.hi, c);
        return n;
    }
    return std::nullopt;
  }

  void explore() {
    ids_[DfaState{}] = 0;
    states_.push_back(DfaState{});
    edges_.emplace_back();
    for (size_t i = 0; i < states_.size(); ++i) {
      for (char c : std::string_view("0123456789.")) {
        auto n = step(states_[i], c);
        if (!n) continue;
        auto [it, fresh] = ids_.try_emplace(*n, states_.size());
        if (fresh) {
          states_.push_back(*n);
          edges_.emplace_back();
        }
        edges_[i].push_back({c, it->second});
      }
    }
  }

  void prune() {
    live_.assign(states_.size(), false);
    for (size_t i = 0; i < states_.size(); ++i) live_[i] = accepting(states_[i]);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t i = 0; i < states_.size(); ++i)
        if (!live_[i])
          for (auto& [c, t] : edges_[i])
            if (live_[t]) {
              live_[i] = changed = true;
              break;
            }
    }
  }

  Element emit() {
    std::vector<uint32_t> rule(states_.size());
    for (size_t i = 0; i < states_.size(); ++i)
      if (live_[i] || i == 0) rule[i] = g_.rule(fmt::format("{}-s{}", name_, i));
    for (size_t i = 0; i < states_.size(); ++i) {
      if (!live_[i] && i != 0) continue;
      std::vector<Sequence> alts;
      if (live_[i]) {
        // One alternative per target state, with all the bytes that lead there.
        std::map<size_t, ByteSet> by_target;
        for (auto& [c, t] : edges_[i])
          if (live_[t]) by_target[t].add(static_cast<uint8_t>(c));
        for (auto& [t, set] : by_target) alts.push_back({g_.bytes(set), Grammar::ref(rule[t])});
        if (accepting(states_[i])) alts.push_back({});
      }
      g_.define(rule[i], std::move(alts));
    }
    return Grammar::ref(rule[0]);
  }

  Grammar& g_;
  const MagnitudeBounds& mb_;
  bool integer_;
  bool canonical_;  // integers without a fraction
  std::string name_;
  Comparator lo_, hi_;
  std::map<DfaState, size_t> ids_;
  std::vector<DfaState> states_;
  std::vector<std::vector<std::pair<char, size_t>>> edges_;
  std::vector<bool> live_;
};

NumberBound negated(const NumberBound& b) {
  NumberBound n = b;
  n.value.negative = !b.value.negative && !b.value.is_zero();
  return n;
}

// Bounds on m for the values +m (negative = false) or -m within `spec`.
MagnitudeBounds magnitude_bounds(const NumberSpec& spec, bool negative) {
  std::optional<NumberBound> lo = spec.lo, hi = spec.hi;
  if (negative) {  // lo <= -m <= hi  <=>  -hi <= m <= -lo
    lo = spec.hi ? std::optional(negated(*spec.hi)) : std::nullopt;
    hi = spec.lo ? std::optional(negated(*spec.lo)) : std::nullopt;
  }
  MagnitudeBounds mb;
  // m >= 0 always: a negative lower bound (or an inclusive zero) adds nothing.
  if (lo && (lo->value.negative || (lo->value.is_zero() && !lo->exclusive))) lo.reset();
  if (hi && (hi->value.negative || (hi->value.is_zero() && hi->exclusive))) mb.empty = true;
  mb.lo = lo;
  mb.hi = hi;
  return mb;
}

Sequence seq(std::initializer_list<Element> e) {
  return Sequence(e);
}

// Integral values in exponent notation, exactly for the forms listed: mantissas with up to
// kMaxDigits significant fraction digits and positive exponents at least that count; mantissas
// with t <= kMaxDigits trailing integer zeros and negative exponents up to t. Longer forms are
// integral too but not accepted (documented limit: a regular language cannot compare a digit
// count with an exponent's value in general).
constexpr int kMaxDigits = 9;

Element integer_grammar(Grammar& g, std::string_view name) {
  const Element d = g.bytes(ByteSet::range('0', '9')), nz = g.bytes(ByteSet::range('1', '9'));
  const Element zero = g.byte('0'), e = g.bytes([] {
    ByteSet s = ByteSet::of('e');
    s.add('E');
    return s;
  }());
  const Element digits = g.star(fmt::format("{}-digits", name), {d});
  const Element zeros = g.star(fmt::format("{}-zeros", name), {zero});
  const Element frac0 = g.optional(fmt::format("{}-frac0", name), {g.byte('.'), zero, zeros});  // (\.0+)?
  const Element plus = g.optional(fmt::format("{}-plus", name), {g.byte('+')});
  auto digit_range = [&](int lo, int hi) {
    return g.bytes(ByteSet::range(static_cast<uint8_t>('0' + lo), static_cast<uint8_t>('0' + hi)));
  };
  std::vector<Sequence> alts;
  // 0, 0.000, with any exponent: always zero.
  const Element sign = g.optional(fmt::format("{}-esign", name), {g.bytes([] {
                                    ByteSet s = ByteSet::of('+');
                                    s.add('-');
                                    return s;
                                  }())});
  const Element exp_any = g.optional(fmt::format("{}-exp", name), {e, sign, d, digits});
  alts.push_back({zero, frac0, exp_any});
  // [1-9][0-9]* (.0+)? : plain integers.
  alts.push_back({nz, digits, frac0});
  // Positive exponent E >= L where L = significant fraction digits.
  for (int L = 0; L <= kMaxDigits; ++L) {
    Sequence frac;
    if (L == 0) {
      frac = {frac0};
    } else {
      Sequence f = {g.byte('.')};
      for (int k = 0; k + 1 < L; ++k) f.push_back(d);
      f.push_back(nz);
      f.push_back(zeros);
      frac = {g.add(fmt::format("{}-frac{}", name, L), {std::move(f)})};
    }
    // E >= L written with optional leading zeros: 0* ([L-9] | [1-9][0-9]+)
    std::vector<Sequence> ge = {{nz, d, digits}};
    if (L <= 9) ge.push_back({digit_range(L, 9)});
    const Element exp_ge = g.add(fmt::format("{}-ge{}", name, L), std::move(ge));
    Sequence a = {nz, digits};
    a.insert(a.end(), frac.begin(), frac.end());
    a.insert(a.end(), {e, plus, zeros, exp_ge});
    alts.push_back(std::move(a));
  }
  // Negative exponent -E with E <= t, t = trailing zeros of the integer part (exactly t).
  const Element core = g.add(fmt::format("{}-core", name), {{nz}, {nz, digits, nz}});
  for (int t = 0; t <= kMaxDigits; ++t) {
    Sequence a = {core};
    for (int k = 0; k < t; ++k) a.push_back(zero);
    a.insert(a.end(), {frac0, e, g.byte('-'), zeros, digit_range(0, t)});
    alts.push_back(std::move(a));
  }
  return g.add(name, std::move(alts));
}

// What a generating model should write: no ".0" on integers, at most kCanonicalDigits digits before
// and after the point, no exponent beyond two digits (no reader overflows).

Element canonical_integer(Grammar& g, std::string_view name) {
  const Element d = g.bytes(ByteSet::range('0', '9'));
  const Element more = g.repeat(fmt::format("{}-digits", name), {d}, 0, kCanonicalDigits - 1);
  return g.add(name, {{g.byte('0')}, {g.bytes(ByteSet::range('1', '9')), more}});
}

Element canonical_number(Grammar& g, std::string_view name) {
  const Element d = g.bytes(ByteSet::range('0', '9'));
  const Element ip = canonical_integer(g, fmt::format("{}-int", name));
  const Element fd = g.repeat(fmt::format("{}-fdigits", name), {d}, 1, kCanonicalDigits);
  const Element fp = g.optional(fmt::format("{}-frac", name), {g.byte('.'), fd});
  ByteSet e = ByteSet::of('e'), s = ByteSet::of('+');
  e.add('E');
  s.add('-');
  const Element sign = g.optional(fmt::format("{}-esign", name), {g.bytes(s)});
  const Element d2 = g.optional(fmt::format("{}-exp2", name), {d});
  const Element ep = g.optional(fmt::format("{}-exp", name), {g.bytes(e), sign, d, d2});
  return g.add(name, {seq({ip, fp, ep})});
}

Element unbounded_number(Grammar& g, std::string_view name) {
  const Element d = g.bytes(ByteSet::range('0', '9'));
  const Element digits = g.star(fmt::format("{}-digits", name), {d});
  const Element ip = g.add(fmt::format("{}-int", name), {{g.byte('0')}, {g.bytes(ByteSet::range('1', '9')), digits}});
  const Element fp = g.optional(fmt::format("{}-frac", name), {g.byte('.'), d, digits});
  ByteSet e = ByteSet::of('e'), s = ByteSet::of('+');
  e.add('E');
  s.add('-');
  const Element sign = g.optional(fmt::format("{}-esign", name), {g.bytes(s)});
  const Element ep = g.optional(fmt::format("{}-exp", name), {g.bytes(e), sign, d, digits});
  return g.add(name, {seq({ip, fp, ep})});
}

}  // namespace

Element number_grammar(Grammar& g, const NumberSpec& spec, std::string_view name) {
  const Element minus = g.optional(fmt::format("{}-minus", name), {g.byte('-')});
  if (!spec.lo && !spec.hi) {
    const std::string n = fmt::format("{}-{}", name, spec.integer ? "integer" : "any");
    const Element body = spec.canonical ? (spec.integer ? canonical_integer(g, n) : canonical_number(g, n))
                                        : (spec.integer ? integer_grammar(g, n) : unbounded_number(g, n));
    return g.add(name, {{minus, body}});
  }
  std::vector<Sequence> alts;
  for (bool negative : {false, true}) {
    const MagnitudeBounds mb = magnitude_bounds(spec, negative);
    if (mb.empty) continue;
    const Element m =
        RangeBuilder(g, mb, spec.integer, spec.canonical, fmt::format("{}-{}", name, negative ? "neg" : "pos")).build();
    if (negative)
      alts.push_back({g.byte('-'), m});
    else
      alts.push_back({m});
  }
  return g.add(name, std::move(alts));
}

Element scientific_grammar(Grammar& g, const Decimal& value, std::string_view name) {
  ByteSet e = ByteSet::of('e'), signs = ByteSet::of('+');
  e.add('E');
  signs.add('-');
  const Element zero = g.byte('0');
  const Element zeros = g.star(fmt::format("{}-zeros", name), {zero});
  const Element frac0 = g.optional(fmt::format("{}-frac0", name), {g.byte('.'), zero, zeros});
  Sequence out;
  if (value.negative) out.push_back(g.byte('-'));
  if (value.is_zero()) {
    const Element d = g.bytes(ByteSet::range('0', '9'));
    out.insert(out.end(), {g.optional(fmt::format("{}-minus", name), {g.byte('-')}), zero, frac0, g.bytes(e),
                           g.optional(fmt::format("{}-sign", name), {g.bytes(signs)}), d,
                           g.star(fmt::format("{}-digits", name), {d})});
    return g.add(name, {std::move(out)});
  }
  // Significant digits and the power of ten of the first one.
  std::string sig = value.int_digits + value.frac_digits;
  long exp = static_cast<long>(value.int_digits.size()) - 1;
  if (value.int_digits == "0") {
    const size_t lead = value.frac_digits.find_first_not_of('0');
    sig = value.frac_digits.substr(lead);
    exp = -static_cast<long>(lead) - 1;
  }
  while (sig.size() > 1 && sig.back() == '0') sig.pop_back();
  out.push_back(g.byte(static_cast<uint8_t>(sig[0])));
  if (sig.size() == 1) {
    out.push_back(frac0);
  } else {
    out.push_back(g.byte('.'));
    for (Element x : g.literal(sig.substr(1))) out.push_back(x);
    out.push_back(zeros);
  }
  out.push_back(g.bytes(e));
  if (exp == 0) {
    out.insert(out.end(), {g.optional(fmt::format("{}-sign", name), {g.bytes(signs)}), zero, zeros});
  } else {
    out.push_back(exp > 0 ? g.optional(fmt::format("{}-plus", name), {g.byte('+')}) : g.byte('-'));
    out.push_back(zeros);
    for (Element x : g.literal(std::to_string(exp > 0 ? exp : -exp))) out.push_back(x);
  }
  return g.add(name, {std::move(out)});
}

}  // namespace kiln::grammar
