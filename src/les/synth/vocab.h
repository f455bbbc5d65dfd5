// The tokenizer written into synthetic models: byte-level BPE in llama.cpp's "gpt2" model with the
// "qwen2" pre-tokenizer. Ids 0..255 are the 256 byte tokens (byte b is id b, spelled with GPT-2's
// byte-to-unicode map), then merges of letter pairs ("Ġ a" -> "Ġa", "a b" -> "ab",
// "Ġa b" -> "Ġab") while they fit, then filler tokens "<synth_N>" that no text produces, and the
// last three ids are the control tokens <|endoftext|> (bos = eos = padding), <|im_start|>,
// <|im_end|>. No BOS is added. The same n_vocab always gives the same vocabulary, so synthetic
// models of one vocabulary size (a MoE and its draft) share token ids.
// With image_tokens, MiniCPM-V's image markers "<image>", "</image>", "<slice>", "</slice>" are
// control tokens just before those three (ids n_vocab - 7 .. n_vocab - 4, in that order; four
// fewer merges or fillers), so that llama.cpp's mtmd and les's tokenizer (with special tokens
// parsed) find each as one token. Without it the vocabulary is what it always was.
#pragma once

#include <string>
#include <vector>

#include "les/gguf/gguf.h"

namespace les::synth {

struct SynthVocab {
  std::vector<std::string> tokens;
  std::vector<int32_t> token_types;
  std::vector<std::string> merges;
  int32_t eos_id = 0;
};

// The image marker tokens image_tokens adds, in id order.
inline constexpr const char* kImageTokens[4] = {"<image>", "</image>", "<slice>", "</slice>"};

SynthVocab make_synth_vocab(int n_vocab, bool image_tokens = false);
// Adds the tokenizer.* keys to w.
void add_synth_tokenizer(gguf::Writer& w, int n_vocab, bool image_tokens = false);

}  // namespace les::synth
