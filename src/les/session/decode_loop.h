// One sequence's plain decoding after its prompt, one token at a time: sampling (with the penalty
// window over everything the context holds), the token callback, and the end conditions
// (callback, end of generation, n_predict, a full context). generate() runs it over one context;
// the batched generator (engine/batch_generator.h) runs one per request, so that a request
// decoded beside others makes the same choices as decoded alone.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "les/sample/sampler.h"
#include "les/session/generate.h"

namespace les {

class DecodeLoop {
 public:
  // held: the tokens the context keeps before the prompt (kEmbeddingRow entries are skipped),
  // prompt: the tokens about to be evaluated after them. Both enter the penalty window.
  DecodeLoop(const Tokenizer& tok, const GenerateParams& p, std::span<const int32_t> held,
             std::span<const int32_t> prompt);

  // Given the logits of ctx's last evaluated position (checked finite: throws les::Error
  // otherwise): samples the next token and reports it to on_token (counted in st.n_generated).
  // Returns the token to evaluate next, or nothing when generation ends here, with
  // st.stop_reason set ("callback", "eog", "length" or "context"; "length" is also the reason
  // when n_predict is 0 and nothing is sampled).
  std::optional<int32_t> next(const Context& ctx, const float* logits, const TokenCallback& on_token, GenerateStats& st);

 private:
  const Tokenizer& tok_;
  int n_predict_;
  bool stop_at_eog_;
  Sampler sampler_;
  int i_ = 0;  // tokens sampled so far
};

}  // namespace les
