#include "les/chat/jinja_lexer.h"

#include <array>
#include <utility>

#include "les/chat/jinja_js.h"
#include "les/util/error.h"

namespace les::jinja {

const char* tok_name(Tok t) {
  static constexpr std::array<const char*, 25> kNames = {
      "text", "number", "string", "identifier", "'='", "'('", "')'", "'{%'", "'%}'", "'{{'",
      "'}}'", "'['", "']'", "'{'", "'}'", "','", "'.'", "':'", "'|'", "'+'/'-'/'~'",
      "'*'/'/'/'//'/'%'", "'**'", "comparison", "unary operator", "comment"};
  return kNames[static_cast<size_t>(t)];
}

std::string source_position(std::string_view source, uint32_t offset) {
  size_t line = 1, col = 1;
  for (size_t i = 0; i < offset && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return strfmt("line %zu, column %zu", line, col);
}

namespace {

// Text with, for every byte, the offset in the original source it came from (plus one entry
// for the end), so that errors can name positions in what the user wrote.
struct Mapped {
  std::string text;
  std::vector<uint32_t> origin;

  void push(const Mapped& from, size_t i) {
    text += from.text[i];
    origin.push_back(from.origin[i]);
  }
  void push_range(const Mapped& from, size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) push(from, i);
  }
  void finish(const Mapped& from) { origin.push_back(from.origin.back()); }
};

bool starts_with_at(std::string_view s, size_t pos, std::string_view what) {
  return pos <= s.size() && s.substr(pos, what.size()) == what;
}

// A line starts at 0 and after any ECMAScript line terminator (\n, \r, U+2028, U+2029).
bool is_line_start(std::string_view s, size_t i) {
  if (i == 0) return true;
  if (s[i - 1] == '\n' || s[i - 1] == '\r') return true;
  return i >= 3 && s.substr(i - 3, 2) == "\xE2\x80" && (s[i - 1] == '\xA8' || s[i - 1] == '\xA9');
}

// Bytes of the whitespace run starting at pos.
size_t space_run(std::string_view s, size_t pos) {
  size_t i = pos;
  while (size_t n = js::space_at(s, i)) i += n;
  return i - pos;
}

// If a transformers {% generation %} / {% endgeneration %} tag starts at p, its end; else 0.
// Sets *lstrip / *rstrip for the '-' modifiers.
size_t generation_tag_end(std::string_view s, size_t p, bool* lstrip, bool* rstrip) {
  if (!starts_with_at(s, p, "{%")) return 0;
  size_t q = p + 2;
  *lstrip = q < s.size() && s[q] == '-';
  if (*lstrip) ++q;
  q += space_run(s, q);
  if (starts_with_at(s, q, "endgeneration")) {
    q += 13;
  } else if (starts_with_at(s, q, "generation")) {
    q += 10;
  } else {
    return 0;
  }
  q += space_run(s, q);
  *rstrip = q < s.size() && s[q] == '-';
  if (*rstrip && starts_with_at(s, q + 1, "%}")) return q + 3;
  *rstrip = false;
  return starts_with_at(s, q, "%}") ? q + 2 : 0;
}

Mapped preprocess(std::string_view source) {
  Mapped m;
  m.text.assign(source);
  m.origin.resize(source.size() + 1);
  for (size_t i = 0; i <= source.size(); ++i) m.origin[i] = static_cast<uint32_t>(i);

  // A single trailing newline is dropped.
  if (!m.text.empty() && m.text.back() == '\n') {
    m.text.pop_back();
    m.origin.erase(m.origin.end() - 2);
  }

  // lstrip_blocks: spaces and tabs from a line start up to "{%", "{#" or "{-" go.
  {
    Mapped out;
    const std::string& s = m.text;
    for (size_t i = 0; i < s.size();) {
      if (is_line_start(s, i)) {
        size_t j = i;
        while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
        if (j > i && j + 1 < s.size() && s[j] == '{' && (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
          i = j;
          continue;
        }
      }
      out.push(m, i++);
    }
    out.finish(m);
    m = std::move(out);
  }

  // trim_blocks: the first newline after "%}", "#}" or "-}" goes.
  {
    Mapped out;
    const std::string& s = m.text;
    for (size_t i = 0; i < s.size();) {
      if (i + 2 < s.size() && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' && s[i + 2] == '\n') {
        out.push_range(m, i, i + 2);
        i += 3;
        continue;
      }
      out.push(m, i++);
    }
    out.finish(m);
    m = std::move(out);
  }

  // transformers' generation tags: removed with the whitespace around them, which their '-'
  // modifiers drop and otherwise keep.
  if (m.text.find("generation") != std::string::npos) {
    Mapped out;
    const std::string& s = m.text;
    size_t last = 0;      // end of the previous match
    size_t ws_start = 0;  // start of the whitespace run ending at i (>= last)
    for (size_t i = 0; i < s.size();) {
      bool lstrip = false, rstrip = false;
      if (const size_t tag_end = generation_tag_end(s, i, &lstrip, &rstrip)) {
        const size_t after_end = tag_end + space_run(s, tag_end);
        out.push_range(m, last, ws_start);
        if (!lstrip) out.push_range(m, ws_start, i);
        if (!rstrip) out.push_range(m, tag_end, after_end);
        last = ws_start = i = after_end;
        continue;
      }
      if (const size_t n = js::space_at(s, i)) {
        i += n;
      } else {
        i += js::decode_at(s, i).len;
        ws_start = i;
      }
    }
    out.push_range(m, last, s.size());
    out.finish(m);
    m = std::move(out);
  }
  return m;
}

struct Rule {
  std::string_view seq;
  Tok type;
};
constexpr std::array<Rule, 29> kRules = {{
    {"{%", Tok::OpenStatement}, {"%}", Tok::CloseStatement}, {"{{", Tok::OpenExpression},
    {"}}", Tok::CloseExpression}, {"(", Tok::OpenParen}, {")", Tok::CloseParen},
    {"{", Tok::OpenCurlyBracket}, {"}", Tok::CloseCurlyBracket}, {"[", Tok::OpenSquareBracket},
    {"]", Tok::CloseSquareBracket}, {",", Tok::Comma}, {".", Tok::Dot}, {":", Tok::Colon},
    {"|", Tok::Pipe}, {"<=", Tok::ComparisonBinaryOperator}, {">=", Tok::ComparisonBinaryOperator},
    {"==", Tok::ComparisonBinaryOperator}, {"!=", Tok::ComparisonBinaryOperator},
    {"<", Tok::ComparisonBinaryOperator}, {">", Tok::ComparisonBinaryOperator},
    {"+", Tok::AdditiveBinaryOperator}, {"-", Tok::AdditiveBinaryOperator},
    {"~", Tok::AdditiveBinaryOperator}, {"**", Tok::ExponentiationBinaryOperator},
    {"*", Tok::MultiplicativeBinaryOperator}, {"//", Tok::MultiplicativeBinaryOperator},
    {"/", Tok::MultiplicativeBinaryOperator}, {"%", Tok::MultiplicativeBinaryOperator},
    {"=", Tok::Equals},
}};

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_word(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}
int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, Mapped m) : source_(source), m_(std::move(m)), src_(m_.text) {}

  std::vector<Token> run() {
    while (c_ < src_.size()) step();
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    const uint32_t offset = m_.origin[std::min(at, m_.origin.size() - 1)];
    throw Error(strfmt("jinja: syntax error at %s: %s", source_position(source_, offset).c_str(), what.c_str()));
  }

  char at(size_t i) const { return i < src_.size() ? src_[i] : '\0'; }
  bool has(size_t i) const { return i < src_.size(); }
  const Token* last() const { return tokens_.empty() ? nullptr : &tokens_.back(); }

  void push(Tok type, std::string value, size_t start) {
    tokens_.push_back({type, std::move(value), m_.origin[start]});
  }

  void strip_trailing_whitespace() {
    if (!tokens_.empty() && tokens_.back().type == Tok::Text) {
      Token& t = tokens_.back();
      t.value.resize(js::trim_end(t.value).size());
      if (t.value.empty()) tokens_.pop_back();
    }
  }
  void skip_leading_whitespace() {
    while (size_t n = js::space_at(src_, c_)) c_ += n;
  }

  // consumeWhile for whitespace, digits and word characters: running into the end of the
  // source is an error (the tag or expression is unterminated).
  template <typename Pred>
  std::string consume(Pred pred) {
    const size_t start = c_;
    while (has(c_) && pred(src_[c_])) {
      if (++c_ >= src_.size()) fail(start, "unexpected end of input");
    }
    return src_.substr(start, c_ - start);
  }
  void consume_whitespace() {
    const size_t start = c_;
    while (size_t n = js::space_at(src_, c_)) {
      c_ += n;
      if (c_ >= src_.size()) fail(start, "unexpected end of input");
    }
  }

  // The body of a string literal up to (not including) the closing quote, escapes resolved.
  std::string consume_string(char quote, size_t start) {
    std::string out;
    uint32_t high = 0;  // a \u high surrogate waiting for its low half
    const auto flush = [&] {
      if (high) js::append_utf8(out, 0xFFFD);
      high = 0;
    };
    const auto unit = [&](uint32_t u) {
      if (high && u >= 0xDC00 && u <= 0xDFFF) {
        js::append_utf8(out, 0x10000 + ((high - 0xD800) << 10) + (u - 0xDC00));
        high = 0;
        return;
      }
      flush();
      if (u >= 0xD800 && u <= 0xDBFF) {
        high = u;
      } else {
        js::append_utf8(out, u);
      }
    };
    for (;;) {
      if (!has(c_)) fail(start, "unterminated string literal");
      const char ch = src_[c_];
      if (ch == quote) break;
      if (ch == '\\') {
        const size_t esc_at = c_;
        if (++c_ >= src_.size()) fail(start, "unterminated string literal");
        const char e = src_[c_++];
        if (e == 'x' || e == 'u') {
          const size_t len = e == 'x' ? 2 : 4;
          uint32_t v = 0;
          for (size_t i = 0; i < len; ++i) {
            const int d = hex_value(at(c_ + i));
            if (!has(c_ + i) || d < 0) fail(esc_at, "invalid hexadecimal escape sequence");
            v = v * 16 + static_cast<uint32_t>(d);
          }
          c_ += len;
          unit(v);
          continue;
        }
        const char* mapped = nullptr;
        switch (e) {
          case 'n': mapped = "\n"; break;
          case 't': mapped = "\t"; break;
          case 'r': mapped = "\r"; break;
          case 'b': mapped = "\b"; break;
          case 'f': mapped = "\f"; break;
          case 'v': mapped = "\v"; break;
          case '\'': mapped = "'"; break;
          case '"': mapped = "\""; break;
          case '\\': mapped = "\\"; break;
          default: fail(esc_at, strfmt("unexpected escaped character '%c'", e));
        }
        flush();
        out += mapped;
        continue;
      }
      flush();
      out += ch;
      if (++c_ >= src_.size()) fail(start, "unterminated string literal");
    }
    flush();
    return out;
  }

  void step() {
    const Token* prev = last();
    // Text outside tags, up to the next "{%", "{{" or "{#".
    if (!prev || prev->type == Tok::CloseStatement || prev->type == Tok::CloseExpression ||
        prev->type == Tok::Comment) {
      const size_t start = c_;
      while (has(c_) && !(src_[c_] == '{' && (at(c_ + 1) == '%' || at(c_ + 1) == '{' || at(c_ + 1) == '#'))) ++c_;
      if (c_ > start) {
        push(Tok::Text, src_.substr(start, c_ - start), start);
        return;
      }
    }

    if (src_[c_] == '{' && at(c_ + 1) == '#') {
      const size_t start = c_;
      c_ += 2;
      const bool strip_before = at(c_) == '-';
      if (strip_before) ++c_;
      const size_t body = c_;
      while (at(c_) != '#' || at(c_ + 1) != '}') {
        if (c_ + 2 >= src_.size()) fail(start, "missing end of comment tag '#}'");
        ++c_;
      }
      std::string comment = src_.substr(body, c_ - body);
      const bool strip_after = !comment.empty() && comment.back() == '-';
      if (strip_after) comment.pop_back();
      if (strip_before) strip_trailing_whitespace();
      push(Tok::Comment, std::move(comment), start);
      c_ += 2;
      if (strip_after) skip_leading_whitespace();
      return;
    }

    if (starts_with_at(src_, c_, "{%-")) {
      strip_trailing_whitespace();
      push(Tok::OpenStatement, "{%", c_);
      c_ += 3;
      return;
    }
    if (starts_with_at(src_, c_, "{{-")) {
      strip_trailing_whitespace();
      push(Tok::OpenExpression, "{{", c_);
      curly_depth_ = 0;
      c_ += 3;
      return;
    }

    consume_whitespace();

    if (starts_with_at(src_, c_, "-%}")) {
      push(Tok::CloseStatement, "%}", c_);
      c_ += 3;
      skip_leading_whitespace();
      return;
    }
    if (starts_with_at(src_, c_, "-}}")) {
      push(Tok::CloseExpression, "}}", c_);
      c_ += 3;
      skip_leading_whitespace();
      return;
    }

    const char ch = src_[c_];
    const size_t start = c_;
    if (ch == '-' || ch == '+') {
      const Token* p = last();
      if (!p || p->type == Tok::Text) fail(start, strfmt("unexpected character '%c'", ch));
      const bool binary = p->type == Tok::Identifier || p->type == Tok::NumericLiteral ||
                          p->type == Tok::StringLiteral || p->type == Tok::CloseParen ||
                          p->type == Tok::CloseSquareBracket;
      if (!binary) {
        ++c_;
        std::string num = consume(is_digit);
        if (!num.empty() && at(c_) == '.' && is_digit(at(c_ + 1))) {
          ++c_;
          num += '.';
          num += consume(is_digit);
        }
        if (num.empty()) {
          push(Tok::UnaryOperator, std::string(1, ch), start);
        } else {
          push(Tok::NumericLiteral, ch + num, start);
        }
        return;
      }
    }

    for (const Rule& r : kRules) {
      if (r.seq == "}}" && curly_depth_ > 0) continue;
      if (!starts_with_at(src_, c_, r.seq)) continue;
      push(r.type, std::string(r.seq), start);
      if (r.type == Tok::OpenExpression) {
        curly_depth_ = 0;
      } else if (r.type == Tok::OpenCurlyBracket) {
        ++curly_depth_;
      } else if (r.type == Tok::CloseCurlyBracket) {
        --curly_depth_;
      }
      c_ += r.seq.size();
      return;
    }

    if (ch == '\'' || ch == '"') {
      ++c_;
      std::string s = consume_string(ch, start);
      push(Tok::StringLiteral, std::move(s), start);
      ++c_;
      return;
    }
    if (is_digit(ch)) {
      std::string num = consume(is_digit);
      if ((!last() || last()->type != Tok::Dot) && at(c_) == '.' && is_digit(at(c_ + 1))) {
        ++c_;
        num += '.';
        num += consume(is_digit);
      }
      push(Tok::NumericLiteral, std::move(num), start);
      return;
    }
    if (is_word(ch)) {
      push(Tok::Identifier, consume(is_word), start);
      return;
    }
    const uint8_t byte = static_cast<uint8_t>(ch);
    fail(start, byte >= 0x20 && byte < 0x7F ? strfmt("unexpected character '%c'", ch)
                                            : strfmt("unexpected byte 0x%02x", byte));
  }

  std::string_view source_;
  Mapped m_;
  const std::string& src_;
  size_t c_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) {
  if (source.size() >= (size_t(1) << 31)) throw Error("jinja: template larger than 2 GiB");
  return Lexer(source, preprocess(source)).run();
}

}  // namespace les::jinja
