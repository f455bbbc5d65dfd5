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
};

// Splits the code points into consecutive pieces; returns their lengths (in code points).
std::vector<size_t> split_words(const std::vector<uint32_t>& cpts,
                                const std::vector<SplitRule>& rules);

// The pre-tokenized words as UTF-8 (re-encoded from the decoded code points, so invalid input
// bytes appear as U+FFFD), byte-level encoded (GPT-2 byte->unicode) when byte_encode is set.
std::vector<std::string> pretokenize(std::string_view text, const std::vector<SplitRule>& rules,
                                     bool byte_encode);

}  // namespace les::tok
