// Sampler tests: greedy, determinism per seed, and that top-k / top-p / min-p / repetition
// penalty keep or exclude what llama.cpp's samplers do (statistically, many draws on a small
// vocabulary).
#include <cmath>
#include <map>
#include <vector>

#include <gtest/gtest.h>

#include "les/sample/sampler.h"

namespace {

using les::Sampler;
using les::SamplerParams;

SamplerParams plain(float temp = 1.0f) {
  SamplerParams p;
  p.temp = temp;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.repeat_penalty = 1.0f;
  return p;
}

// logits whose softmax is the given probabilities
std::vector<float> logits_for(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(p > 0 ? static_cast<float>(std::log(p)) : -INFINITY);
  return l;
}

std::map<int, int> histogram(Sampler& s, const std::vector<float>& logits, int draws) {
  std::map<int, int> h;
  for (int i = 0; i < draws; ++i) h[s.sample(logits.data(), static_cast<int>(logits.size()))]++;
  return h;
}

}  // namespace

TEST(Sampler, GreedyIsArgmaxLowestIdOnTies) {
  Sampler s(plain(0.0f));
  const std::vector<float> l = {0.1f, 2.0f, -1.0f, 2.0f, 1.9f};
  for (int i = 0; i < 10; ++i) EXPECT_EQ(s.sample(l.data(), 5), 1);
  const std::vector<float> neg = {-5.0f, -3.0f, -3.0f};
  EXPECT_EQ(s.sample(neg.data(), 3), 1);
  SamplerParams p = plain(-1.0f);
  Sampler s2(p);
  EXPECT_EQ(s2.sample(l.data(), 5), 1);
}

TEST(Sampler, SameSeedSameSequence) {
  const std::vector<float> l = logits_for({0.1, 0.2, 0.3, 0.15, 0.25});
  SamplerParams p = plain(1.0f);
  p.seed = 1234;
  Sampler a(p), b(p);
  std::vector<int> sa, sb;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(a.sample(l.data(), 5));
    sb.push_back(b.sample(l.data(), 5));
  }
  EXPECT_EQ(sa, sb);
  p.seed = 99;
  Sampler c(p);
  std::vector<int> sc;
  for (int i = 0; i < 200; ++i) sc.push_back(c.sample(l.data(), 5));
  EXPECT_NE(sa, sc);
  // reset() restarts the stream
  a.reset();
  std::vector<int> again;
  for (int i = 0; i < 200; ++i) again.push_back(a.sample(l.data(), 5));
  EXPECT_EQ(again, sa);
}

TEST(Sampler, PrngIsPinned) {
  // xoshiro256** seeded with splitmix64: the stream is part of the reproducibility contract
  les::Rng r(0);
  EXPECT_EQ(r.next(), 0x99ec5f36cb75f2b4ULL);
  EXPECT_EQ(r.next(), 0xbf6e1f784956452aULL);
  les::Rng r2(12345);
  EXPECT_EQ(r2.next(), 0xbe6a36374160d49bULL);
  for (int i = 0; i < 1000; ++i) {
    const double u = r.uniform();
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
  }
}

TEST(Sampler, TopK1EqualsGreedy) {
  SamplerParams p = plain(1.5f);
  p.top_k = 1;
  Sampler s(p);
  Sampler g(plain(0.0f));
  std::vector<float> l(50);
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 50; ++i) l[i] = static_cast<float>(std::sin(i * 1.7 + round));
    EXPECT_EQ(s.sample(l.data(), 50), g.sample(l.data(), 50));
  }
}

TEST(Sampler, TemperatureFollowsDistribution) {
  const std::vector<double> probs = {0.1, 0.6, 0.3};
  Sampler s(plain(1.0f));
  const int n = 20000;
  auto h = histogram(s, logits_for(probs), n);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(h[i] / double(n), probs[i], 0.02) << i;
  // a low temperature sharpens towards the argmax: p_i^(1/T) renormalised
  Sampler cold(plain(0.2f));
  auto hc = histogram(cold, logits_for(probs), n);
  const double w0 = std::pow(0.1, 5), w1 = std::pow(0.6, 5), w2 = std::pow(0.3, 5);
  EXPECT_NEAR(hc[1] / double(n), w1 / (w0 + w1 + w2), 0.01);
}

