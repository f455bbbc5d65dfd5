// The predictor: guesses of which experts a layer will select, made before its router runs.
//
// Owns: the early guess (layer l+1's router on layer l's router input, top k+m), the refined
//   guess (layer l+1's norm and router on layer l's output, top k), the two-ahead guess (layer
//   l+2's router on layer l's router input), oracle replay of a recorded routing, and the
//   per-layer Prediction / ahead2_* state they fill.
// Promises: submits no reads except the refined guess's prefetches (issued at once, after
//   cancelling, with refine_cancel, the unstarted reads of early and two-ahead guesses that it
//   drops); guesses never change results, only which bytes are read early. Batches of more than
//   8 tokens are not predicted.
// Relies on: the model's router and ffn_norm weights being resident; the I/O queue
//   (streaming_io.cpp) to issue the early guesses behind the next layer's demand reads; the
//   executor (streaming_executor.cpp) to consume and settle each layer's guesses.
#include <algorithm>
#include <cmath>

#include "les/model/matmul.h"
#include "les/model/ops.h"
#include "les/model/router.h"
#include "les/sched/streaming_experts.h"

namespace les {

void StreamingExperts::on_router_input(int layer, const float* x_norm, int64_t n_tok) {
  if (layer == 0) {
    stats_.tokens += static_cast<uint64_t>(n_tok);
    pass_tokens_ = n_tok;
    ++oracle_step_;
  }
  drain(false, 0);
  if (oracle_replay()) {
    if (opt_.schedule == Schedule::lookahead && n_tok <= 8) oracle_predict(layer);
  } else {
    // A dense lead layer's router input predicts the first routed layer (its successor) as any
    // layer's does; targets without experts (the lead layers themselves) are not predicted.
    if (opt_.schedule == Schedule::lookahead && layer + 1 < cfg_.n_layer && n_tok <= 8) {
      if (cfg_.has_experts(layer + 1)) predict_next(layer, x_norm, n_tok);
      // Two layers ahead: measured (statistics) only; see docs/benchmarks.md for why it is not used.
      if (layer + 2 < cfg_.n_layer && cfg_.has_experts(layer + 2) && (opt_.measure_ahead2 || opt_.prefetch_ahead2)) {
        const size_t l2 = static_cast<size_t>(layer + 2);
        std::vector<int> order;
        router_ranks(layer + 2, x_norm, n_tok, cfg_.n_expert_used, cfg_.n_expert_used, ahead2_[l2], order);
        ahead2_valid_[l2] = 1;
        ahead2_keys_[l2].clear();
        for (int e : order) ahead2_keys_[l2].push_back(cache::make_key(layer + 2, e));
      }
    }
  }
  // A dense lead layer reads no experts, so no demand reads will carry its lookahead prefetches
  // (with_experts issues them behind a layer's reads): issue the guesses for the next layers now.
  if (opt_.schedule == Schedule::lookahead && n_tok <= 8 && !cfg_.has_experts(layer)) {
    begin_batch();
    issue_lookahead_prefetches(layer);
    flush_batch();
  }
}

void StreamingExperts::predict_next(int layer, const float* x_norm, int64_t n_tok) {
  const int next = layer + 1;
  const int K = cfg_.n_expert_used;
  const int KM = std::min(cfg_.n_expert, K + std::max(0, opt_.predict_extra));
  Prediction& pd = pred_[static_cast<size_t>(next)];
  std::vector<int> order;
  router_ranks(next, x_norm, n_tok, K, KM, pd.rank, order);
  pd.keys.clear();
  for (int e : order) pd.keys.push_back(cache::make_key(next, e));
  pd.valid = true;

  pd.issued = false;
}

void StreamingExperts::oracle_predict(int layer) {
  const int L = cfg_.n_layer;
  const int depth = std::clamp(opt_.oracle_depth, 1, L - 1);
  for (int d = 1; d <= depth; ++d) {
    const int target = (layer + d) % L;
    const std::vector<int32_t>* ids = opt_.oracle->lookup(oracle_step_ + (layer + d) / L, target);
    if (ids == nullptr) continue;
    const size_t t = static_cast<size_t>(target);
    std::vector<uint8_t>& rank = d == 1 ? pred_[t].rank : ahead2_[t];
    std::vector<cache::ExpertKey>& keys = d == 1 ? pred_[t].keys : ahead2_keys_[t];
    std::fill(rank.begin(), rank.end(), 0);
    keys.clear();
    for (int32_t e : *ids) {
      rank[static_cast<size_t>(e)] = 1;
      keys.push_back(cache::make_key(target, e));
    }
    if (d == 1) {
      pred_[t].valid = true;
      pred_[t].issued = false;
    } else {
      ahead2_valid_[t] = 1;
    }
  }
}

void StreamingExperts::on_layer_output(int layer, const float* h, int64_t n_tok) {
  const int next = layer + 1;
  if (opt_.schedule != Schedule::lookahead || !opt_.refine || next >= cfg_.n_layer || n_tok > 8 || oracle_replay()) return;
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(next)];
  if (!L.router.present() || L.ffn_norm.data == nullptr) return;
  drain(false, 0);
  const int64_t E = cfg_.n_embd;
  refine_x_.resize(static_cast<size_t>(n_tok * E));
  for (int64_t t = 0; t < n_tok; ++t) {
    ops::rms_norm(h + t * E, L.ffn_norm.data, refine_x_.data() + t * E, E, cfg_.rms_eps);
  }
  Prediction& pd = pred_[static_cast<size_t>(next)];
  std::vector<int> order;
  router_ranks(next, refine_x_.data(), n_tok, cfg_.n_expert_used, cfg_.n_expert_used, pd.refined, order);
  pd.has_refined = true;
  if (!pd.valid) {
    pd.valid = true;
    pd.issued = true;
    pd.keys.clear();
    std::fill(pd.rank.begin(), pd.rank.end(), 0);
  }
  LayerStreamStats& ls = stats_.layers[static_cast<size_t>(next)];
  if (opt_.refine_cancel) {
    for (const auto* keys : {&pd.keys, &ahead2_issued_[static_cast<size_t>(next)]}) {
      for (cache::ExpertKey key : *keys) {
        if (pd.refined[static_cast<size_t>(cache::key_expert(key))]) continue;
        const int si = slot_of(key);
        if (si >= 0 && cancel_prefetch(si)) ++ls.prefetch_cancelled;
      }
    }
  }
  begin_batch();
  for (int e : order) {
    if (pd.rank[static_cast<size_t>(e)] != 0) continue;  // the early guess has it already
    const cache::ExpertKey key = cache::make_key(next, e);
    pd.keys.push_back(key);
    if (!prefetch_one(key, next, kGuessRefined)) break;
  }
  flush_batch();
}

