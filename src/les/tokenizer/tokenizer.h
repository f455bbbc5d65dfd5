// Tokenizer for llama.cpp-compatible GGUF vocabularies. Produces the same token ids as
// llama.cpp's llama_tokenize and the same text as llama_token_to_piece / llama_detokenize.
//
// Supported: tokenizer.ggml.model "gpt2" (byte-level BPE) with the pre-tokenizers
//   default/"" , gpt-2 family (gpt-2, mpt, olmo, phi-2, jais, ...), llama3 family (llama3,
//   llama-bpe, dbrx, smaug-bpe, falcon3, chatglm-bpe, ...), qwen2 family (qwen2, stablelm2,
//   deepseek-r1-qwen, hunyuan, megrez, ...), qwen35, starcoder family (starcoder, refact,
//   command-r, smollm, ...), falcon, gpt-4o (gpt-oss; llama4, minimax-m2, ...), kimi-k2,
//   deepseek-v3 (hunyuan-dense, joyai-llm, hy_v4), deepseek-llm and deepseek-coder;
// and "llama" (SentencePiece BPE with scores, <0xXX> byte fallback).
//
// Usage:
//   les::Tokenizer tok(les::vocab_from_gguf(gguf_file));
//   auto ids = tok.encode("Hello", /*add_special=*/true, /*parse_special=*/false);
//   std::string text = tok.decode(ids);
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace les {

namespace gguf {
struct File;
}

// Token types as stored in tokenizer.ggml.token_type (llama.cpp's llama_token_type).
enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Token attributes (llama.cpp's llama_token_attr bits).
enum TokenAttr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrNormalized = 1u << 6,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
  kAttrSingleWord = 1u << 9,
};

// Vocabulary as stored in GGUF metadata. Plain data; Tokenizer validates it.
struct Vocab {
  std::string model;                 // tokenizer.ggml.model: "gpt2" or "llama"
  std::string pre;                   // tokenizer.ggml.pre ("" = llama.cpp's "default")
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (TokenType); empty = all normal
  std::vector<float> scores;         // tokenizer.ggml.scores; empty = all 0
  std::vector<std::string> merges;   // tokenizer.ggml.merges ("left right"; rank = index)

  // Special token ids from tokenizer.ggml.*_token_id; -1 = key absent, in which case llama.cpp's
  // defaults apply (SPM: bos 1, eos 2, unk 0; BPE: bos = eos = 11) and EOT/EOM/FIM tokens are
  // found by their text. Ids outside the vocabulary are ignored, as llama.cpp does.
  int32_t bos_id = -1, eos_id = -1, eot_id = -1, eom_id = -1, unk_id = -1, sep_id = -1,
          pad_id = -1, mask_id = -1;
  int32_t fim_pre_id = -1, fim_suf_id = -1, fim_mid_id = -1, fim_pad_id = -1, fim_rep_id = -1,
          fim_sep_id = -1;

  std::optional<bool> add_bos;           // tokenizer.ggml.add_bos_token
  std::optional<bool> add_eos;           // tokenizer.ggml.add_eos_token
  std::optional<bool> add_space_prefix;  // tokenizer.ggml.add_space_prefix

  std::string chat_template;  // tokenizer.chat_template
  std::string name;           // general.name (llama.cpp keys a few token attributes on it)
};

// Reads the tokenizer.* keys (and general.name) of a GGUF file. Throws les::Error naming the key
// when a key is missing or has the wrong type, or when array lengths disagree.
Vocab vocab_from_gguf(const gguf::File& file);

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", ...
  std::string content;
};

// ChatML as used by the Qwen family: "<|im_start|>role\ncontent<|im_end|>\n" per message, then
// "<|im_start|>assistant\n" if add_assistant_prompt. Tokenize the result with parse_special.
std::string apply_chatml(const std::vector<ChatMessage>& msgs, bool add_assistant_prompt);
// True if a tokenizer.chat_template is ChatML-style (uses <|im_start|> / <|im_end|>).
bool template_is_chatml(std::string_view chat_template);

class Tokenizer {
 public:
  // Validates the vocabulary and builds the lookup tables. Throws les::Error (naming the GGUF
  // key) on an unsupported model/pre-tokenizer or inconsistent data.
  explicit Tokenizer(Vocab vocab);
  ~Tokenizer();
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;

  // llama_tokenize(text, add_special, parse_special).
  // add_special: prepend BOS / append EOS when the vocabulary asks for it (add_bos/add_eos).
  // parse_special: texts of control tokens (e.g. "<|im_start|>") become those tokens; without it
  // only user-defined tokens are matched and control-token texts are tokenized as plain text.
  // Never fails on any input bytes: invalid UTF-8 is handled as llama.cpp does (BPE: each bad
  // byte becomes U+FFFD; SPM: byte-fallback tokens).
  std::vector<int32_t> encode(std::string_view text, bool add_special, bool parse_special) const;

  // llama_token_to_piece(id, lstrip = 0, special): the text of one token. special = false renders
  // control/unknown tokens as "". Throws les::Error for ids outside the vocabulary.
  std::string token_to_piece(int32_t id, bool special = true) const;

  // llama_detokenize(ids, remove_special, unparse_special = special), including its per-vocab
  // clean-up (SPM: leading space of the first token dropped; clean_spaces vocabularies such as
  // gpt-2/llama3: " ." -> "." etc.). For qwen2/qwen35/gpt-4o/kimi-k2/deepseek vocabularies
  // decode(encode(t)) == t for valid UTF-8 t.
  std::string decode(const std::vector<int32_t>& ids, bool special = true,
                     bool remove_special = false) const;

  // The words BPE merges run on, byte-level encoded for gpt2 vocabularies (for diagnostics when
  // comparing with another implementation). Empty for SPM vocabularies.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  int32_t n_tokens() const;
  bool is_eog(int32_t id) const;  // end of generation: EOS, EOT, <|im_end|>, <|endoftext|>, ...
  bool is_control(int32_t id) const;
  uint32_t attr(int32_t id) const;   // TokenAttr bits
  const std::string& token_text(int32_t id) const;  // raw vocabulary string
  int32_t find_token(std::string_view text) const;  // exact vocabulary string -> id, or -1
  const std::vector<int32_t>& eog_ids() const;      // sorted

  int32_t bos() const;  // -1 if none
  int32_t eos() const;
  int32_t eot() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;
  bool add_eos() const;
  bool is_spm() const;
  const std::string& pre() const;
  const Vocab& vocab() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace les
