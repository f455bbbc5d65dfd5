// Unicode helpers for the tokenizer: UTF-8 decoding with llama.cpp's exact error behaviour,
// general-category groups (the \p{..} classes of the pre-tokenizer regexes), the whitespace set
// and GPT-2's byte <-> unicode mapping used by byte-level BPE vocabularies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace les::unicode {

// General-category group of a code point (the first letter of its Unicode category).
// Values match gen_unicode_tables.py.
enum Cat : uint8_t {
  UNDEF = 0,      // Cn: unassigned (and anything >= 0x110000)
  LETTER = 1,     // \p{L}
  NUMBER = 2,     // \p{N}
  MARK = 3,       // \p{M}
  PUNCT = 4,      // \p{P}
  SYMBOL = 5,     // \p{S}
  SEPARATOR = 6,  // \p{Z}
  CONTROL = 7,    // \p{C} (Cc, Cf, Co, Cs)
};
constexpr uint8_t kCatMask = 0x07;
constexpr uint8_t kWhitespace = 0x08;  // White_Space property (\s)

// Category group in the low 3 bits, kWhitespace on top.
uint8_t flags(uint32_t cp);
inline Cat category(uint32_t cp) { return static_cast<Cat>(flags(cp) & kCatMask); }
inline bool is_whitespace(uint32_t cp) { return (flags(cp) & kWhitespace) != 0; }

// Number of bytes of the UTF-8 sequence that starts with `lead`, judged by its high 4 bits only
// (continuation and invalid lead bytes count 1), as llama.cpp's unicode_len_utf8.
inline size_t utf8_len(uint8_t lead) {
  static constexpr uint8_t kLen[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return kLen[lead >> 4];
}

constexpr uint32_t kReplacement = 0xFFFD;

// Decodes UTF-8 the way llama.cpp does: lead bytes 0xC0-0xF7 with the right number of
// continuation bytes decode without overlong/surrogate checks (so 0xF4-0xF7 can give values
// above 0x10FFFF); any other byte yields U+FFFD and consumes one byte.
std::vector<uint32_t> decode_utf8(std::string_view s);
// Appends the UTF-8 encoding of cp; values above 0x10FFFF are written as U+FFFD (llama.cpp
// throws there).
void append_utf8(std::string& out, uint32_t cp);
std::string encode_utf8(uint32_t cp);
// Strict validity check (used by tests and decode helpers): well-formed UTF-8 per RFC 3629.
bool is_valid_utf8(std::string_view s);

// Simple lowercase for the contraction matches of the pre-tokenizers; only ASCII letters map to
// the letters those rules compare against, so this is all that is needed.
inline uint32_t to_lower_ascii(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// GPT-2 byte-level encoding: every byte maps to one printable code point
// (bytes 0x21-0x7E, 0xA1-0xAC, 0xAE-0xFF map to themselves, the rest to 0x100 + n in order).
const std::string& byte_to_bpe_utf8(uint8_t b);
// Inverse; -1 if cp is not one of the 256 byte code points.
int bpe_cp_to_byte(uint32_t cp);

}  // namespace les::unicode
