// Hand-written matchers for the pre-tokenizer regexes. They reproduce llama.cpp's results
// (its own hand-written matchers for the GPT-2 / Llama-3 / Qwen2 / Qwen3.5 patterns and its
// std::regex fallback for the simple character-class patterns), including its edge cases, e.g.
// \s+(?!\S) leaving the last blank of a run for the following word.
#include "les/tokenizer/pretokenize.h"

#include <algorithm>

#include "les/tokenizer/unicode.h"

namespace les::tok {
namespace {

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
  }
}

}  // namespace

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
      apply_rule(rule, cpts, start, start + len, next);
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
