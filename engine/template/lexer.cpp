#include "template/lexer.hpp"

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "template/template.hpp"
#include "template/utf8.hpp"

namespace kiln::tmpl {
namespace {

[[noreturn]] void syntax(int line, const std::string& msg) {
  throw TemplateError(TemplateError::Kind::Syntax, msg, line);
}

size_t rstrip_len(std::string_view s) {
  // Python str.rstrip(): strip trailing Unicode whitespace (code point aware).
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t i = start;
    const char32_t c = utf8::next(s, i);
    if (!utf8::is_space(c)) break;
    end = start;
  }
  return end;
}

size_t skip_space(std::string_view s, size_t pos) {
  while (pos < s.size()) {
    size_t i = pos;
    const char32_t c = utf8::next(s, i);
    if (!utf8::is_space(c)) break;
    pos = i;
  }
  return pos;
}

bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

int hexval(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal body, as Jinja's lexer does.
std::string unescape(std::string_view body, int line) {
  std::string out;
  for (size_t i = 0; i < body.size();) {
    if (body[i] != '\\' || i + 1 >= body.size()) {
      out += body[i++];
      continue;
    }
    const char e = body[i + 1];
    i += 2;
    switch (e) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x':
      case 'u':
      case 'U': {
        const size_t n = e == 'x' ? 2 : e == 'u' ? 4 : 8;
        char32_t cp = 0;
        for (size_t k = 0; k < n; ++k) {
          const int h = i + k < body.size() ? hexval(body[i + k]) : -1;
          if (h < 0) syntax(line, std::string("truncated \\") + e + " escape in a string literal");
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (cp > 0x10FFFF) syntax(line, "illegal Unicode character in a string literal escape");
        i += n;
        utf8::append(out, cp);
        break;
      }
      default:
        if (e >= '0' && e <= '7') {
          char32_t cp = static_cast<char32_t>(e - '0');
          for (int k = 0; k < 2 && i < body.size() && body[i] >= '0' && body[i] <= '7'; ++k)
            cp = cp * 8 + static_cast<char32_t>(body[i++] - '0');
          utf8::append(out, cp);
        } else if (e == 'N') {
          syntax(line, "\\N{...} escapes are not supported in string literals; write the character itself");
        } else {
          out += '\\';
          out += e;
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string src) : s_(std::move(src)) {}

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < s_.size()) {
      size_t p = find_opener(pos);
      std::string_view data(s_.data() + pos, (p == std::string::npos ? s_.size() : p) - pos);
      if (p == std::string::npos) {
        emit_data(data);
        count_lines(data);  // so that "unexpected end of template" names the last line
        break;
      }
      const char kind = s_[p + 1];  // '{', '%' or '#'
      char sign = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
      // Raw blocks are checked before the generic block rule, as Jinja does.
      size_t raw_body = kind == '%' ? match_raw_begin(p + 2 + (sign ? 1 : 0)) : std::string::npos;
      std::string_view kept = control(data, sign, kind != '{', line_starting);
      emit_data(kept);
      count_lines(data);
      if (raw_body != std::string::npos) {
        pos = lex_raw(raw_body, line_starting);
        continue;
      }
      size_t q = p + 2 + (sign ? 1 : 0);
      if (kind == '#') {
        pos = lex_comment(q, line_starting);
        continue;
      }
      tokens_.push_back({kind == '{' ? Tok::VarBegin : Tok::BlockBegin, line_, {}});
      pos = lex_tag(q, kind == '{', line_starting);
    }
    tokens_.push_back({Tok::Eof, line_, {}});
    return std::move(tokens_);
  }

 private:
  size_t find_opener(size_t pos) const {
    while (true) {
      size_t p = s_.find('{', pos);
      if (p == std::string::npos || p + 1 >= s_.size()) return std::string::npos;
      const char c = s_[p + 1];
      if (c == '{' || c == '%' || c == '#') return p;
      pos = p + 1;
    }
  }

  // Whitespace control on the data before a tag: '-' strips all whitespace, otherwise
  // lstrip_blocks removes indentation when the block/comment tag starts its line.
  std::string_view control(std::string_view data, char sign, bool block_or_comment, bool line_starting) const {
    if (sign == '-') return data.substr(0, rstrip_len(data));
    if (sign == '+' || !block_or_comment) return data;
    const size_t nl = data.rfind('\n');
    const size_t l_pos = nl == std::string_view::npos ? 0 : nl + 1;
    if (l_pos == 0 && !line_starting) return data;
    std::string_view tail = data.substr(l_pos);
    if (tail.empty() || rstrip_len(tail) != 0) return data;
    return data.substr(0, l_pos);
  }

  void emit_data(std::string_view d) {
    if (!d.empty()) tokens_.push_back({Tok::Data, line_, std::string(d)});
  }
  void count_lines(std::string_view d) {
    for (char c : d)
      if (c == '\n') ++line_;
  }
  // Advances over s_[from, to), counting lines; returns `to`.
  size_t advance(size_t from, size_t to) {
    count_lines(std::string_view(s_.data() + from, to - from));
    return to;
  }

  // After "{%" and its sign: `\s*raw\s*(-%}\s*|%})`. Returns where the raw body starts or npos.
  size_t match_raw_begin(size_t q) const {
    size_t i = skip_space(s_, q);
    if (s_.compare(i, 3, "raw") != 0 || (i + 3 < s_.size() && is_name_char(s_[i + 3]))) return std::string::npos;
    i = skip_space(s_, i + 3);
    if (s_.compare(i, 3, "-%}") == 0) return skip_space(s_, i + 3);
    if (s_.compare(i, 2, "%}") == 0) return i + 2;
    return std::string::npos;
  }

  size_t lex_raw(size_t body, bool& line_starting) {
    const int start_line = line_;
    size_t search = body;
    while (true) {
      size_t p = s_.find("{%", search);
      if (p == std::string::npos) syntax(start_line, "missing end of raw directive: add {% endraw %}");
      char sign = p + 2 < s_.size() && (s_[p + 2] == '-' || s_[p + 2] == '+') ? s_[p + 2] : 0;
      size_t i = skip_space(s_, p + 2 + (sign ? 1 : 0));
      if (s_.compare(i, 6, "endraw") == 0) {
        size_t j = skip_space(s_, i + 6);
        size_t end = std::string::npos;
        bool trim = false;
        if (s_.compare(j, 3, "-%}") == 0)
          end = skip_space(s_, j + 3);
        else if (s_.compare(j, 3, "+%}") == 0)
          end = j + 3;
        else if (s_.compare(j, 2, "%}") == 0)
          end = j + 2, trim = true;
        if (end != std::string::npos) {
          std::string_view data(s_.data() + body, p - body);
          // the body's own "line starting" state is false: it follows the raw tag
          std::string_view kept = control(data, sign, true, false);
          emit_data(kept);
          if (trim && end < s_.size() && s_[end] == '\n') ++end;
          line_starting = end > 0 && s_[end - 1] == '\n';
          return advance(body, end);
        }
      }
      search = p + 2;
    }
  }

  size_t lex_comment(size_t q, bool& line_starting) {
    size_t e = s_.find("#}", q);
    if (e == std::string::npos) syntax(line_, "missing end of comment tag: close it with #}");
    size_t end = e + 2;
    const char before = e > q ? s_[e - 1] : 0;
    if (before == '-')
      end = skip_space(s_, end);
    else if (before != '+' && end < s_.size() && s_[end] == '\n')
      ++end;
    line_starting = s_[end - 1] == '\n';
    return advance(q, end);
  }

  size_t lex_tag(size_t i, bool var, bool& line_starting) {
    std::vector<char> brackets;
    while (true) {
      const size_t ws = i;
      i = skip_space(s_, i);
      advance(ws, i);
      if (i >= s_.size()) {
        tokens_.push_back({Tok::Eof, line_, {}});
        return i;
      }
      if (brackets.empty()) {
        size_t end = match_end(i, var);
        if (end != std::string::npos) {
          tokens_.push_back({var ? Tok::VarEnd : Tok::BlockEnd, line_, {}});
          line_starting = s_[end - 1] == '\n';
          return advance(i, end);
        }
      }
      const char c = s_[i];
      if (std::isdigit(static_cast<unsigned char>(c))) {
        i = lex_number(i);
      } else if (is_name_start(c)) {
        size_t j = i;
        while (j < s_.size() && is_name_char(s_[j])) ++j;
        tokens_.push_back({Tok::Name, line_, s_.substr(i, j - i)});
        i = j;
      } else if (c == '\'' || c == '"') {
        size_t j = i + 1;
        while (j < s_.size() && s_[j] != c) j += s_[j] == '\\' ? 2 : 1;
        if (j >= s_.size()) syntax(line_, "unterminated string literal: close the quote");
        tokens_.push_back({Tok::String, line_, unescape(std::string_view(s_).substr(i + 1, j - i - 1), line_)});
        i = advance(i, j + 1);
      } else {
        static const char* two[] = {"//", "**", "==", "!=", ">=", "<="};
        std::string op;
        for (const char* t : two)
          if (s_.compare(i, 2, t) == 0) op = t;
        if (op.empty()) {
          if (std::string_view("+-/*%~[](){}><=.:|,;").find(c) == std::string_view::npos)
            syntax(line_, std::string("unexpected char ") + repr_char(c) + " inside a tag");
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") brackets.push_back(op[0]);
        if (op == ")" || op == "]" || op == "}") {
          const char want = op == ")" ? '(' : op == "]" ? '[' : '{';
          if (brackets.empty()) syntax(line_, "unexpected '" + op + "'");
          if (brackets.back() != want) {
            const char* exp = brackets.back() == '(' ? ")" : brackets.back() == '[' ? "]" : "}";
            syntax(line_, "unexpected '" + op + "', expected '" + exp + "'");
          }
          brackets.pop_back();
        }
        tokens_.push_back({Tok::Op, line_, op});
        i += op.size();
      }
    }
  }

  static std::string repr_char(char c) {
    if (static_cast<unsigned char>(c) >= 0x20 && static_cast<unsigned char>(c) < 0x7F) return std::string("'") + c + "'";
    char buf[8];
    std::snprintf(buf, sizeof buf, "'\\x%02x'", static_cast<unsigned char>(c));
    return buf;
  }

  size_t match_end(size_t i, bool var) const {
    if (var) {
      if (s_.compare(i, 3, "-}}") == 0) return skip_space(s_, i + 3);
      if (s_.compare(i, 2, "}}") == 0) return i + 2;
      return std::string::npos;
    }
    if (s_.compare(i, 3, "-%}") == 0) return skip_space(s_, i + 3);
    if (s_.compare(i, 3, "+%}") == 0) return i + 3;
    if (s_.compare(i, 2, "%}") == 0) return i + 2 < s_.size() && s_[i + 2] == '\n' ? i + 3 : i + 2;
    return std::string::npos;
  }

  size_t digits(size_t i, int base) const {
    auto ok = [&](char c) { return base == 16 ? hexval(c) >= 0 : base == 8 ? (c >= '0' && c <= '7') : base == 2 ? (c == '0' || c == '1') : std::isdigit(static_cast<unsigned char>(c)) != 0; };
    if (i >= s_.size() || !ok(s_[i])) return i;
    ++i;
    while (i < s_.size() && (ok(s_[i]) || (s_[i] == '_' && i + 1 < s_.size() && ok(s_[i + 1])))) ++i;
    return i;
  }

  size_t lex_number(size_t i) {
    auto clean = [](std::string t) {
      std::string o;
      for (char c : t)
        if (c != '_') o += c;
      return o;
    };
    if (s_[i] == '0' && i + 1 < s_.size() && std::string_view("bBoOxX").find(s_[i + 1]) != std::string_view::npos) {
      const char p = static_cast<char>(std::tolower(static_cast<unsigned char>(s_[i + 1])));
      const int base = p == 'b' ? 2 : p == 'o' ? 8 : 16;
      size_t j = digits(i + 2, base);
      if (j == i + 2) syntax(line_, "invalid integer literal");
      std::string t = clean(s_.substr(i + 2, j - i - 2));
      errno = 0;
      const long long v = std::strtoll(t.c_str(), nullptr, base);
      if (errno == ERANGE) syntax(line_, "integer literal too large (kiln's integers are 64-bit)");
      tokens_.push_back({Tok::Int, line_, s_.substr(i, j - i), v});
      return j;
    }
    size_t j = digits(i, 10);
    size_t k = j;
    bool is_float = false;
    if (k + 1 < s_.size() && s_[k] == '.' && std::isdigit(static_cast<unsigned char>(s_[k + 1]))) {
      k = digits(k + 1, 10);
      is_float = true;
    }
    if (k < s_.size() && (s_[k] == 'e' || s_[k] == 'E')) {
      size_t m = k + 1;
      if (m < s_.size() && (s_[m] == '+' || s_[m] == '-')) ++m;
      size_t n = digits(m, 10);
      if (n > m) {
        k = n;
        is_float = true;
      }
    }
    std::string t = clean(s_.substr(i, k - i));
    Token tok{is_float ? Tok::Float : Tok::Int, line_, t};
    if (is_float) {
      tok.fval = std::strtod(t.c_str(), nullptr);
    } else {
      errno = 0;
      tok.ival = std::strtoll(t.c_str(), nullptr, 10);
      if (errno == ERANGE) syntax(line_, "integer literal too large (kiln's integers are 64-bit)");
    }
    tokens_.push_back(std::move(tok));
    return k;
  }

  std::string s_;
  int line_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source) {
  const size_t bad = utf8::first_invalid(source);
  if (bad != std::string_view::npos) {
    int line = 1;
    for (size_t k = 0; k < bad; ++k) line += source[k] == '\n';
    syntax(line, "the template is not valid UTF-8 (byte " + std::to_string(bad) + ")");
  }
  // Newlines normalised to \n and one trailing newline dropped (keep_trailing_newline=False).
  std::string s;
  s.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      s += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      s += source[i];
    }
  }
  if (!s.empty() && s.back() == '\n') s.pop_back();
  return Lexer(std::move(s)).run();
}

const char* token_description(const Token& t) {
  switch (t.type) {
    case Tok::Data: return "template data";
    case Tok::VarBegin: return "begin of print statement";
    case Tok::VarEnd: return "end of print statement";
    case Tok::BlockBegin: return "begin of statement block";
    case Tok::BlockEnd: return "end of statement block";
    case Tok::Name: return "name";
    case Tok::String: return "string";
    case Tok::Int: return "integer";
    case Tok::Float: return "float";
    case Tok::Op: return "operator";
    case Tok::Eof: return "end of template";
  }
  return "token";
}

}  // namespace kiln::tmpl
