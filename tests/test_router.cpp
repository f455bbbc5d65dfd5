// Expert routing (router.h): llama.cpp's build_moe_ffn selection for every gating function, the
// selection bias, grouped top-k and the predictors' selection scores, on random logits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "les/model/router.h"

using namespace les;

namespace {

std::vector<float> random_logits(std::mt19937& rng, int n, float sd) {
  std::normal_distribution<float> d(0.0f, sd);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

// The k largest of score (ties: lower id), descending: the plain reference selection.
std::vector<int32_t> top_k(const std::vector<float>& score, int k) {
  std::vector<int32_t> idx(score.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]; });
  idx.resize(static_cast<size_t>(k));
  return idx;
}

}  // namespace

TEST(Router, SoftmaxTopKMatchesReferenceAndNormalises) {
  std::mt19937 rng(1);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 4 + trial % 60, k = 1 + trial % std::min(n, 8);
    std::vector<float> lg = random_logits(rng, n, 2.0f);
    std::vector<float> p = lg;
    const float mx = *std::max_element(p.begin(), p.end());
    double sum = 0;
    for (float& x : p) { x = std::exp(x - mx); sum += x; }
    for (float& x : p) x = static_cast<float>(x / sum);
    RouterParams rp{n, k, true, 1.0f};
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> w(static_cast<size_t>(k));
    route_topk(rp, lg.data(), nullptr, ids.data(), w.data());
    EXPECT_EQ(ids, top_k(p, k));
    double ws = 0;
    for (float x : w) ws += x;
    EXPECT_NEAR(ws, 1.0, 1e-5);
    for (int j = 1; j < k; ++j) EXPECT_GE(w[static_cast<size_t>(j - 1)], w[static_cast<size_t>(j)]);
  }
}

TEST(Router, SigmoidSelectsByBiasedScoreButWeighsUnbiased) {
  std::mt19937 rng(2);
  for (int trial = 0; trial < 200; ++trial) {
    const int n = 16, k = 4;
    std::vector<float> lg = random_logits(rng, n, 1.5f);
    const std::vector<float> bias = random_logits(rng, n, 0.5f);
    std::vector<float> sig(static_cast<size_t>(n)), sel(static_cast<size_t>(n));
    for (int e = 0; e < n; ++e) {
      sig[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-lg[static_cast<size_t>(e)]));
      sel[static_cast<size_t>(e)] = sig[static_cast<size_t>(e)] + bias[static_cast<size_t>(e)];
    }
    RouterParams rp{n, k, false, 2.5f, Gating::sigmoid};
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> w(static_cast<size_t>(k));
    route_topk(rp, lg.data(), bias.data(), ids.data(), w.data());
    const std::vector<int32_t> want = top_k(sel, k);
    ASSERT_EQ(ids, want);
    for (int j = 0; j < k; ++j) EXPECT_FLOAT_EQ(w[static_cast<size_t>(j)], sig[static_cast<size_t>(want[static_cast<size_t>(j)])] * 2.5f);
  }
}

TEST(Router, GroupedTopKOnlyPicksFromTheBestGroups) {
  std::mt19937 rng(3);
  const int n = 32, groups = 8, used = 3, k = 6, per = n / groups;
  int picked_outside_plain_top = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::vector<float> lg = random_logits(rng, n, 2.0f);
    const std::vector<float> bias = random_logits(rng, n, 0.3f);
    std::vector<float> sel(static_cast<size_t>(n));
    for (int e = 0; e < n; ++e) sel[static_cast<size_t>(e)] = 1.0f / (1.0f + std::exp(-lg[static_cast<size_t>(e)])) + bias[static_cast<size_t>(e)];
    // Group score: the sum of its two best selection scores.
    std::vector<float> gs(static_cast<size_t>(groups));
    for (int g = 0; g < groups; ++g) {
      std::vector<float> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      gs[static_cast<size_t>(g)] = v[0] + v[1];
    }
    const std::vector<int32_t> keep = top_k(gs, used);
    std::vector<float> masked = sel;
    for (int e = 0; e < n; ++e) {
      if (std::find(keep.begin(), keep.end(), e / per) == keep.end()) masked[static_cast<size_t>(e)] = -INFINITY;
    }
    RouterParams rp{n, k, true, 1.0f, Gating::sigmoid, groups, used};
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> w(static_cast<size_t>(k));
    route_topk(rp, lg.data(), bias.data(), ids.data(), w.data());
    ASSERT_EQ(ids, top_k(masked, k));
    if (ids != top_k(sel, k)) ++picked_outside_plain_top;
    double ws = 0;
    for (float x : w) ws += x;
    EXPECT_NEAR(ws, 1.0, 1e-5);
  }
  EXPECT_GT(picked_outside_plain_top, 30);  // the groups really changed the choice
}

TEST(Router, SelectionScoresRankLikeTheRouter) {
  std::mt19937 rng(4);
  const int n = 24, k = 5;
  std::vector<float> bias = random_logits(rng, n, 0.4f);
  std::vector<float> rbias = random_logits(rng, n, 0.8f);
  LayerWeights L;
  L.exp_probs_b = Vec{bias.data(), n};
  L.router_bias = Vec{rbias.data(), n};
  for (Gating g : {Gating::softmax, Gating::sigmoid, Gating::softmax_weight}) {
    for (int groups : {1, 4}) {
      RouterParams rp{n, k, true, 1.0f, g, groups, groups > 1 ? 2 : 1};
      for (int trial = 0; trial < 100; ++trial) {
        std::vector<float> lg = random_logits(rng, n, 2.0f);
        std::vector<float> a = lg, b = lg;
        std::vector<int32_t> ids(static_cast<size_t>(k));
        std::vector<float> w(static_cast<size_t>(k));
        route_layer(rp, L, a.data(), 1, ids.data(), w.data());
        selection_scores(rp, L, b.data());
        EXPECT_EQ(ids, top_k(b, k)) << "gating " << static_cast<int>(g) << " groups " << groups;
      }
    }
  }
}

TEST(Router, SoftmaxWeightNormalisesOverTheSelected) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    const int n = 32, k = 4;
    std::vector<float> lg = random_logits(rng, n, 3.0f);
    const std::vector<int32_t> want = top_k(lg, k);
    std::vector<float> expect(static_cast<size_t>(k));
    double sum = 0;
    for (int j = 0; j < k; ++j) {
      expect[static_cast<size_t>(j)] = std::exp(lg[static_cast<size_t>(want[static_cast<size_t>(j)])] - lg[static_cast<size_t>(want[0])]);
      sum += expect[static_cast<size_t>(j)];
    }
    RouterParams rp{n, k, false, 1.0f, Gating::softmax_weight};
    std::vector<int32_t> ids(static_cast<size_t>(k));
    std::vector<float> w(static_cast<size_t>(k));
    route_topk(rp, lg.data(), nullptr, ids.data(), w.data());
    ASSERT_EQ(ids, want);
    for (int j = 0; j < k; ++j) EXPECT_NEAR(w[static_cast<size_t>(j)], expect[static_cast<size_t>(j)] / sum, 1e-6);
  }
}
