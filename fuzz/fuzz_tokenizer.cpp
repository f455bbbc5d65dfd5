// Fuzz target: the tokenizer on arbitrary bytes, with the three vocabularies of tests/data/vocab
// (byte-level BPE qwen2 and llama3, SentencePiece llama). The first input byte picks the
// vocabulary and the add_special / parse_special flags; the rest is the text. Contract
// (tokenizer.h): encode never fails on any bytes and yields ids inside the vocabulary; every id
// renders as a piece; for the qwen2 vocabulary decode(encode(t)) == t when t is valid UTF-8 and
// special texts are not parsed.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "les/gguf/gguf.h"
#include "les/tokenizer/tokenizer.h"
#include "les/tokenizer/unicode.h"
#include "les/util/error.h"

namespace {

void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz_tokenizer: postcondition failed: %s\n", what);
    std::abort();
  }
}

std::unique_ptr<les::Tokenizer> load(const char* name) {
  const std::string path = std::string(LES_SOURCE_DIR) + "/tests/data/vocab/ggml-vocab-" + name + ".gguf";
  return std::make_unique<les::Tokenizer>(les::vocab_from_gguf(les::gguf::read_file(path)));
}

struct Vocabs {
  std::unique_ptr<les::Tokenizer> qwen2 = load("qwen2");
  std::unique_ptr<les::Tokenizer> llama_bpe = load("llama-bpe");
  std::unique_ptr<les::Tokenizer> llama_spm = load("llama-spm");
};

const Vocabs* g_vocabs = nullptr;

}  // namespace

// The three 150k-token vocabularies are loaded once, before the first input: under ASan that takes
// seconds, which must not count against the per-input timeout (-timeout=10).
extern "C" int LLVMFuzzerInitialize(int* /*argc*/, char*** /*argv*/) {
  static const Vocabs vocabs;
  g_vocabs = &vocabs;
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_vocabs) LLVMFuzzerInitialize(nullptr, nullptr);
  const Vocabs& vocabs = *g_vocabs;
  if (size == 0) return 0;
  const uint8_t sel = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  const les::Tokenizer& tok = sel % 3 == 0 ? *vocabs.qwen2 : sel % 3 == 1 ? *vocabs.llama_bpe : *vocabs.llama_spm;
  const bool add_special = (sel >> 2) & 1;
  const bool parse_special = (sel >> 3) & 1;

  const std::vector<int32_t> ids = tok.encode(text, add_special, parse_special);
  for (int32_t id : ids) {
    require(id >= 0 && id < tok.n_tokens(), "token id in range");
    (void)tok.token_to_piece(id, (sel >> 4) & 1);
  }
  const std::string back = tok.decode(ids, (sel >> 5) & 1, (sel >> 6) & 1);
  if (&tok == vocabs.qwen2.get() && !add_special && !parse_special && !((sel >> 5) & 1) &&
      les::unicode::is_valid_utf8(text)) {
    require(back == text, "qwen2 decode(encode(t)) == t for valid UTF-8");
  }
  (void)tok.pre_tokenize(text);
  return 0;
}
