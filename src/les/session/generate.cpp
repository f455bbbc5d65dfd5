#include "les/session/generate.h"

#include <chrono>
#include <cmath>

#include "les/session/generate_internal.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les {

void check_finite(const float* logits, int n_vocab, int n_past) {
  for (int i = 0; i < n_vocab; ++i) {
    if (!std::isfinite(logits[i])) {
      throw Error(strfmt("non-finite logit (%s) for token %d after %d positions: the model has NaN or "
                         "infinite weights or block scales; `les verify MODEL` names the tensor and block",
                         std::isnan(logits[i]) ? "NaN" : "inf", i, n_past));
    }
  }
}

GenerateStats generate(Context& ctx, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                       const GenerateParams& p, const TokenCallback& on_token) {
  GenerateStats st;
  if (prompt.empty()) throw Error("the prompt is empty (no tokens)");
  if (ctx.n_past() + static_cast<int64_t>(prompt.size()) > ctx.n_ctx()) {
    throw Error(strfmt("the prompt has %zu tokens but the context holds %d (raise -c / --ctx-size)", prompt.size(),
                       ctx.n_ctx() - ctx.n_past()));
  }
  if (p.drafter) return generate_speculative(ctx, tok, prompt, p, on_token);
  const int n_vocab = ctx.model().config().n_vocab;
  Sampler sampler(p.sampling);
  // The penalty window sees the whole text: what the context already holds, then the prompt.
  for (int32_t t : ctx.tokens()) {
    if (t >= 0) sampler.accept(t);  // not the visual tokens of an image (Context::kEmbeddingRow)
  }
  for (int32_t t : prompt) sampler.accept(t);

  double t0 = now_s();
  ctx.eval(prompt, false);
  st.prompt_seconds = now_s() - t0;
  st.n_prompt = static_cast<int>(prompt.size());
  const float* logits = ctx.last_logits();
  check_finite(logits, n_vocab, ctx.n_past());
  st.stop_reason = "length";

  t0 = now_s();
  for (int i = 0; p.n_predict < 0 || i < p.n_predict; ++i) {
    const int32_t id = sampler.sample(logits, n_vocab);
    sampler.accept(id);
    ++st.n_generated;
    const bool eog = tok.is_eog(id);
    if (on_token && !on_token(id, eog ? std::string() : tok.token_to_piece(id, false))) {
      st.stop_reason = "callback";
      break;
    }
    if (eog && p.stop_at_eog) {
      st.stop_reason = "eog";
      break;
    }
    if (p.n_predict >= 0 && i + 1 >= p.n_predict) break;
    if (ctx.n_past() >= ctx.n_ctx()) {
      st.stop_reason = "context";
      break;
    }
    ctx.eval(std::span<const int32_t>(&id, 1), false);
    ++st.n_decode_evals;
    logits = ctx.last_logits();
    check_finite(logits, n_vocab, ctx.n_past());
  }
  st.gen_seconds = now_s() - t0;
  st.final_logits_hash = hash64(logits, sizeof(float) * static_cast<size_t>(n_vocab));
  return st;
}

}  // namespace les
