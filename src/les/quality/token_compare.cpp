#include "les/quality/token_compare.h"

#include <cmath>
#include <algorithm>

#include "les/util/error.h"

namespace les::quality {

namespace {

// log sum_i exp(x_i) with max subtraction; also returns the max.
double log_sum_exp(const float* x, int n, double* max_out) {
  double mx = x[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(static_cast<double>(x[i]) - mx);
  *max_out = mx;
  return mx + std::log(s);
}

}  // namespace

int argmax(const float* logits, int n_vocab) {
  LES_ASSERT(n_vocab > 0);
  int best = 0;
  for (int i = 1; i < n_vocab; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return best;
}

double token_nll(const float* logits, int n_vocab, int32_t token) {
  LES_ASSERT(n_vocab > 0 && token >= 0 && token < n_vocab);
  double mx = 0;
  const double lse = log_sum_exp(logits, n_vocab, &mx);
  return lse - static_cast<double>(logits[token]);
}

TokenCompare compare_logits(const float* base_logits, const float* test_logits, int n_vocab, int32_t next_token) {
  LES_ASSERT(n_vocab > 0 && next_token >= 0 && next_token < n_vocab);
  double mb = 0, mt = 0;
  const double lse_b = log_sum_exp(base_logits, n_vocab, &mb);
  const double lse_t = log_sum_exp(test_logits, n_vocab, &mt);
  double kld = 0;
  for (int i = 0; i < n_vocab; ++i) {
    const double lb = static_cast<double>(base_logits[i]) - lse_b;
    const double lt = static_cast<double>(test_logits[i]) - lse_t;
    kld += std::exp(lb) * (lb - lt);
  }
  TokenCompare r;
  r.kld = kld;
  r.same_top1 = argmax(base_logits, n_vocab) == argmax(test_logits, n_vocab);
  r.nll_test = lse_t - static_cast<double>(test_logits[next_token]);
  r.nll_base = lse_b - static_cast<double>(base_logits[next_token]);
  return r;
}

}  // namespace les::quality