void StreamingExperts::router_ranks(int layer, const float* x, int64_t n_tok, int k, int km,
                                    std::vector<uint8_t>& rank, std::vector<int>& order) {
  const int E = cfg_.n_expert;
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(layer)];
  pred_logits_.resize(static_cast<size_t>(E) * static_cast<size_t>(n_tok));
  matmul(L.router, x, n_tok, cfg_.n_embd, pred_logits_.data(), E, pred_pool_, pred_acts_);
  // Rank by what the router selects by (sigmoid + selection bias, eligible groups, router bias);
  // plain softmax routing keeps the logits' order.
  if (cfg_.gating != Gating::softmax || cfg_.n_expert_groups > 1 || L.exp_probs_b.present() || L.router_bias.present()) {
    const RouterParams rp = router_params(cfg_);
    for (int64_t t = 0; t < n_tok; ++t) selection_scores(rp, L, pred_logits_.data() + static_cast<size_t>(t) * static_cast<size_t>(E));
  }
  rank.assign(static_cast<size_t>(E), 0);
  std::vector<float> best(static_cast<size_t>(E), -INFINITY);  // best logit of each expert over tokens
  std::vector<int> idx(static_cast<size_t>(E));
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* lg = pred_logits_.data() + static_cast<size_t>(t) * static_cast<size_t>(E);
    for (int e = 0; e < E; ++e) idx[static_cast<size_t>(e)] = e;
    std::partial_sort(idx.begin(), idx.begin() + km, idx.end(),
                      [&](int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
    for (int r = 0; r < km; ++r) {
      const size_t e = static_cast<size_t>(idx[static_cast<size_t>(r)]);
      if (lg[e] == -INFINITY) break;  // outside the eligible expert groups
      const uint8_t rk = r < k ? 1 : 2;
      if (rank[e] == 0 || rk < rank[e]) rank[e] = rk;
      best[e] = std::max(best[e], lg[e]);
    }
  }
  order.clear();
  for (int e = 0; e < E; ++e) if (rank[static_cast<size_t>(e)]) order.push_back(e);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const size_t ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    return rank[ua] != rank[ub] ? rank[ua] < rank[ub] : best[ua] > best[ub];
  });
}

}  // namespace les
