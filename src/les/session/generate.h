// Text generation over a Context: prompt prefill, then sample / evaluate token by token.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "les/model/context.h"
#include "les/sample/sampler.h"
#include "les/spec/depth.h"
#include "les/spec/drafter.h"
#include "les/tokenizer/tokenizer.h"

namespace les {

struct GenerateParams {
  int n_predict = 128;        // tokens to generate (< 0: until end of generation or context)
  SamplerParams sampling;
  bool stop_at_eog = true;    // stop at an end-of-generation token
  // Speculative decoding (session/speculative.cpp): the drafter proposes, the target verifies
  // each round's drafts in one batch. Null: plain decoding.
  Drafter* drafter = nullptr;
  DepthParams depth;
  // A controller that outlives this call (a session's: what it learnt carries over to the next
  // request); null: a fresh one from `depth`.
  DepthController* depth_state = nullptr;
  // Called once if the depth controller gives speculation up and the drafter is released, with
  // the bytes it freed (e.g. to put the expert cache's withheld slots in use).
  std::function<void(uint64_t bytes)> on_drafter_released;
  // The share of the expert cache withheld for the drafter until it is released (0: none).
  double drafter_cache_share = 0;
  float draft_p_min = 0.0f;   // cut a draft at the first token the drafter's confidence puts below this
};

// Speculative decoding counters (all zero without a drafter).
struct SpecStats {
  int rounds = 0;                  // target verifications (including plain steps, k = 0)
  int drafted = 0, accepted = 0;   // draft tokens proposed / kept
  std::vector<int> drafted_at;     // [i]: rounds that drafted position i + 1
  std::vector<int> accepted_at;    // [i]: rounds that kept position i + 1
  std::vector<int> chosen_k;       // [k]: rounds whose depth controller chose k
  double draft_seconds = 0, verify_seconds = 0;
  // Expert bytes read and tokens committed by plain steps (k = 0) and by speculative rounds:
  // bytes per token with and without speculation in one run (0 bytes when resident).
  uint64_t plain_bytes = 0, spec_bytes = 0;
  int plain_tokens = 0, spec_tokens = 0;
  // Speculation given up (DepthParams::give_up_after): the drafter was released after this many
  // generated tokens (-1: not in this run), freeing released_bytes.
  int released_at = -1;
  uint64_t released_bytes = 0;
  double mean_accepted() const { return rounds ? static_cast<double>(accepted) / rounds : 0; }
};

struct GenerateStats {
  int n_prompt = 0;
  int n_generated = 0;
  int n_decode_evals = 0;          // target forward passes during generation (decode steps or verifications)
  double prompt_seconds = 0;
  double gen_seconds = 0;
  uint64_t final_logits_hash = 0;  // xxh3 of the last logits vector computed
  std::string stop_reason;         // "length", "eog", "context", "callback"
  double prompt_tps() const { return prompt_seconds > 0 ? n_prompt / prompt_seconds : 0; }
  SpecStats spec;
  // Tokens per second after the first (which comes from the prompt's logits).
  double gen_tps() const { return gen_seconds > 0 && n_generated > 1 ? (n_generated - 1) / gen_seconds : 0; }
};

// Called with each generated token and its text; return false to stop.
using TokenCallback = std::function<bool(int32_t id, const std::string& piece)>;

// Evaluates the prompt after what ctx already holds (must fit the context: throws les::Error
// otherwise; the penalty window sees the held tokens too) and generates; with
// p.drafter, speculatively: at temperature 0 the tokens and the final logits are bit-identical to
// plain decoding; with sampling the tokens follow the same distribution.
GenerateStats generate(Context& ctx, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                       const GenerateParams& p, const TokenCallback& on_token);

}  // namespace les
