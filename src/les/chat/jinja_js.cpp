#include "les/chat/jinja_js.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <locale.h>

namespace les::jinja::js {

Char decode_at(std::string_view s, size_t pos) {
  const auto b = [&](size_t i) { return static_cast<uint8_t>(s[pos + i]); };
  const uint8_t c = b(0);
  if (c < 0x80) return {c, 1};
  size_t n;
  uint32_t cp;
  uint32_t min;
  if ((c & 0xE0) == 0xC0) {
    n = 2, cp = c & 0x1F, min = 0x80;
  } else if ((c & 0xF0) == 0xE0) {
    n = 3, cp = c & 0x0F, min = 0x800;
  } else if ((c & 0xF8) == 0xF0) {
    n = 4, cp = c & 0x07, min = 0x10000;
  } else {
    return {0xFFFD, 1};
  }
  if (pos + n > s.size()) return {0xFFFD, 1};
  for (size_t i = 1; i < n; ++i) {
    if ((b(i) & 0xC0) != 0x80) return {0xFFFD, 1};
    cp = (cp << 6) | (b(i) & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return {0xFFFD, 1};
  return {cp, n};
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate has no UTF-8 form
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp <= 0x10FFFF) {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    append_utf8(out, 0xFFFD);
  }
}

bool is_space(uint32_t cp) {
  switch (cp) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0xA0: case 0x1680:
    case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000: case 0xFEFF:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  const Char c = decode_at(s, pos);
  return is_space(c.cp) ? c.len : 0;
}

std::string_view trim_start(std::string_view s) {
  size_t i = 0;
  while (size_t n = space_at(s, i)) i += n;
  return s.substr(i);
}

std::string_view trim_end(std::string_view s) {
  // Whitespace characters are ASCII or 2-3 byte sequences; find the last non-space character by
  // scanning forward (UTF-8 cannot be decoded backwards reliably when it is invalid).
  size_t end = 0;
  for (size_t i = 0; i < s.size();) {
    const Char c = decode_at(s, i);
    i += c.len;
    if (!is_space(c.cp)) end = i;
  }
  return s.substr(0, end);
}

std::string_view trim(std::string_view s) { return trim_end(trim_start(s)); }

size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    const Char c = decode_at(s, i);
    i += c.len;
    n += c.cp >= 0x10000 ? 2 : 1;
  }
  return n;
}

std::optional<std::string> utf16_at(std::string_view s, double index) {
  if (std::isnan(index)) index = 0;
  index = std::trunc(index);
  const double len = static_cast<double>(utf16_length(s));
  const double k = index >= 0 ? index : len + index;
  if (k < 0 || k >= len) return std::nullopt;
  const size_t want = static_cast<size_t>(k);
  size_t unit = 0;
  for (size_t i = 0; i < s.size();) {
    const Char c = decode_at(s, i);
    const size_t units = c.cp >= 0x10000 ? 2 : 1;
    if (want < unit + units) {
      std::string out;
      append_utf8(out, units == 2 ? 0xFFFD : c.cp);
      return out;
    }
    unit += units;
    i += c.len;
  }
  return std::nullopt;
}

std::vector<std::string_view> code_points(std::string_view s) {
  std::vector<std::string_view> out;
  for (size_t i = 0; i < s.size();) {
    const Char c = decode_at(s, i);
    out.push_back(s.substr(i, c.len));
    i += c.len;
  }
  return out;
}

namespace {

// UTF-16 code units of a string, one at a time.
class Units {
 public:
  explicit Units(std::string_view s) : s_(s) {}
  // Next unit, or -1 at the end.
  int32_t next() {
    if (low_ >= 0) {
      const int32_t u = low_;
      low_ = -1;
      return u;
    }
    if (pos_ >= s_.size()) return -1;
    const Char c = decode_at(s_, pos_);
    pos_ += c.len;
    if (c.cp < 0x10000) return static_cast<int32_t>(c.cp);
    const uint32_t v = c.cp - 0x10000;
    low_ = static_cast<int32_t>(0xDC00 + (v & 0x3FF));
    return static_cast<int32_t>(0xD800 + (v >> 10));
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
  int32_t low_ = -1;
};

}  // namespace

int compare(std::string_view a, std::string_view b) {
  Units ua(a), ub(b);
  for (;;) {
    const int32_t x = ua.next(), y = ub.next();
    if (x != y) return x < y ? -1 : 1;
    if (x < 0) return 0;
  }
}

namespace {

// Single code point case mappings of the covered blocks; 0 if the character has none.
uint32_t upper_of(uint32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c < 0x80) return 0;
  if (c == 0xB5) return 0x39C;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c == 0xFF) return 0x178;
  if (c == 0x131) return 'I';
  if (c == 0x17F) return 'S';
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? c - 1 : 0;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? 0 : c - 1;
  if (c == 0x3C2) return 0x3A3;
  if (c >= 0x3B1 && c <= 0x3CB) return c - 32;
  if (c == 0x3AC) return 0x386;
  if (c >= 0x3AD && c <= 0x3AF) return c - 37;
  if (c == 0x3CC) return 0x38C;
  if (c == 0x3CD || c == 0x3CE) return c - 63;
  if (c >= 0x430 && c <= 0x44F) return c - 32;
  if (c >= 0x450 && c <= 0x45F) return c - 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) {
    return (c & 1) ? c - 1 : 0;
  }
  if (c == 0x4CF) return 0x4C0;
  if (c >= 0x4C1 && c <= 0x4CE) return (c & 1) ? 0 : c - 1;
  if (c >= 0x561 && c <= 0x586) return c - 48;
  if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return (c & 1) ? c - 1 : 0;
  if (c >= 0xFF41 && c <= 0xFF5A) return c - 32;
  return 0;
}

