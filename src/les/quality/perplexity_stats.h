// Running perplexity statistics over scored tokens: mean NLL with its standard error, perplexity
// exp(mean NLL) with its standard error (ppl * se(mean NLL), as llama.cpp reports it), top-1
// accuracy.
#pragma once

#include <cstddef>

namespace les::quality {

// Mean of a stream of values with the standard error of the mean (sample sd / sqrt(n)).
class MeanAccumulator {
 public:
  void add(double x);
  size_t count() const { return n_; }
  double mean() const;
  double se() const;  // 0 below 2 values

 private:
  size_t n_ = 0;
  // Sums of (x - shift) and its square, shift = the first value: keeps the variance accurate.
  double shift_ = 0, sum_ = 0, sum2_ = 0;
};

struct PerplexitySummary {
  size_t count = 0;         // scored tokens
  double mean_nll = 0;      // nats per token
  double mean_nll_se = 0;   // standard error of mean_nll (0 below 2 tokens)
  double ppl = 0;           // exp(mean_nll)
  double ppl_se = 0;        // ppl * mean_nll_se
  double top1 = 0;          // fraction of tokens that are the argmax of their prediction
};

class PerplexityAccumulator {
 public:
  void add(double nll, bool top1_correct);
  PerplexitySummary summary() const;
  size_t count() const { return nll_.count(); }

 private:
  MeanAccumulator nll_;
  size_t n_top1_ = 0;
};

}  // namespace les::quality
