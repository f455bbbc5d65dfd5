// Pre-tokenization for BPE vocabularies: splits text into the words that BPE merges run on,
// exactly as llama.cpp's unicode_regex_split does for the supported tokenizer.ggml.pre types.
// Each regex of a pre-tokenizer is one SplitRule, applied in order within the pieces left by
// the previous one (a piece never spans two earlier pieces).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace les::tok {

enum class SplitRule {
  // 's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
  kGpt2,
  // (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|
  // \s*[\r\n]+|\s+(?!\S)|\s+
  kLlama3,
  // as kLlama3 with \p{N} (single digits)
  kQwen2,
  // as kQwen2 with letter runs [\p{L}\p{M}]+ and punctuation [^\s\p{L}\p{M}\p{N}]+
  kQwen35,
  // \p{N}  (every number code point on its own)
  kEachNumber,
  // \p{N}+
  kNumberRuns,
  // [\p{P}\$\+<=>\^~\|]+
  kPunctRuns,
  // [\p{P}\$\+<=>\^~\|`]+
  kPunctRunsBacktick,
  // [0-9][0-9][0-9]
  kDigits3,

  // The rules below follow what llama.cpp's std::regex fallback does with these regexes: every
  // non-ASCII code point counts by its category group only (a non-ASCII letter is both upper and
  // lower case), non-ASCII whitespace is \s and never a member of a literal range.

  // gpt-4o / o200k:
  // [^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+(?:'[sS]|'[tT]|'[rR][eE]|
  // '[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])
  // ([^A-Z]))*(?:...)?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kGpt4o,
  // Kimi-K2, as llama.cpp's hand-written matcher: \p{Han}+ (llama.cpp's Han blocks), then as
  // kLlama3 with letter runs that exclude Han and contractions only as a suffix of a letter run
  kKimiK2,
  // \p{N}{1,3}  (number runs cut into threes from the left, each piece isolated)
  kNumbers3,
  // [一-龥぀-ゟ゠-ヿ]+  (U+4E00-9FA5 and the kana blocks)
  kCjkKana,
  // DeepSeek-V3: [!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?
  // [\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
  kDeepseekV3,
  // [\r\n]  (every CR and LF on its own)
  kEachNewline,
  // \s?[A-Za-zµÀ-ÖØ-öø-ƺ...]+  (DeepSeek LLM's list of cased-script letters)
  kDeepseekLetters,
  // \s?[!-/:-~！-／：-～‘-‟　-。]+
  kDeepseekPunct,
  // \s+$  (the whitespace that ends a piece)
  kTrailingSpace,
  // [一-龥ࠀ-一가-퟿]+  (U+4E00-9FA5, U+0800-4E00, U+AC00-D7FF)
  kCjkHangul,
  // \s?\p{L}+
  kSpaceLetters,
  // \s?\p{P}+
  kSpacePunct,
};

// Splits the code points into consecutive pieces; returns their lengths (in code points).
std::vector<size_t> split_words(const std::vector<uint32_t>& cpts,
                                const std::vector<SplitRule>& rules);

// The pre-tokenized words as UTF-8 (re-encoded from the decoded code points, so invalid input
// bytes appear as U+FFFD), byte-level encoded (GPT-2 byte->unicode) when byte_encode is set.
std::vector<std::string> pretokenize(std::string_view text, const std::vector<SplitRule>& rules,
                                     bool byte_encode);

}  // namespace les::tok
