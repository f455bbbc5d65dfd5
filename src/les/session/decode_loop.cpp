#include "les/session/decode_loop.h"

#include "les/session/generate_internal.h"

namespace les {

DecodeLoop::DecodeLoop(const Tokenizer& tok, const GenerateParams& p, std::span<const int32_t> held,
                       std::span<const int32_t> prompt)
    : tok_(tok), n_predict_(p.n_predict), stop_at_eog_(p.stop_at_eog), sampler_(p.sampling) {
  for (int32_t t : held) {
    if (t >= 0) sampler_.accept(t);  // not the visual tokens of an image (Context::kEmbeddingRow)
  }
  for (int32_t t : prompt) sampler_.accept(t);
}

std::optional<int32_t> DecodeLoop::next(const Context& ctx, const float* logits, const TokenCallback& on_token,
                                        GenerateStats& st) {
  const int n_vocab = ctx.model().config().n_vocab;
  check_finite(logits, n_vocab, ctx.n_past());
  st.stop_reason = "length";
  if (n_predict_ >= 0 && i_ >= n_predict_) return std::nullopt;
  const int32_t id = sampler_.sample(logits, n_vocab);
  sampler_.accept(id);
  ++i_;
  ++st.n_generated;
  const bool eog = tok_.is_eog(id);
  if (on_token && !on_token(id, eog ? std::string() : tok_.token_to_piece(id, false))) {
    st.stop_reason = "callback";
    return std::nullopt;
  }
  if (eog && stop_at_eog_) {
    st.stop_reason = "eog";
    return std::nullopt;
  }
  if (n_predict_ >= 0 && i_ >= n_predict_) return std::nullopt;
  if (ctx.n_past() >= ctx.n_ctx()) {
    st.stop_reason = "context";
    return std::nullopt;
  }
  return id;
}

}  // namespace les