TEST(Sampler, TopKExcludesTheRest) {
  SamplerParams p = plain(1.0f);
  p.top_k = 2;
  Sampler s(p);
  auto h = histogram(s, logits_for({0.3, 0.25, 0.2, 0.15, 0.1}), 5000);
  EXPECT_EQ(h.count(2) + h.count(3) + h.count(4), 0u);
  EXPECT_GT(h[0], 0);
  EXPECT_GT(h[1], 0);
}

TEST(Sampler, TopPExcludesTheTail) {
  // sorted probs 0.5 0.3 0.15 0.05: cumulative 0.5 0.8 0.95 1.0; top_p 0.75 keeps {0, 1}
  SamplerParams p = plain(1.0f);
  p.top_p = 0.75f;
  Sampler s(p);
  auto h = histogram(s, logits_for({0.5, 0.3, 0.15, 0.05}), 5000);
  EXPECT_EQ(h.count(2) + h.count(3), 0u);
  EXPECT_NEAR(h[0] / 5000.0, 0.5 / 0.8, 0.03);
  // top_p 0.9 keeps three
  p.top_p = 0.9f;
  Sampler s2(p);
  auto h2 = histogram(s2, logits_for({0.5, 0.3, 0.15, 0.05}), 5000);
  EXPECT_EQ(h2.count(3), 0u);
  EXPECT_GT(h2[2], 0);
}

TEST(Sampler, MinPExcludesUnlikelyTokens) {
  // p_max = 0.4; min_p 0.3 keeps p >= 0.12: {0.4, 0.3, 0.2} but not {0.06, 0.04}
  SamplerParams p = plain(1.0f);
  p.min_p = 0.3f;
  Sampler s(p);
  auto h = histogram(s, logits_for({0.06, 0.4, 0.3, 0.04, 0.2}), 5000);
  EXPECT_EQ(h.count(0) + h.count(3), 0u);
  EXPECT_GT(h[1], 0);
  EXPECT_GT(h[2], 0);
  EXPECT_GT(h[4], 0);
}

TEST(Sampler, DefaultParamsRunAndStayInTopK) {
  Sampler s;  // temp 0.8, top_k 40, top_p 0.95, min_p 0.05
  std::vector<float> l(1000);
  for (int i = 0; i < 1000; ++i) l[i] = static_cast<float>(i % 97) * 0.05f;
  for (int i = 0; i < 200; ++i) {
    const int t = s.sample(l.data(), 1000);
    ASSERT_GE(t, 0);
    ASSERT_LT(t, 1000);
    EXPECT_GE(l[t], l[96] - 0.5f);  // only the highest logits survive
  }
}

TEST(Sampler, RepetitionPenalty) {
  // greedy: token 0 wins until it is penalised
  SamplerParams p = plain(0.0f);
  p.repeat_penalty = 1.5f;
  p.repeat_last_n = 4;
  Sampler s(p);
  const std::vector<float> l = {3.0f, 2.5f, 1.0f};
  EXPECT_EQ(s.sample(l.data(), 3), 0);
  s.accept(0);  // 3.0 / 1.5 = 2.0 < 2.5
  EXPECT_EQ(s.sample(l.data(), 3), 1);
  // negative logits are multiplied (pushed further down)
  const std::vector<float> neg = {-1.0f, -1.2f};
  Sampler s2(p);
  s2.accept(0);  // -1.0 * 1.5 = -1.5 < -1.2
  EXPECT_EQ(s2.sample(neg.data(), 2), 1);
  // the window forgets old tokens
  for (int t : {2, 2, 2, 2}) s.accept(t);
  EXPECT_EQ(s.sample(l.data(), 3), 0);
  // repeat_last_n = 0 disables it
  p.repeat_last_n = 0;
  Sampler s3(p);
  s3.accept(0);
  EXPECT_EQ(s3.sample(l.data(), 3), 0);
  // and sampling with temperature sees the penalised distribution
  SamplerParams q = plain(1.0f);
  q.repeat_penalty = 4.0f;
  Sampler s4(q);
  s4.accept(1);
  auto h = histogram(s4, logits_for({0.5, 0.5}), 4000);  // logit(1) = log .5 * 4
  EXPECT_GT(h[0], 3000);
}
