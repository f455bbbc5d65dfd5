// Whole quality measurements over a token stream: perplexity of one model, and KL divergence of
// a model against a base (a second model, or a llama.cpp log-probability file). What les
// perplexity runs and what a sensitivity-driven quantizer can call.
//
// Per-window work on the logits (log-softmax, KLD, packing) runs on the context's threads;
// results are accumulated in position order, so they do not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "les/model/model.h"
#include "les/quality/kld_summary.h"
#include "les/quality/logprob_file.h"
#include "les/quality/perplexity_stats.h"
#include "les/quality/token_compare.h"
#include "les/quality/window_eval.h"

namespace les::quality {

struct MeasureStatus {
  int windows_done = 0, windows_total = 0;
  double ppl = 0;        // of the measured (test) model so far
  double mean_kld = -1;  // so far; -1 without a base
};
using MeasureProgressFn = std::function<void(const MeasureStatus&)>;

struct PerplexityResult {
  WindowOptions windows;  // as used (n_ctx, first)
  int n_windows = 0;
  PerplexitySummary ppl;
};

// Perplexity of model on the windows of tokens (window_eval.h). With save, the log-probabilities
// of every scored position are also written to it (then opt.first must be logprob_first(n_ctx),
// and save's n_ctx, n_vocab and window count must match); save->finish() is left to the caller.
PerplexityResult measure_perplexity(const Model& model, std::span<const int32_t> tokens, const WindowOptions& opt,
                                    LogprobFileWriter* save = nullptr, const MeasureProgressFn& progress = {});

struct KldResult {
  WindowOptions windows;
  int n_windows = 0;
  PerplexitySummary test, base;
  double ln_ppl_ratio = 0, ln_ppl_ratio_se = 0;  // ln(PPL(test)/PPL(base)) = mean(nll_test - nll_base)
  KldSummary kld;
  std::vector<TokenCompare> per_token;  // window by window, (n_ctx - first) per window
};

// KL(base || test) per scored token with both models run on the same windows. Throws les::Error
// when their vocabularies differ (check_same_vocabulary).
KldResult measure_kld(const Model& base, const Model& test, std::span<const int32_t> tokens, const WindowOptions& opt,
                      const MeasureProgressFn& progress = {});

// The same against a log-probability file: its windows and tokens are used; opt.n_ctx and
// opt.first must equal base.window_options()'s, opt.max_windows may cap the window count.
// Throws les::Error when the model's vocabulary size differs from the file's.
KldResult measure_kld(const LogprobFile& base, const Model& test, const WindowOptions& opt,
                      const MeasureProgressFn& progress = {});

}  // namespace les::quality
