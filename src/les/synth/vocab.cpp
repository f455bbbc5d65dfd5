#include "les/synth/vocab.h"

#include "les/util/error.h"

namespace les::synth {

namespace {

// GPT-2's byte-to-unicode map: printable bytes map to themselves, the others to U+0100.. in order.
std::string byte_token(int b) {
  int cp = b;
  const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
  if (!printable) {
    int n = 0;
    for (int x = 0; x < b; ++x) {
      if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255))) ++n;
    }
    cp = 256 + n;
  }
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

}  // namespace

SynthVocab make_synth_vocab(int n_vocab, bool image_tokens) {
  const int n_image = image_tokens ? 4 : 0;
  if (n_vocab < 259 + n_image) {
    throw Error(strfmt("synth: vocabulary of %d tokens is too small (need >= %d)", n_vocab, 259 + n_image));
  }
  SynthVocab v;
  v.tokens.reserve(static_cast<size_t>(n_vocab));
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_token(b));
    v.token_types.push_back(1);  // normal (as convert_hf_to_gguf writes byte-level BPE vocabularies)
  }
  const int n_special = 3;
  const int budget = n_vocab - 256 - n_special - n_image;
  const std::string sp = byte_token(' ');  // "Ġ"
  auto add_merge = [&](const std::string& a, const std::string& b) {
    if (static_cast<int>(v.merges.size()) >= budget) return;
    v.merges.push_back(a + " " + b);
    v.tokens.push_back(a + b);
    v.token_types.push_back(1);
  };
  for (char c = 'a'; c <= 'z'; ++c) add_merge(sp, std::string(1, c));
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) add_merge(std::string(1, a), std::string(1, b));
  }
  for (char a = 'a'; a <= 'z'; ++a) {
    for (char b = 'a'; b <= 'z'; ++b) add_merge(sp + std::string(1, a), std::string(1, b));
  }
  int filler = 0;
  while (static_cast<int>(v.tokens.size()) < n_vocab - n_special - n_image) {
    v.tokens.push_back("<synth_" + std::to_string(filler++) + ">");
    v.token_types.push_back(1);
  }
  for (int i = 0; i < n_image; ++i) {
    v.tokens.emplace_back(kImageTokens[i]);
    v.token_types.push_back(3);  // control
  }
  for (const char* s : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    v.tokens.emplace_back(s);
    v.token_types.push_back(3);  // control
  }
  v.eos_id = n_vocab - n_special;
  return v;
}

void add_synth_tokenizer(gguf::Writer& w, int n_vocab, bool image_tokens) {
  const SynthVocab v = make_synth_vocab(n_vocab, image_tokens);
  w.add_string("tokenizer.ggml.model", "gpt2");
  w.add_string("tokenizer.ggml.pre", "qwen2");
  w.add_string_array("tokenizer.ggml.tokens", v.tokens);
  w.add_i32_array("tokenizer.ggml.token_type", v.token_types);
  w.add_string_array("tokenizer.ggml.merges", v.merges);
  w.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos_id));
  w.add_u32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.eos_id));
  w.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.eos_id));
  w.add_bool("tokenizer.ggml.add_bos_token", false);
  w.add_string("tokenizer.chat_template",
               "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + "
               "'<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
               "{% endif %}");
}

}  // namespace les::synth
