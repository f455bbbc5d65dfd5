// Token sampling with llama.cpp's semantics: repetition penalty over the last n accepted tokens,
// then top-k, top-p, min-p, temperature, and a draw from the softmax. temp <= 0 is greedy.
// Draws use an own PRNG (xoshiro256** seeded with splitmix64), so a seed gives the same token
// sequence on every platform and standard library.
#pragma once

#include <cstdint>
#include <deque>
#include <vector>

namespace les {

struct SamplerParams {
  float temp = 0.8f;            // <= 0: greedy (argmax, lowest id on ties)
  int top_k = 40;               // <= 0: off
  float top_p = 0.95f;          // >= 1: off
  float min_p = 0.05f;          // <= 0: off; keeps p >= min_p * p_max
  float repeat_penalty = 1.0f;  // 1: off; positive logits are divided, non-positive multiplied
  int repeat_last_n = 64;       // window of accepted tokens the penalty looks at (0: off, <0: all)
  uint64_t seed = 0x5EED;       // same seed + same logits + same accepted tokens => same output
};

// Deterministic PRNG: xoshiro256**, state seeded from splitmix64(seed).
class Rng {
 public:
  explicit Rng(uint64_t seed = 0) { reseed(seed); }
  void reseed(uint64_t seed);
  uint64_t next();
  double uniform();  // [0, 1), 53 random bits
 private:
  uint64_t s_[4];
};

// One candidate of a sampling distribution.
struct TokenProb {
  int32_t id;
  double p;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p = {});

  // Picks the next token from raw logits (n_vocab values; not modified). Does not record it:
  // call accept() with the token that is actually used.
  int32_t sample(const float* logits, int n_vocab);
  // The distribution sample() draws from: the candidates left after the penalty, top-k, top-p and
  // min-p, in draw order, with their probabilities at the temperature (summing to 1). Greedy
  // (temp <= 0) and a single survivor give one candidate with p = 1. Consumes no randomness.
  void distribution(const float* logits, int n_vocab, std::vector<TokenProb>& out);
  // Draws from a distribution as sample() does (no randomness used for one candidate).
  int32_t draw(const std::vector<TokenProb>& dist);
  // The sampler's PRNG (speculative acceptance draws from the same stream).
  Rng& rng() { return rng_; }
  // Records a token (prompt or generated) for the repetition penalty window.
  void accept(int32_t token);
  // Clears the penalty window and restarts the PRNG from the seed.
  void reset();

  const SamplerParams& params() const { return p_; }

 private:
  struct Cand {
    float logit;
    int32_t id;
  };
  void apply_penalty(std::vector<Cand>& c) const;

  SamplerParams p_;
  Rng rng_;
  std::deque<int32_t> window_;
  std::vector<Cand> cand_;
  std::vector<TokenProb> dist_;
};

}  // namespace les
