#include "les/quality/vocab_check.h"

#include "les/util/error.h"

namespace les::quality {

void check_same_vocabulary(const Model& base, const Model& test) {
  const int nb = base.config().n_vocab, nt = test.config().n_vocab;
  if (nb != nt) {
    throw Error(strfmt("base model %s has a vocabulary of %d tokens, the model %s has %d: they cannot be compared",
                       base.path().c_str(), nb, test.path().c_str(), nt));
  }
  const gguf::Value* tb = base.gguf().find("tokenizer.ggml.tokens");
  const gguf::Value* tt = test.gguf().find("tokenizer.ggml.tokens");
  if (!tb || !tt || tb->type != gguf::ValueType::ARRAY || tt->type != gguf::ValueType::ARRAY) return;
  if (tb->arr.size() != tt->arr.size()) {
    throw Error(strfmt("base model %s lists %zu tokens in tokenizer.ggml.tokens, the model %s %zu", base.path().c_str(),
                       tb->arr.size(), test.path().c_str(), tt->arr.size()));
  }
  for (size_t i = 0; i < tb->arr.size(); ++i) {
    if (tb->arr[i].str != tt->arr[i].str) {
      throw Error(strfmt("base model %s has another vocabulary than %s: token %zu is '%s' there and '%s' here",
                         base.path().c_str(), test.path().c_str(), i, tb->arr[i].str.c_str(), tt->arr[i].str.c_str()));
    }
  }
}

}  // namespace les::quality
