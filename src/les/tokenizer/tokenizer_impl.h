// Internal declarations shared by the tokenizer's .cpp files.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace les::tok {

struct StrHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using StrMap = std::unordered_map<std::string, int32_t, StrHash, std::equal_to<>>;

inline int32_t lookup(const StrMap& m, std::string_view s) {
  auto it = m.find(s);
  return it == m.end() ? -1 : it->second;
}

// Lookup tables the merge algorithms need.
struct VocabIndex {
  StrMap token_to_id;                 // vocabulary string -> id
  StrMap merge_rank;                  // "left right" -> rank (first occurrence wins)
  std::vector<float> scores;          // per token (SPM)
  std::array<int32_t, 256> byte_token{};  // SPM byte-fallback token per byte, -1 if none
};

// Byte-level BPE on one pre-tokenized word (llm_tokenizer_bpe_session). byte_encode: the word
// is GPT-2 byte-encoded and unknown pieces fall back to single-byte tokens of that encoding;
// otherwise to <0xXX> tokens. ignore_merges: a word that is itself a token is emitted whole.
void bpe_encode_word(const VocabIndex& v, std::string_view word, bool ignore_merges,
                     bool byte_encode, std::vector<int32_t>& out);

// SentencePiece-style BPE on one text fragment whose spaces are already escaped as U+2581
// (llm_tokenizer_spm_session). unk: used when a byte has no byte-fallback token.
void spm_encode(const VocabIndex& v, std::string_view text, int32_t unk,
                std::vector<int32_t>& out);

}  // namespace les::tok
