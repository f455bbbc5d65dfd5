#include "les/quality/perplexity_stats.h"

#include <algorithm>
#include <cmath>

namespace les::quality {

void MeanAccumulator::add(double x) {
  if (n_ == 0) shift_ = x;
  const double d = x - shift_;
  sum_ += d;
  sum2_ += d * d;
  ++n_;
}

double MeanAccumulator::mean() const { return n_ ? shift_ + sum_ / static_cast<double>(n_) : 0.0; }

double MeanAccumulator::se() const {
  if (n_ < 2) return 0.0;
  const double n = static_cast<double>(n_);
  const double mean_d = sum_ / n;
  const double var = std::max(0.0, (sum2_ - n * mean_d * mean_d) / (n - 1));
  return std::sqrt(var / n);
}

void PerplexityAccumulator::add(double nll, bool top1_correct) {
  nll_.add(nll);
  n_top1_ += top1_correct ? 1 : 0;
}

PerplexitySummary PerplexityAccumulator::summary() const {
  PerplexitySummary s;
  s.count = nll_.count();
  if (s.count == 0) return s;
  s.mean_nll = nll_.mean();
  s.mean_nll_se = nll_.se();
  s.ppl = std::exp(s.mean_nll);
  s.ppl_se = s.ppl * s.mean_nll_se;
  s.top1 = static_cast<double>(n_top1_) / static_cast<double>(s.count);
  return s;
}

}  // namespace les::quality
