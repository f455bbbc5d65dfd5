// Speculative generation: each round the drafter proposes k tokens (k from the depth controller),
// the target evaluates [last committed token, drafts...] in one batch, keeps the longest prefix
// the acceptance rule accepts plus one token of its own, and rolls the rest back. Logits of a
// batch position are bit-identical to a single-token step's (Context's batching guarantee), so
// at temperature 0 the committed tokens and the final logits equal plain decoding's.
#include <algorithm>

#include "les/session/generate_internal.h"
#include "les/spec/accept.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les {

GenerateStats generate_speculative(Context& ctx, const Tokenizer& tok, const std::vector<int32_t>& prompt,
                                   const GenerateParams& p, const TokenCallback& on_token) {
  GenerateStats st;
  Drafter& drafter = *p.drafter;
  const int n_vocab = ctx.model().config().n_vocab;
  DepthController own_depth(p.depth);
  DepthController& depth = p.depth_state ? *p.depth_state : own_depth;
  const int k_max = depth.params().k_max;
  SpecStats& ss = st.spec;
  ss.drafted_at.assign(static_cast<size_t>(k_max), 0);
  ss.accepted_at.assign(static_cast<size_t>(k_max), 0);
  ss.chosen_k.assign(static_cast<size_t>(k_max) + 1, 0);

  Sampler sampler(p.sampling);
  // The penalty window sees the whole text: what the context already holds, then the prompt.
  for (int32_t t : ctx.tokens()) {
    if (t >= 0) sampler.accept(t);  // not the visual tokens of an image (Context::kEmbeddingRow)
  }
  for (int32_t t : prompt) sampler.accept(t);
  // A drafter released by an earlier request (the controller outlived it) is not used again.
  if (!drafter.released()) drafter.attach(ctx);
  depth.set_memory_cost(drafter.released() ? 0.0 : p.drafter_cache_share);

  double t0 = now_s();
  const int pos_prompt = ctx.n_past();
  ctx.eval(prompt, false);
  st.prompt_seconds = now_s() - t0;
  st.n_prompt = static_cast<int>(prompt.size());
  check_finite(ctx.last_logits(), n_vocab, ctx.n_past());
  st.stop_reason = "length";

  std::vector<int32_t> history(prompt);
  std::vector<TokenProb> dist;
  static const std::vector<TokenProb> kPointMass;
  // Commits one token; false when generation ends with it.
  auto commit = [&](int32_t id) {
    sampler.accept(id);
    history.push_back(id);
    ++st.n_generated;
    const bool eog = tok.is_eog(id);
    if (on_token && !on_token(id, eog ? std::string() : tok.token_to_piece(id, false))) {
      st.stop_reason = "callback";
      return false;
    }
    if (eog && p.stop_at_eog) {
      st.stop_reason = "eog";
      return false;
    }
    return !(p.n_predict >= 0 && st.n_generated >= p.n_predict);
  };

  t0 = now_s();
  sampler.distribution(ctx.last_logits(), n_vocab, dist);
  // The logits the last committed token was drawn from; they stay valid until the next eval
  // (rollback replays produce no outputs), so they are hashed once, at the end.
  const float* final_logits = ctx.last_logits();
  bool go = commit(sampler.draw(dist));
  if (go && !drafter.released()) {
    drafter.on_target_eval(pos_prompt, static_cast<int>(prompt.size()), ctx.n_past(),
                           std::span<const int32_t>(history).subspan(1));
  }
  Draft d;
  std::vector<int32_t> batch;
  while (go) {
    if (ctx.n_past() >= ctx.n_ctx()) {
      st.stop_reason = "context";
      break;
    }
    int k = drafter.released() ? 0 : depth.choose();
    if (depth.gave_up() && !drafter.released()) {
      ss.released_at = st.n_generated;
      ss.released_bytes = drafter.release();
      if (p.on_drafter_released) p.on_drafter_released(ss.released_bytes);
      depth.set_memory_cost(0);
    }
    k = std::min(k, ctx.n_ctx() - ctx.n_past() - 1);            // the batch must fit the context
    if (p.n_predict >= 0) k = std::min(k, p.n_predict - st.n_generated - 1);  // never past -n
    k = std::max(k, 0);
    ss.chosen_k[static_cast<size_t>(k)]++;

    d.clear();
    double td = 0;
    if (k > 0) {
      const double a = now_s();
      drafter.draft(history, k, d);
      td = now_s() - a;
      depth.record_draft(k, td);
      if (static_cast<int>(d.tokens.size()) > k) d.tokens.resize(static_cast<size_t>(k));
      for (int32_t t : d.tokens) {
        if (t < 0 || t >= n_vocab) throw Error(strfmt("drafter %s proposed token %d outside the vocabulary (%d)",
                                                      drafter.name().c_str(), t, n_vocab));
      }
      size_t keep = d.tokens.size();
      if (!d.confidence.empty()) {
        if (p.draft_p_min > 0) {
          for (size_t i = 0; i < keep && i < d.confidence.size(); ++i) {
            if (d.confidence[i] < p.draft_p_min) keep = i;
          }
        }
        keep = std::min<size_t>(keep, static_cast<size_t>(depth.trim(static_cast<int>(keep), td, d.confidence)));
      }
      if (static_cast<int>(keep) < depth.params().k_min) keep = 0;  // --draft-min
      d.tokens.resize(keep);
      if (d.probs.size() > keep) d.probs.resize(keep);
    }
    const int nd = static_cast<int>(d.tokens.size());

    batch.assign(1, history.back());
    batch.insert(batch.end(), d.tokens.begin(), d.tokens.end());
    const int pos0 = ctx.n_past();
    const double a = now_s();
    const uint64_t bytes0 = ctx.experts().bytes_read();
    const int committed0 = st.n_generated;
    ctx.eval(batch, true);
    ++st.n_decode_evals;
    int acc = 0;
    for (int i = 0; i <= nd; ++i) {
      const float* lg = ctx.logits(i);
      check_finite(lg, n_vocab, pos0 + i + 1);
      sampler.distribution(lg, n_vocab, dist);
      final_logits = lg;
      if (i < nd) {
        const auto& q = static_cast<size_t>(i) < d.probs.size() ? d.probs[static_cast<size_t>(i)] : kPointMass;
        const AcceptResult r = accept_or_resample(dist, d.tokens[static_cast<size_t>(i)], q, sampler.rng());
        if (r.accepted) ++acc;
        go = commit(r.token);
        if (!r.accepted || !go) break;
      } else {
        go = commit(sampler.draw(dist));
      }
    }
    // The context keeps every committed token but the last (which the next round evaluates).
    const int n_keep = pos_prompt + static_cast<int>(history.size()) - 1;
    if (n_keep < ctx.n_past()) ctx.rollback(n_keep);
    if (go && !drafter.released()) {
      drafter.on_target_eval(pos0, static_cast<int>(batch.size()), n_keep,
                             std::span<const int32_t>(history).subspan(static_cast<size_t>(pos0 - pos_prompt + 1)));
    }
    const double tv = now_s() - a;
    depth.record_verify(static_cast<int>(batch.size()), tv);
    depth.record_round(nd, acc);

    const uint64_t round_bytes = ctx.experts().bytes_read() - bytes0;
    (nd > 0 ? ss.spec_bytes : ss.plain_bytes) += round_bytes;
    (nd > 0 ? ss.spec_tokens : ss.plain_tokens) += st.n_generated - committed0;
    ++ss.rounds;
    ss.drafted += nd;
    ss.accepted += acc;
    for (int i = 0; i < nd; ++i) ss.drafted_at[static_cast<size_t>(i)]++;
    for (int i = 0; i < acc; ++i) ss.accepted_at[static_cast<size_t>(i)]++;
    ss.draft_seconds += td;
    ss.verify_seconds += tv;
  }
  st.gen_seconds = now_s() - t0;
  st.final_logits_hash = hash64(final_logits, sizeof(float) * static_cast<size_t>(n_vocab));
  return st;
}

}  // namespace les
