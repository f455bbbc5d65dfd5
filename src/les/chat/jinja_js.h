// The JavaScript string and number semantics that @huggingface/jinja inherits from its host
// language, over UTF-8 strings: whitespace as /\s/ and String.prototype.trim see it, lengths and
// indices in UTF-16 code units, Number.prototype.toString, parseInt/parseFloat, ToNumber,
// JSON.stringify of a string, toUpperCase/toLowerCase. Invalid UTF-8 bytes count as one U+FFFD
// each (JavaScript strings cannot hold them, so any answer is ours; this one never crashes).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace les::jinja::js {

// One decoded character: its code point and its length in bytes.
struct Char {
  uint32_t cp;
  size_t len;
};
// Decodes the character at s[pos] (pos < s.size()); an invalid byte yields {U+FFFD, 1}.
Char decode_at(std::string_view s, size_t pos);
void append_utf8(std::string& out, uint32_t cp);

// WhiteSpace or LineTerminator of ECMAScript (/\s/, trim()).
bool is_space(uint32_t cp);
// Bytes of the whitespace character starting at pos (0 if none / pos at the end).
size_t space_at(std::string_view s, size_t pos);
std::string_view trim(std::string_view s);
std::string_view trim_start(std::string_view s);
std::string_view trim_end(std::string_view s);

// String.prototype.length.
size_t utf16_length(std::string_view s);
// String.prototype.at(index) (negative counts from the end); nullopt when out of range. A lone
// surrogate (half of an astral character) is returned as U+FFFD.
std::optional<std::string> utf16_at(std::string_view s, double index);
// Array.from(s): the code points, as views into s.
std::vector<std::string_view> code_points(std::string_view s);
// Compares as JavaScript's < on strings does (UTF-16 code unit order): -1, 0, 1.
int compare(std::string_view a, std::string_view b);

// toUpperCase / toLowerCase: ASCII, Latin-1, Latin Extended-A, Greek, Cyrillic, Armenian and
// fullwidth Latin, with the one-to-many mappings of that range (ß -> SS, ŉ -> ʼN, İ -> i̇).
std::string to_upper(std::string_view s);
std::string to_lower(std::string_view s);

// Number.prototype.toString() / String(number).
std::string number_to_string(double v);
// The string of a float as @huggingface/jinja's FloatValue prints it (integral values get ".0").
std::string float_to_string(double v);
// parseInt(s, 10) and parseFloat(s); NaN when no number starts the string.
double parse_int(std::string_view s);
double parse_float(std::string_view s);
// A decimal literal ([+-]digits[.digits][e[+-]digits], or [+-]Infinity) to the nearest double,
// independent of the C locale.
double decimal_to_double(std::string_view text);
// ToNumber(string), as `==` uses it: whole string, trimmed; "" -> 0; hex/octal/binary prefixes.
double string_to_number(std::string_view s);

// JSON.stringify(string). ensure_ascii escapes every UTF-16 unit >= 0x7F as \uXXXX.
void append_quoted(std::string& out, std::string_view s, bool ensure_ascii);

}  // namespace les::jinja::js
