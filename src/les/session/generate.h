// Text generation over a Context: prompt prefill, then sample / evaluate token by token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "les/model/context.h"
#include "les/sample/sampler.h"
#include "les/tokenizer/tokenizer.h"

namespace les {

struct GenerateParams {
  int n_predict = 128;        // tokens to generate (< 0: until end of generation or context)
  SamplerParams sampling;
  bool stop_at_eog = true;    // stop at an end-of-generation token
};

struct GenerateStats {
  int n_prompt = 0;
  int n_generated = 0;
  int n_decode_evals = 0;          // single-token forward passes during generation
  double prompt_seconds = 0;
  double gen_seconds = 0;
  uint64_t final_logits_hash = 0;  // xxh3 of the last logits vector computed
  std::string stop_reason;         // "length", "eog", "context", "callback"
  double prompt_tps() const { return prompt_seconds > 0 ? n_prompt / prompt_seconds : 0; }
  double gen_tps() const { return gen_seconds > 0 ? n_decode_evals / gen_seconds : 0; }
};

// Called with each generated token and its text; return false to stop.
using TokenCallback = std::function<bool(int32_t id, const std::string& piece)>;

// Evaluates the prompt (must fit the context: throws les::Error otherwise) and generates.
GenerateStats generate(Context& ctx, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                       const GenerateParams& p, const TokenCallback& on_token);

}  // namespace les
