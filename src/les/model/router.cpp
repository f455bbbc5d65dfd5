#include "les/model/router.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "les/model/ops.h"

namespace les {

RouterParams router_params(const ModelConfig& c) {
  RouterParams p;
  p.n_expert = c.n_expert;
  p.k = c.n_expert_used;
  p.norm_topk = c.norm_topk;
  p.scale = c.expert_weights_scale;
  p.gating = c.gating;
  p.n_groups = c.n_expert_groups;
  p.n_group_used = c.n_group_used;
  return p;
}

namespace {

// Index of the largest value among v[0..n) not yet in taken[0..n_taken) (ties: lower index).
int best_untaken(const float* v, int n, const int32_t* taken, int n_taken) {
  int best = -1;
  for (int e = 0; e < n; ++e) {
    bool t = false;
    for (int i = 0; i < n_taken; ++i) t |= taken[i] == e;
    if (t) continue;
    if (best < 0 || v[e] > v[best]) best = e;
  }
  return best;
}

// Gates logits in place (the weights' source) and writes the selection scores to sel.
void route_scores(const RouterParams& p, float* logits, const float* sel_bias, float* sel) {
  const int n = p.n_expert;
  switch (p.gating) {
    case Gating::softmax: ops::softmax(logits, n); break;
    case Gating::sigmoid:
      for (int e = 0; e < n; ++e) logits[e] = 1.0f / (1.0f + std::exp(-logits[e]));
      break;
    case Gating::softmax_weight: break;
  }
  for (int e = 0; e < n; ++e) sel[e] = sel_bias ? logits[e] + sel_bias[e] : logits[e];
  if (p.n_groups > 1) {
    // Score of a group: its two best selection scores summed; groups outside the top n_group_used
    // are masked with -inf.
    const int per = n / p.n_groups;
    std::vector<float> score(static_cast<size_t>(p.n_groups));
    for (int g = 0; g < p.n_groups; ++g) {
      const float* v = sel + static_cast<size_t>(g) * static_cast<size_t>(per);
      int32_t top[2];
      top[0] = best_untaken(v, per, top, 0);
      top[1] = best_untaken(v, per, top, 1);
      score[static_cast<size_t>(g)] = v[top[0]] + v[top[1]];
    }
    std::vector<int32_t> keep(static_cast<size_t>(p.n_group_used));
    for (int j = 0; j < p.n_group_used; ++j) keep[static_cast<size_t>(j)] = best_untaken(score.data(), p.n_groups, keep.data(), j);
    for (int g = 0; g < p.n_groups; ++g) {
      if (std::find(keep.begin(), keep.end(), g) != keep.end()) continue;
      std::fill(sel + static_cast<ptrdiff_t>(g) * per, sel + static_cast<ptrdiff_t>(g + 1) * per, -INFINITY);
    }
  }
}

}  // namespace

void route_topk(const RouterParams& p, float* logits, const float* sel_bias, int32_t* ids, float* weights) {
  const int n = p.n_expert;
  thread_local std::vector<float> selv;  // per-row scratch: no allocation per routed token
  selv.resize(static_cast<size_t>(n));
  route_scores(p, logits, sel_bias, selv.data());
  const float* sel = selv.data();
  for (int j = 0; j < p.k; ++j) {
    ids[j] = best_untaken(sel, n, ids, j);
    weights[j] = logits[ids[j]];
  }
  if (p.gating == Gating::softmax_weight) ops::softmax(weights, p.k);
  if (p.norm_topk) {
    double sum = 0.0;
    for (int j = 0; j < p.k; ++j) sum += static_cast<double>(weights[j]);
    const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int j = 0; j < p.k; ++j) weights[j] /= s;
  }
  if (p.scale != 1.0f) {
    for (int j = 0; j < p.k; ++j) weights[j] *= p.scale;
  }
}

void route_layer(const RouterParams& p, const LayerWeights& L, float* logits, int64_t n_tok, int32_t* ids,
                 float* weights) {
  const size_t ne = static_cast<size_t>(p.n_expert), k = static_cast<size_t>(p.k);
  for (int64_t t = 0; t < n_tok; ++t) {
    float* lg = logits + static_cast<size_t>(t) * ne;
    if (L.router_bias.present()) {
      for (size_t e = 0; e < ne; ++e) lg[e] = lg[e] + L.router_bias.data[e];
    }
    route_topk(p, lg, L.exp_probs_b.data, ids + static_cast<size_t>(t) * k, weights + static_cast<size_t>(t) * k);
  }
}

void selection_scores(const RouterParams& p, const LayerWeights& L, float* logits) {
  if (L.router_bias.present()) {
    for (int e = 0; e < p.n_expert; ++e) logits[e] = logits[e] + L.router_bias.data[e];
  }
  thread_local std::vector<float> sel;
  sel.resize(static_cast<size_t>(p.n_expert));
  route_scores(p, logits, L.exp_probs_b.data, sel.data());
  std::copy(sel.begin(), sel.end(), logits);
}

void route_softmax_topk(const RouterParams& p, float* logits, int32_t* ids, float* weights) {
  RouterParams q = p;
  q.gating = Gating::softmax;
  q.n_groups = 1;
  route_topk(q, logits, nullptr, ids, weights);
}

}  // namespace les
