// Hand-written matchers for the pre-tokenizer regexes. They reproduce llama.cpp's results
// (its own hand-written matchers for the GPT-2 / Llama-3 / Qwen2 / Qwen3.5 patterns and its
// std::regex fallback for the simple character-class patterns), including its edge cases, e.g.
// \s+(?!\S) leaving the last blank of a run for the following word.
#include "les/tokenizer/pretokenize.h"

#include <algorithm>

#include "les/tokenizer/unicode.h"

namespace les::tok {
namespace pretok {

using unicode::Cat;

constexpr uint32_t kNone = 0xFFFFFFFFu;  // "past the end of the piece"

// Flags of a code point with bit 0x100 set, or 0 past the end of the piece (llama.cpp's empty
// flags), so "has any flag" tests work as there.
struct Piece {
  const std::vector<uint32_t>& cpts;
  size_t end;
  uint32_t cp(size_t p) const { return p < end ? cpts[p] : kNone; }
  unsigned fl(size_t p) const { return p < end ? (unicode::flags(cpts[p]) | 0x100u) : 0u; }
};

inline bool is_cat(unsigned f, Cat c) { return f != 0 && (f & unicode::kCatMask) == c; }
inline bool is_letter(unsigned f) { return is_cat(f, unicode::LETTER); }
inline bool is_number(unsigned f) { return is_cat(f, unicode::NUMBER); }
inline bool is_mark(unsigned f) { return is_cat(f, unicode::MARK); }
inline bool is_ws(unsigned f) { return (f & unicode::kWhitespace) != 0; }

// Length of a contraction ('s 't 'm 'd 're 've 'll) starting at pos, or 0.
size_t contraction_len(const Piece& pc, size_t pos, bool ignore_case) {
  if (pc.cp(pos) != '\'' || pos + 1 >= pc.end) return 0;
  auto low = [&](uint32_t c) { return ignore_case ? unicode::to_lower_ascii(c) : c; };
  const uint32_t a = low(pc.cp(pos + 1));
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return 2;
  if (pos + 2 >= pc.end) return 0;
  const uint32_t b = low(pc.cp(pos + 2));
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return 3;
  return 0;
}

// Whitespace handling shared by all the custom matchers. Returns the piece length at pos.
// with_newlines: the \s*[\r\n]+ alternative exists (Llama-3 family).
size_t whitespace_len(const Piece& pc, size_t pos, bool with_newlines) {
  size_t n = 0;
  size_t last_nl_end = 0;
  while (is_ws(pc.fl(pos + n))) {
    const uint32_t c = pc.cp(pos + n);
    if (c == '\r' || c == '\n') last_nl_end = pos + n + 1;
    ++n;
  }
  if (with_newlines && last_nl_end > 0) return last_nl_end - pos;  // \s*[\r\n]+
  if (n > 1 && pos + n < pc.end) return n - 1;                     // \s+(?!\S)
  if (n > 0) return n;                                             // \s+
  return 1;                                                        // no match: single char
}

void split_gpt2(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                std::vector<size_t>& out) {
  const Piece pc{cpts, end};
  size_t pos = ini;
  while (pos < end) {
    size_t len = contraction_len(pc, pos, /*ignore_case=*/false);
    if (len == 0) {
      const uint32_t c = pc.cp(pos);
      const unsigned f2 = c == ' ' ? pc.fl(pos + 1) : pc.fl(pos);
      auto run = [&](auto pred) {
        size_t p = pos + (c == ' ' ? 1 : 0);
        while (pred(pc.fl(p))) ++p;
        return p - pos;
      };
      auto other = [](unsigned f) { return f != 0 && !is_ws(f) && !is_letter(f) && !is_number(f); };
      if (is_letter(f2)) {
        len = run(is_letter);  //  ?\p{L}+
      } else if (is_number(f2)) {
        len = run(is_number);  //  ?\p{N}+
      } else if (other(f2)) {
        len = run(other);  //  ?[^\s\p{L}\p{N}]+
      } else {
        len = whitespace_len(pc, pos, /*with_newlines=*/false);
      }
    }
    out.push_back(len);
    pos += len;
  }
}

// Llama-3 (max_digits 3), Qwen2 (max_digits 1), Qwen3.5 (max_digits 1, marks join letters).
void split_llama3(const std::vector<uint32_t>& cpts, size_t ini, size_t end, size_t max_digits,
                  bool marks, std::vector<size_t>& out) {
  const Piece pc{cpts, end};
  auto letterish = [marks](unsigned f) { return is_letter(f) || (marks && is_mark(f)); };
  size_t pos = ini;
  while (pos < end) {
    if (size_t len = contraction_len(pc, pos, /*ignore_case=*/true)) {
      out.push_back(len);
      pos += len;
      continue;
    }
    const uint32_t c = pc.cp(pos);
    const unsigned f = pc.fl(pos);
    // [^\r\n\p{L}\p{N}]?\p{L}+
    if (!(c == '\r' || c == '\n' || is_number(f)) && (letterish(f) || letterish(pc.fl(pos + 1)))) {
      size_t p = pos + 1;
      while (letterish(pc.fl(p))) ++p;
      out.push_back(p - pos);
      pos = p;
      continue;
    }
    // \p{N}{1,max_digits}
    if (is_number(f)) {
      size_t p = pos;
      while (is_number(pc.fl(p))) ++p;
      while (pos < p) {
        const size_t len = std::min(max_digits, p - pos);
        out.push_back(len);
        pos += len;
      }
      continue;
    }
    //  ?[^\s\p{L}\p{N}]+[\r\n]*
    const unsigned f2 = c == ' ' ? pc.fl(pos + 1) : f;
    auto other = [&](unsigned g) {
      return !is_ws(g) && !letterish(g) && !is_number(g);
    };
    if (other(f2) && f != 0) {
      size_t p = pos + (c == ' ' ? 1 : 0);
      while (other(pc.fl(p)) && pc.fl(p) != 0) ++p;
      while (pc.cp(p) == '\r' || pc.cp(p) == '\n') ++p;
      out.push_back(p - pos);
      pos = p;
      continue;
    }
    const size_t len = whitespace_len(pc, pos, /*with_newlines=*/true);
    out.push_back(len);
    pos += len;
  }
}

// Isolates the matches of a one-code-point class: each match alone (runs=false) or maximal runs
// of matches (runs=true); the text between matches stays in pieces of its own.
template <typename Pred>
void split_class(const std::vector<uint32_t>& cpts, size_t ini, size_t end, bool runs, Pred pred,
                 std::vector<size_t>& out) {
  size_t gap = ini;
  size_t pos = ini;
  while (pos < end) {
    if (!pred(cpts[pos])) {
      ++pos;
      continue;
    }
    if (pos > gap) out.push_back(pos - gap);
    size_t p = pos + 1;
    if (runs) {
      while (p < end && pred(cpts[p])) ++p;
    }
    out.push_back(p - pos);
    pos = gap = p;
  }
  if (end > gap) out.push_back(end - gap);
}

void split_digits3(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                   std::vector<size_t>& out) {
  auto digit = [&](size_t p) { return cpts[p] >= '0' && cpts[p] <= '9'; };
  size_t gap = ini;
  size_t pos = ini;
  while (pos + 3 <= end) {
    if (digit(pos) && digit(pos + 1) && digit(pos + 2)) {
      if (pos > gap) out.push_back(pos - gap);
      out.push_back(3);
      pos += 3;
      gap = pos;
    } else {
      ++pos;
    }
  }
  if (end > gap) out.push_back(end - gap);
}

bool is_punct_or(uint32_t cp, bool backtick) {
  if (unicode::category(cp) == unicode::PUNCT) return true;
  switch (cp) {
    case '$': case '+': case '<': case '=': case '>': case '^': case '~': case '|':
      return true;
    case '`':
      return backtick;
    default:
      return false;
  }
}

// ---- Rules that mirror llama.cpp's std::regex fallback -------------------------------------
// llama.cpp runs these regexes with std::regex (ECMAScript: the first alternative that matches
// wins, quantifiers backtrack) over a "collapsed" text in which every non-ASCII code point is one
// byte standing for its whitespace-ness or category group, or (regexes without \p{..}) with
// std::wregex over the code points with non-ASCII whitespace replaced by \v. Consequences kept
// here: a non-ASCII letter is both upper and lower case, and non-ASCII whitespace is \s but never
// a member of a literal range such as [ࠀ-一].

// The leftmost match of a regex, again and again (std::regex_iterator): each match is a piece,
// and so is the text between two matches. match(pos) is the length of the match starting at pos,
// 0 when none starts there.
template <typename Match>
void split_matches(size_t ini, size_t end, Match match, std::vector<size_t>& out) {
  size_t gap = ini;
  size_t pos = ini;
  while (pos < end) {
    const size_t len = match(pos);
    if (len == 0) {
      ++pos;
      continue;
    }
    if (pos > gap) out.push_back(pos - gap);
    out.push_back(len);
    pos += len;
    gap = pos;
  }
  if (end > gap) out.push_back(end - gap);
}

struct CpRange {
  uint32_t first, last;
};

template <size_t N>
bool in_ranges(uint32_t cp, const CpRange (&ranges)[N]) {
  if (unicode::is_whitespace(cp)) return false;  // collapsed to \v before matching
  for (const CpRange& r : ranges) {
    if (cp >= r.first && cp <= r.last) return true;
  }
  return false;
}

// DeepSeek LLM's letters: the class [A-Za-zµÀ-ÖØ-öø-ƺ...𞤀-𞥃] of its tokenizer.json, as ranges.
constexpr CpRange kDeepseekLetterRanges[] = {
    {0x41, 0x5A},       {0x61, 0x7A},       {0xB5, 0xB5},       {0xC0, 0xD6},
    {0xD8, 0xF6},       {0xF8, 0x1BA},      {0x1BC, 0x1BF},     {0x1C4, 0x293},
    {0x295, 0x2AF},     {0x370, 0x373},     {0x376, 0x377},     {0x37B, 0x37D},
    {0x37F, 0x37F},     {0x386, 0x386},     {0x388, 0x38A},     {0x38C, 0x38C},
    {0x38E, 0x3A1},     {0x3A3, 0x3F5},     {0x3F7, 0x481},     {0x48A, 0x52F},
    {0x531, 0x556},     {0x10A0, 0x10C5},   {0x13A0, 0x13F5},   {0x13F8, 0x13FD},
    {0x1C90, 0x1CBA},   {0x1CBD, 0x1CBF},   {0x1D00, 0x1D2B},   {0x1D6B, 0x1D77},
    {0x1D79, 0x1D9A},   {0x1E00, 0x1F15},   {0x1F18, 0x1F1D},   {0x1F20, 0x1F45},
    {0x1F48, 0x1F4D},   {0x1F50, 0x1F57},   {0x1F59, 0x1F59},   {0x1F5B, 0x1F5B},
    {0x1F5D, 0x1F5D},   {0x1F5F, 0x1F7D},   {0x1F80, 0x1FB4},   {0x1FB6, 0x1FBC},
    {0x1FBE, 0x1FBE},   {0x1FC2, 0x1FC4},   {0x1FC6, 0x1FCC},   {0x1FD0, 0x1FD3},
    {0x1FD6, 0x1FDB},   {0x1FE0, 0x1FEC},   {0x1FF2, 0x1FF4},   {0x1FF6, 0x1FFC},
    {0x2102, 0x2102},   {0x2107, 0x2107},   {0x210A, 0x2113},   {0x2115, 0x2115},
    {0x2119, 0x211D},   {0x2124, 0x2124},   {0x2126, 0x2126},   {0x2128, 0x2128},
    {0x212A, 0x212D},   {0x212F, 0x2134},   {0x2139, 0x2139},   {0x213C, 0x213F},
    {0x2145, 0x2149},   {0x214E, 0x214E},   {0x2183, 0x2184},   {0x2C00, 0x2C7B},
    {0x2C7E, 0x2CE4},   {0x2CEB, 0x2CEE},   {0x2CF2, 0x2CF3},   {0xA640, 0xA66D},
    {0xA680, 0xA69B},   {0xA722, 0xA76F},   {0xA771, 0xA787},   {0xA78B, 0xA78E},
    {0xAB70, 0xABBF},   {0xFB00, 0xFB06},   {0xFB13, 0xFB17},   {0xFF21, 0xFF3A},
    {0xFF41, 0xFF5A},   {0x10400, 0x1044F}, {0x104B0, 0x104D3}, {0x104D8, 0x104FB},
    {0x10C80, 0x10CB2}, {0x10CC0, 0x10CF2}, {0x118A0, 0x118DF}, {0x1E900, 0x1E943},
};
// [!-/:-~！-／：-～‘-‟　-。]
constexpr CpRange kDeepseekPunctRanges[] = {
    {0x21, 0x2F}, {0x3A, 0x7E}, {0xFF01, 0xFF0F}, {0xFF1A, 0xFF5E}, {0x2018, 0x201F}, {0x3000, 0x3002},
};
// [一-龥ࠀ-一가-퟿]
constexpr CpRange kCjkHangulRanges[] = {{0x4E00, 0x9FA5}, {0x0800, 0x4E00}, {0xAC00, 0xD7FF}};
// [一-龥぀-ゟ゠-ヿ]
constexpr CpRange kCjkKanaRanges[] = {{0x4E00, 0x9FA5}, {0x3040, 0x309F}, {0x30A0, 0x30FF}};

// \s?[class]+ : one optional whitespace, then a run of the class.
template <typename InClass>
void split_space_run(const std::vector<uint32_t>& cpts, size_t ini, size_t end, InClass in_class,
                     std::vector<size_t>& out) {
  const Piece pc{cpts, end};
  auto member = [&](size_t p) { return p < end && in_class(cpts[p]); };
  split_matches(ini, end, [&](size_t pos) -> size_t {
    size_t p = pos;
    if (is_ws(pc.fl(p)) && member(p + 1)) ++p;
    if (!member(p)) return 0;
    while (member(p)) ++p;
    return p - pos;
  }, out);
}

// \s+$
void split_trailing_space(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                          std::vector<size_t>& out) {
  size_t k = end;
  while (k > ini && unicode::is_whitespace(cpts[k - 1])) --k;
  if (k > ini) out.push_back(k - ini);
  if (end > k) out.push_back(end - k);
}

// \p{N}{1,3}
void split_numbers3(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                    std::vector<size_t>& out) {
  const Piece pc{cpts, end};
  split_matches(ini, end, [&](size_t pos) -> size_t {
    size_t p = pos;
    while (p < pos + 3 && is_number(pc.fl(p))) ++p;
    return p - pos;
  }, out);
}

inline bool ascii_lower(uint32_t c) { return c >= 'a' && c <= 'z'; }
inline bool ascii_upper(uint32_t c) { return c >= 'A' && c <= 'Z'; }
inline bool ascii_letter(uint32_t c) { return ascii_lower(c) || ascii_upper(c); }

// gpt-4o's letter word from its first letter s: U*W+ else U+W*, with U a letter that is not a-z
// and W a letter that is not A-Z (so a non-ASCII letter is both). Returns the end of the match.
size_t gpt4o_letters(const Piece& pc, size_t s) {
  constexpr size_t kNoPos = static_cast<size_t>(-1);
  size_t j = s;
  size_t last_both = kNoPos;
  while (is_letter(pc.fl(j)) && !ascii_lower(pc.cp(j))) {
    if (pc.cp(j) >= 0x80) last_both = j;
    ++j;
  }
  if (ascii_lower(pc.cp(j))) {  // U* then W+ from j
    while (is_letter(pc.fl(j)) && !ascii_upper(pc.cp(j))) ++j;
    return j;
  }
  // U* gives back up to its last non-ASCII letter, which W+ takes; without one, U+ alone
  return last_both != kNoPos ? last_both + 1 : j;
}

void split_gpt4o(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                 std::vector<size_t>& out) {
  const Piece pc{cpts, end};
  auto other = [](unsigned g) { return g != 0 && !is_ws(g) && !is_letter(g) && !is_number(g); };
  size_t pos = ini;
  while (pos < end) {
    const uint32_t c = pc.cp(pos);
    const unsigned f = pc.fl(pos);
    size_t p = pos;
    const bool lead = c != '\r' && c != '\n' && !is_letter(f) && !is_number(f);
    if (is_letter(f) || (lead && is_letter(pc.fl(pos + 1)))) {
      // [^\r\n\p{L}\p{N}]? letters (?:'s|'t|'re|'ve|'m|'ll|'d)?
      p = gpt4o_letters(pc, is_letter(f) ? pos : pos + 1);
      p += contraction_len(pc, p, /*ignore_case=*/true);
    } else if (is_number(f)) {
      while (p < pos + 3 && is_number(pc.fl(p))) ++p;  // \p{N}{1,3}
    } else if (other(c == ' ' ? pc.fl(pos + 1) : f)) {
      //  ?[^\s\p{L}\p{N}]+[\r\n/]*
      p += c == ' ' ? 1 : 0;
      while (other(pc.fl(p))) ++p;
      while (pc.cp(p) == '\r' || pc.cp(p) == '\n' || pc.cp(p) == '/') ++p;
    } else {
      p += whitespace_len(pc, pos, /*with_newlines=*/true);
    }
    out.push_back(p - pos);
    pos = p;
  }
}

// The main DeepSeek-V3 regex (see SplitRule::kDeepseekV3). Code points it does not match (numbers,
// controls, format characters) stay in the pieces between matches.
void split_deepseek_v3(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                       std::vector<size_t>& out) {
  const Piece pc{cpts, end};
  auto ascii_ps = [](uint32_t c) {
    return (c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) ||
           (c >= 0x7B && c <= 0x7E);
  };
  auto lm = [](unsigned g) { return is_letter(g) || is_mark(g); };
  auto ps = [](unsigned g) { return is_cat(g, unicode::PUNCT) || is_cat(g, unicode::SYMBOL); };
  split_matches(ini, end, [&](size_t pos) -> size_t {
    const uint32_t c = pc.cp(pos);
    const unsigned f = pc.fl(pos);
    size_t p = pos;
    // [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+
    if (ascii_ps(c) && ascii_letter(pc.cp(pos + 1))) {
      ++p;
      while (ascii_letter(pc.cp(p))) ++p;
      return p - pos;
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+
    const bool lead = c != '\r' && c != '\n' && !is_letter(f) && !ps(f);
    if (lm(f) || (lead && lm(pc.fl(pos + 1)))) {
      ++p;
      while (lm(pc.fl(p))) ++p;
      return p - pos;
    }
    //  ?[\p{P}\p{S}]+[\r\n]*
    if (ps(c == ' ' ? pc.fl(pos + 1) : f)) {
      p += c == ' ' ? 1 : 0;
      while (ps(pc.fl(p))) ++p;
      while (pc.cp(p) == '\r' || pc.cp(p) == '\n') ++p;
      return p - pos;
    }
    // \s*[\r\n]+|\s+(?!\S)|\s+
    return is_ws(f) ? whitespace_len(pc, pos, /*with_newlines=*/true) : 0;
  }, out);
}

// ---- Kimi-K2: llama.cpp's hand-written matcher ------------------------------------------------

// llama.cpp's unicode_cpt_is_han: the CJK Unified Ideographs blocks and extensions A-F and the
// compatibility ideographs (not the Unicode Han script: no 々, 〇 or radicals).
bool is_han(uint32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0x2CEB0 && c <= 0x2EBEF) || (c >= 0xF900 && c <= 0xFAFF) ||
         (c >= 0x2F800 && c <= 0x2FA1F);
}

// [\p{Han}]+ | [^\r\n\p{L}\p{N}]?<non-Han letters>(?i:'s|'t|'re|'ve|'m|'ll|'d)? | \p{N}{1,3} |
//  ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
// (letters are \p{L} only: llama.cpp leaves out the \p{M} and the case classes of the original)
void split_kimi_k2(const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                   std::vector<size_t>& out) {
  const Piece pc{cpts, end};
  auto word_letter = [&](size_t p) { return is_letter(pc.fl(p)) && !is_han(pc.cp(p)); };
  auto other = [](unsigned g) { return g != 0 && !is_ws(g) && !is_letter(g) && !is_number(g); };
  size_t pos = ini;
  while (pos < end) {
    const uint32_t c = pc.cp(pos);
    const unsigned f = pc.fl(pos);
    size_t p = pos;
    const bool lead = c != '\r' && c != '\n' && !is_letter(f) && !is_number(f);
    if (is_han(c)) {
      while (is_han(pc.cp(p))) ++p;
    } else if (word_letter(pos) || (lead && word_letter(pos + 1))) {
      if (lead) ++p;
      while (word_letter(p)) ++p;
      p += contraction_len(pc, p, /*ignore_case=*/true);
    } else if (is_number(f)) {
      while (p < pos + 3 && is_number(pc.fl(p))) ++p;
    } else if (other(c == ' ' ? pc.fl(pos + 1) : f)) {
      p += c == ' ' ? 1 : 0;
      while (other(pc.fl(p))) ++p;
      while (pc.cp(p) == '\r' || pc.cp(p) == '\n') ++p;
    } else {
      p += whitespace_len(pc, pos, /*with_newlines=*/true);
    }
    out.push_back(p - pos);
    pos = p;
  }
}

void apply_rule(SplitRule rule, const std::vector<uint32_t>& cpts, size_t ini, size_t end,
                std::vector<size_t>& out) {
  switch (rule) {
    case SplitRule::kGpt2: split_gpt2(cpts, ini, end, out); break;
    case SplitRule::kLlama3: split_llama3(cpts, ini, end, 3, false, out); break;
    case SplitRule::kQwen2: split_llama3(cpts, ini, end, 1, false, out); break;
    case SplitRule::kQwen35: split_llama3(cpts, ini, end, 1, true, out); break;
    case SplitRule::kEachNumber:
      split_class(cpts, ini, end, false,
                  [](uint32_t c) { return unicode::category(c) == unicode::NUMBER; }, out);
      break;
    case SplitRule::kNumberRuns:
      split_class(cpts, ini, end, true,
                  [](uint32_t c) { return unicode::category(c) == unicode::NUMBER; }, out);
      break;
    case SplitRule::kPunctRuns:
      split_class(cpts, ini, end, true, [](uint32_t c) { return is_punct_or(c, false); }, out);
      break;
    case SplitRule::kPunctRunsBacktick:
      split_class(cpts, ini, end, true, [](uint32_t c) { return is_punct_or(c, true); }, out);
      break;
    case SplitRule::kDigits3: split_digits3(cpts, ini, end, out); break;
    case SplitRule::kGpt4o: split_gpt4o(cpts, ini, end, out); break;
    case SplitRule::kKimiK2: split_kimi_k2(cpts, ini, end, out); break;
    case SplitRule::kNumbers3: split_numbers3(cpts, ini, end, out); break;
    case SplitRule::kCjkKana:
      split_class(cpts, ini, end, true, [](uint32_t c) { return in_ranges(c, kCjkKanaRanges); }, out);
      break;
    case SplitRule::kDeepseekV3: split_deepseek_v3(cpts, ini, end, out); break;
    case SplitRule::kEachNewline:
      split_class(cpts, ini, end, false, [](uint32_t c) { return c == '\r' || c == '\n'; }, out);
      break;
    case SplitRule::kDeepseekLetters:
      split_space_run(cpts, ini, end, [](uint32_t c) { return in_ranges(c, kDeepseekLetterRanges); }, out);
      break;
    case SplitRule::kDeepseekPunct:
      split_space_run(cpts, ini, end, [](uint32_t c) { return in_ranges(c, kDeepseekPunctRanges); }, out);
      break;
    case SplitRule::kTrailingSpace: split_trailing_space(cpts, ini, end, out); break;
    case SplitRule::kCjkHangul:
      split_class(cpts, ini, end, true, [](uint32_t c) { return in_ranges(c, kCjkHangulRanges); }, out);
      break;
    case SplitRule::kSpaceLetters:
      split_space_run(cpts, ini, end,
                      [](uint32_t c) { return unicode::category(c) == unicode::LETTER; }, out);
      break;
    case SplitRule::kSpacePunct:
      split_space_run(cpts, ini, end,
                      [](uint32_t c) { return unicode::category(c) == unicode::PUNCT; }, out);
      break;
  }
}

}  // namespace pretok

std::vector<size_t> split_words(const std::vector<uint32_t>& cpts,
                                const std::vector<SplitRule>& rules) {
  std::vector<size_t> pieces;
  if (cpts.empty()) return pieces;
  pieces.push_back(cpts.size());
  std::vector<size_t> next;
  for (SplitRule rule : rules) {
    next.clear();
    next.reserve(pieces.size() * 2);
    size_t start = 0;
    for (size_t len : pieces) {
      pretok::apply_rule(rule, cpts, start, start + len, next);
      start += len;
    }
    pieces.swap(next);
  }
  return pieces;
}

std::vector<std::string> pretokenize(std::string_view text, const std::vector<SplitRule>& rules,
                                     bool byte_encode) {
  const std::vector<uint32_t> cpts = unicode::decode_utf8(text);
  const std::vector<size_t> pieces = split_words(cpts, rules);
  std::vector<std::string> words;
  words.reserve(pieces.size());
  std::string utf8;
  size_t start = 0;
  for (size_t len : pieces) {
    utf8.clear();
    for (size_t i = start; i < start + len; ++i) unicode::append_utf8(utf8, cpts[i]);
    start += len;
    if (!byte_encode) {
      words.push_back(utf8);
      continue;
    }
    std::string enc;
    enc.reserve(utf8.size() * 2);
    for (char ch : utf8) enc += unicode::byte_to_bpe_utf8(static_cast<uint8_t>(ch));
    words.push_back(std::move(enc));
  }
  return words;
}

}  // namespace les::tok
