// Summary statistics of per-token KL divergences and top-1 agreement (llama.cpp's
// "KL divergence statistics" and "Same top p").
#pragma once

#include <cstddef>
#include <span>

#include "les/quality/token_compare.h"

namespace les::quality {

struct KldSummary {
  size_t count = 0;
  double mean = 0;
  double mean_se = 0;      // standard error of the mean: sample standard deviation / sqrt(count)
  double min = 0, median = 0, p90 = 0, p95 = 0, p99 = 0, p999 = 0, max = 0;
  double same_top1 = 0;    // fraction of tokens whose two argmaxes agree
  double same_top1_se = 0; // sqrt(f (1 - f) / (count - 1))
};

// Linear-interpolation percentile of sorted values: fraction q in [0, 1] sits at index
// q * (n - 1) (numpy's default; llama.cpp's KLD percentiles). sorted must be non-empty.
double percentile_sorted(std::span<const double> sorted, double q);

// Summary of kld values (any order) of which n_same_top1 had matching argmaxes. Empty input gives
// a zero summary; mean_se and same_top1_se are 0 below 2 values.
KldSummary summarize_kld(std::span<const double> kld, size_t n_same_top1);
KldSummary summarize_kld(std::span<const TokenCompare> tokens);

}  // namespace les::quality
