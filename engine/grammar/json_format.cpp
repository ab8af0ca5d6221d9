#include "grammar/json_format.hpp"

#include <fmt/format.h>

#include <string>

#include "grammar/regex.hpp"

namespace kiln::grammar {
namespace {

const std::string kDigit = "[0-9]";
// Years divisible by 4 but not by 100, or by 400.
const std::string kLeapYear = "(?:[0-9][0-9](?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)";
const std::string kDate =
    "(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)|02-(?:0[1-9]|1["
    "0-9]|2[0-8]))"
    "|" +
    kLeapYear + "-02-29)";
const std::string kFrac = "(?:\\.[0-9]+)?";
const std::string kOffset = "(?:[Zz]|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])";
// Seconds 00-59; second 60 is handled by leap_second().
const std::string kTimeNoLeap = "(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]" + kFrac + kOffset;
const std::string kOctet = "(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9][0-9]|[0-9])";
const std::string kIpv4 = kOctet + "\\." + kOctet + "\\." + kOctet + "\\." + kOctet;
const std::string kHex = "[0-9a-fA-F]";

std::string ipv6_regex() {
  const std::string h16 = kHex + "{1,4}";
  const std::string ls32 = "(?:" + h16 + ":" + h16 + "|" + kIpv4 + ")";
  auto rep = [&](int n) { return n == 0 ? std::string() : "(?:" + h16 + ":){" + std::to_string(n) + "}"; };
  // RFC 3986 IPv6address: n groups before "::" (at most k), then 8-…-n groups after.
  std::string out = "(?:" + rep(6) + ls32;
  out += "|::" + rep(5) + ls32;
  auto before = [&](int k) { return "(?:(?:" + h16 + ":){0," + std::to_string(k) + "}" + h16 + ")?"; };
  out += "|(?:" + h16 + ")?::" + rep(4) + ls32;
  out += "|" + before(1) + "::" + rep(3) + ls32;
  out += "|" + before(2) + "::" + rep(2) + ls32;
  out += "|" + before(3) + "::" + h16 + ":" + ls32;
  out += "|" + before(4) + "::" + ls32;
  out += "|" + before(5) + "::" + h16;
  out += "|" + before(6) + "::)";
  return out;
}

std::string email_regex() {
  const std::string atext = "[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]";
  const std::string dot_atom = atext + "+(?:\\." + atext + "+)*";
  // qtext: printable ASCII and space except " and \; quoted-pair: \ then printable or space.
  const std::string quoted = "\"(?:[ !#-\\[\\]-~]|\\\\[ -~])*\"";
  const std::string label = "[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?";
  const std::string domain = label + "(?:\\." + label + ")*";
  const std::string literal = "\\[(?:" + kIpv4 + "|IPv6:" + ipv6_regex() + ")\\]";
  return "(?:" + dot_atom + "|" + quoted + ")@(?:" + domain + "|" + literal + ")";
}

// RFC 3986, appendix A. A JSON string holds no '"' or '\\', and no URI character needs escaping.
const std::string kPct = "%[0-9A-Fa-f]{2}";
const std::string kPchar = "(?:[A-Za-z0-9._~!$&'()*+,;=:@-]|" + kPct + ")";
const std::string kSegment = kPchar + "*";
const std::string kQuery = "(?:[A-Za-z0-9._~!$&'()*+,;=:@/?-]|" + kPct + ")*";

std::string authority_regex() {
  const std::string userinfo = "(?:[A-Za-z0-9._~!$&'()*+,;=:-]|" + kPct + ")*";
  const std::string reg_name = "(?:[A-Za-z0-9._~!$&'()*+,;=-]|" + kPct + ")*";  // IPv4 addresses included
  const std::string ip_literal = "\\[(?:" + ipv6_regex() + "|v" + kHex + "+\\.[A-Za-z0-9._~!$&'()*+,;=:-]+)\\]";
  return "(?:" + userinfo + "@)?(?:" + ip_literal + "|" + reg_name + ")(?::[0-9]*)?";
}

/** `relative`: a URI reference (RFC 3986 URI-reference), else an absolute URI with a scheme. */
std::string uri_regex(bool relative) {
  const std::string abempty = "(?:/" + kSegment + ")*";
  const std::string absolute = "/(?:" + kPchar + "+" + abempty + ")?";
  const std::string rootless = kPchar + "+" + abempty;
  const std::string noscheme = "(?:[A-Za-z0-9._~!$&'()*+,;=@-]|" + kPct + ")+" + abempty;  // no ':' before a '/'
  const std::string tail = "(?:\\?" + kQuery + ")?(?:#" + kQuery + ")?";
  const std::string absolute_uri =
      "[A-Za-z][A-Za-z0-9+.-]*:(?://" + authority_regex() + abempty + "|" + absolute + "|" + rootless + ")?" + tail;
  if (!relative) return absolute_uri;
  return "(?:" + absolute_uri + "|(?://" + authority_regex() + abempty + "|" + absolute + "|" + noscheme + ")?" + tail +
         ")";
}

// RFC 3339 appendix A: units in order, each run unbroken (Y M D, then T H M S), or weeks alone.
std::string duration_regex() {
  const std::string n = "[0-9]+";
  const std::string time = "T(?:" + n + "H(?:" + n + "M(?:" + n + "S)?)?|" + n + "M(?:" + n + "S)?|" + n + "S)";
  const std::string date = "(?:" + n + "D|" + n + "M(?:" + n + "D)?|" + n + "Y(?:" + n + "M(?:" + n + "D)?)?)";
  return "P(?:" + date + "(?:" + time + ")?|" + time + "|" + n + "W)";
}

Element regex(Grammar& g, const std::string& re, std::string_view name) {
  return compile_regex(g, re, RegexOptions{.json_string = true, .search = false}, name);
}

Sequence two_digits(Grammar& g, int v) {
  return {g.byte(static_cast<uint8_t>('0' + v / 10)), g.byte(static_cast<uint8_t>('0' + v % 10))};
}

// HH:MM:60[.frac](Z|±hh:mm) where HH:MM minus the offset is 23:59 UTC. The local minute pairs with
// the offset minute and the local hour with the offset hour, crossing each other, so the finite
// relation is written out: per offset hour and sign, the local minute/offset minute pairs share
// one middle rule ":60 frac sign hh:".
Element leap_second(Grammar& g, std::string_view name) {
  const Element frac = regex(g, kFrac, fmt::format("{}-frac", name));
  const Element colon = g.byte(':');
  std::vector<Sequence> alts;
  {
    Sequence utc = two_digits(g, 23);
    utc.push_back(colon);
    for (Element e : two_digits(g, 59)) utc.push_back(e);
    for (Element e : g.literal(":60")) utc.push_back(e);
    utc.push_back(frac);
    ByteSet z = ByteSet::of('Z');
    z.add('z');
    utc.push_back(g.bytes(z));
    alts.push_back(std::move(utc));
  }
  for (int sign : {+1, -1}) {
    for (int hh = 0; hh < 24; ++hh) {
      Sequence mid = g.literal(":60");
      mid.push_back(frac);
      mid.push_back(g.byte(sign > 0 ? '+' : '-'));
      for (Element e : two_digits(g, hh)) mid.push_back(e);
      mid.push_back(colon);
      const Element middle = g.add(fmt::format("{}-mid", name), {std::move(mid)});
      // Group by the local hour: each local hour then lists its minute pairs.
      std::vector<std::vector<Sequence>> by_hour(24);
      for (int mm = 0; mm < 60; ++mm) {
        const int local = ((23 * 60 + 59 + sign * (hh * 60 + mm)) % 1440 + 1440) % 1440;
        Sequence a = two_digits(g, local % 60);
        a.push_back(middle);
        for (Element e : two_digits(g, mm)) a.push_back(e);
        by_hour[local / 60].push_back(std::move(a));
      }
      for (int h = 0; h < 24; ++h) {
        if (by_hour[h].empty()) continue;
        Sequence a = two_digits(g, h);
        a.push_back(colon);
        a.push_back(g.add(fmt::format("{}-min", name), std::move(by_hour[h])));
        alts.push_back(std::move(a));
      }
    }
  }
  return g.add(name, std::move(alts));
}

Element time_content(Grammar& g, std::string_view name) {
  return g.add(
      name, {{regex(g, kTimeNoLeap, fmt::format("{}-regular", name))}, {leap_second(g, fmt::format("{}-leap", name))}});
}

}  // namespace

bool format_defined(std::string_view format) {
  static constexpr std::string_view kDefined[] = {
      "date-time", "date",          "time", "duration",     "email",        "idn-email",
      "hostname",  "idn-hostname",  "ipv4", "ipv6",         "uri",          "uri-reference",
      "iri",       "iri-reference", "uuid", "uri-template", "json-pointer", "relative-json-pointer",
      "regex"};
  for (std::string_view f : kDefined)
    if (f == format) return true;
  return false;
}

Element format_content(Grammar& g, std::string_view format, std::string_view where) {
  if (format == "date") return regex(g, kDate, "date");
  if (format == "time") return time_content(g, "time");
  if (format == "date-time") {
    ByteSet t = ByteSet::of('T');
    t.add('t');
    return g.add("date-time", {{regex(g, kDate, "date"), g.bytes(t), time_content(g, "time")}});
  }
  if (format == "uuid") {
    const std::string re = kHex + "{8}-" + kHex + "{4}-" + kHex + "{4}-" + kHex + "{4}-" + kHex + "{12}";
    return regex(g, re, "uuid");
  }
  if (format == "ipv4") return regex(g, kIpv4, "ipv4");
  if (format == "ipv6") return regex(g, ipv6_regex(), "ipv6");
  if (format == "email") return regex(g, email_regex(), "email");
  if (format == "uri") return regex(g, uri_regex(false), "uri");
  if (format == "uri-reference") return regex(g, uri_regex(true), "uri-reference");
  if (format == "duration") return regex(g, duration_regex(), "duration");
  throw GrammarError(fmt::format("format '{}' is not supported (supported: date-time, date, time, duration, uuid, "
                                 "email, ipv4, ipv6, uri, uri-reference); remove it or use a pattern",
                                 format),
                     std::string(where));
}

}  // namespace kiln::grammar
