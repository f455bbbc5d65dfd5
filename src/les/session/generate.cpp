#include "les/session/generate.h"

#include <chrono>
#include <cmath>

#include "les/session/decode_loop.h"
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
  DecodeLoop loop(tok, p, ctx.tokens(), prompt);

  double t0 = now_s();
  ctx.eval(prompt, false);
  st.prompt_seconds = now_s() - t0;
  st.n_prompt = static_cast<int>(prompt.size());
  const float* logits = ctx.last_logits();

  t0 = now_s();
  while (const std::optional<int32_t> id = loop.next(ctx, logits, on_token, st)) {
    ctx.eval(std::span<const int32_t>(&*id, 1), false);
    ++st.n_decode_evals;
    logits = ctx.last_logits();
  }
  st.gen_seconds = now_s() - t0;
  st.final_logits_hash = hash64(logits, sizeof(float) * static_cast<size_t>(n_vocab));
  return st;
}

}  // namespace les
