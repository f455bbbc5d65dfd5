// Per-token measures of one predicted distribution (raw logits), alone or against a base model's.
// All log-softmax arithmetic is in double.
#pragma once

#include <cstdint>

namespace les::quality {

// Index of the largest logit (the lowest index among equal maxima).
int argmax(const float* logits, int n_vocab);

// Negative log-likelihood of `token` under softmax(logits): -log p(token), in nats.
double token_nll(const float* logits, int n_vocab, int32_t token);

struct TokenCompare {
  double kld = 0;          // KL(base || test) = sum_i p_base(i) (log p_base(i) - log p_test(i)), nats;
                           // exactly 0 for identical logits, may be -1e-16-ish from rounding otherwise
  bool same_top1 = false;  // argmax(base) == argmax(test)  (llama.cpp's "same top p")
  double nll_test = 0;     // -log p_test(next_token)
  double nll_base = 0;     // -log p_base(next_token)
};

// Compares two distributions over n_vocab tokens given as raw logits (next_token: the token that
// actually follows, for the two NLLs). Logits must be finite.
TokenCompare compare_logits(const float* base_logits, const float* test_logits, int n_vocab, int32_t next_token);

}  // namespace les::quality