uint32_t lower_of(uint32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c < 0x80) return 0;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c == 0x178) return 0xFF;
  if (c == 0x130) return 0;  // one-to-many, handled by the caller
  if ((c >= 0x100 && c <= 0x137) || (c >= 0x14A && c <= 0x177)) return (c & 1) ? 0 : c + 1;
  if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : 0;
  if (c >= 0x391 && c <= 0x3AB && c != 0x3A2) return c + 32;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 37;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 63;
  if (c >= 0x410 && c <= 0x42F) return c + 32;
  if (c >= 0x400 && c <= 0x40F) return c + 80;
  if ((c >= 0x460 && c <= 0x481) || (c >= 0x48A && c <= 0x4BF) || (c >= 0x4D0 && c <= 0x52F)) {
    return (c & 1) ? 0 : c + 1;
  }
  if (c == 0x4C0) return 0x4CF;
  if (c >= 0x4C1 && c <= 0x4CE) return (c & 1) ? c + 1 : 0;
  if (c >= 0x531 && c <= 0x556) return c + 48;
  if ((c >= 0x1E00 && c <= 0x1E95) || (c >= 0x1EA0 && c <= 0x1EFF)) return (c & 1) ? 0 : c + 1;
  if (c >= 0xFF21 && c <= 0xFF3A) return c + 32;
  return 0;
}

bool is_cased(uint32_t c) { return upper_of(c) != 0 || lower_of(c) != 0 || c == 0x130; }

}  // namespace

std::string to_upper(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    const Char c = decode_at(s, i);
    if (c.cp < 0x80) {
      out += static_cast<char>(c.cp >= 'a' && c.cp <= 'z' ? c.cp - 32 : c.cp);
    } else if (c.cp == 0xDF) {
      out += "SS";
    } else if (c.cp == 0x149) {
      out += "\xCA\xBCN";
    } else if (c.cp == 0x390 || c.cp == 0x3B0) {
      append_utf8(out, c.cp == 0x390 ? 0x399 : 0x3A5);
      out += "\xCC\x88\xCC\x81";
    } else if (c.cp == 0x587) {
      out += "\xD4\xB5\xD5\x92";
    } else if (const uint32_t u = upper_of(c.cp)) {
      append_utf8(out, u);
    } else {
      append_utf8(out, c.cp);
    }
    i += c.len;
  }
  return out;
}

std::string to_lower(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  uint32_t prev = 0;
  for (size_t i = 0; i < s.size();) {
    const Char c = decode_at(s, i);
    if (c.cp < 0x80) {
      out += static_cast<char>(c.cp >= 'A' && c.cp <= 'Z' ? c.cp + 32 : c.cp);
    } else if (c.cp == 0x130) {
      out += "i\xCC\x87";
    } else if (c.cp == 0x3A3) {
      // Final sigma: after a cased letter and not before one.
      const bool next_cased = i + c.len < s.size() && is_cased(decode_at(s, i + c.len).cp);
      append_utf8(out, is_cased(prev) && !next_cased ? 0x3C2 : 0x3C3);
    } else if (const uint32_t l = lower_of(c.cp)) {
      append_utf8(out, l);
    } else {
      append_utf8(out, c.cp);
    }
    prev = c.cp;
    i += c.len;
  }
  return out;
}

std::string number_to_string(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  if (v == 0) return "0";
  std::string out = v < 0 ? "-" : "";
  char buf[64];
  // Shortest round-trip digits, as ECMAScript's Number::toString requires.
  const auto r = std::to_chars(buf, buf + sizeof buf, std::fabs(v), std::chars_format::scientific);
  const std::string_view sci(buf, static_cast<size_t>(r.ptr - buf));
  const size_t e_pos = sci.find('e');
  std::string digits;
  for (char ch : sci.substr(0, e_pos)) {
    if (ch != '.') digits += ch;
  }
  const int exp10 = std::atoi(std::string(sci.substr(e_pos + 1)).c_str());
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;  // the decimal point sits after n digits
  if (k <= n && n <= 21) {
    out += digits;
    out.append(static_cast<size_t>(n - k), '0');
  } else if (0 < n && n <= 21) {
    out += digits.substr(0, static_cast<size_t>(n));
    out += '.';
    out += digits.substr(static_cast<size_t>(n));
  } else if (-6 < n && n <= 0) {
    out += "0.";
    out.append(static_cast<size_t>(-n), '0');
    out += digits;
  } else {
    out += digits[0];
    if (k > 1) {
      out += '.';
      out += digits.substr(1);
    }
    out += 'e';
    out += n - 1 >= 0 ? '+' : '-';
    out += std::to_string(std::abs(n - 1));
  }
  return out;
}

std::string float_to_string(double v) {
  if (v == 0 && std::signbit(v)) return "-0.0";
  if (std::isfinite(v) && std::fmod(v, 1.0) == 0) {
    if (std::fabs(v) >= 1e21) return number_to_string(v);  // toFixed gives up there
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.0f.0", v);
    return buf;
  }
  return number_to_string(v);
}

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the longest StrUnsignedDecimalLiteral at the start of s (digits, fraction, exponent,
// or "Infinity"); 0 if there is none.
size_t decimal_prefix(std::string_view s) {
  if (s.substr(0, 8) == "Infinity") return 8;
  size_t i = 0;
  while (i < s.size() && is_digit(s[i])) ++i;
  const size_t int_digits = i;
  size_t frac_digits = 0;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && is_digit(s[j])) ++j;
    frac_digits = j - i - 1;
    if (int_digits > 0 || frac_digits > 0) i = j;
  }
  if (int_digits == 0 && frac_digits == 0) return 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t exp_start = j;
    while (j < s.size() && is_digit(s[j])) ++j;
    if (j > exp_start) i = j;
  }
  return i;
}

}  // namespace

double decimal_to_double(std::string_view text) {
  const std::string str(text);
  if (str.find("Infinity") != std::string::npos) return str[0] == '-' ? -HUGE_VAL : HUGE_VAL;
  // strtod follows LC_NUMERIC; the "C" locale reads '.' whatever the process set.
  static const locale_t c_locale = newlocale(LC_ALL_MASK, "C", nullptr);
  return strtod_l(str.c_str(), nullptr, c_locale);
}

double parse_int(std::string_view s) {
  s = trim_start(s);
  size_t i = 0;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) ++i;
  const size_t start = i;
  while (i < s.size() && is_digit(s[i])) ++i;
  if (i == start) return NAN;
  return decimal_to_double(s.substr(0, i));
}

double parse_float(std::string_view s) {
  s = trim_start(s);
  const size_t sign = !s.empty() && (s[0] == '+' || s[0] == '-') ? 1 : 0;
  const size_t n = decimal_prefix(s.substr(sign));
  if (n == 0) return NAN;
  return decimal_to_double(s.substr(0, sign + n));
}

double string_to_number(std::string_view s) {
  s = trim(s);
  if (s.empty()) return 0;
  if (s.size() > 2 && s[0] == '0') {
    int base = 0;
    if (s[1] == 'x' || s[1] == 'X') base = 16;
    if (s[1] == 'o' || s[1] == 'O') base = 8;
    if (s[1] == 'b' || s[1] == 'B') base = 2;
    if (base) {
      double v = 0;
      for (char c : s.substr(2)) {
        int d = is_digit(c) ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : 99;
        if (d >= base) return NAN;
        v = v * base + d;
      }
      return v;
    }
  }
  const size_t sign = (s[0] == '+' || s[0] == '-') ? 1 : 0;
  const size_t n = decimal_prefix(s.substr(sign));
  if (n == 0 || sign + n != s.size()) return NAN;
  return decimal_to_double(s);
}

void append_quoted(std::string& out, std::string_view s, bool ensure_ascii) {
  static const char* kHex = "0123456789abcdef";
  const auto unit_escape = [&](uint32_t u) {
    out += "\\u";
    for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(u >> shift) & 0xF];
  };
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const Char c = decode_at(s, i);
    i += c.len;
    switch (c.cp) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (c.cp < 0x20) {
      unit_escape(c.cp);
    } else if (ensure_ascii && c.cp >= 0x7F) {
      if (c.cp >= 0x10000) {
        const uint32_t v = c.cp - 0x10000;
        unit_escape(0xD800 + (v >> 10));
        unit_escape(0xDC00 + (v & 0x3FF));
      } else {
        unit_escape(c.cp);
      }
    } else {
      append_utf8(out, c.cp);
    }
  }
  out += '"';
}

}  // namespace les::jinja::js
