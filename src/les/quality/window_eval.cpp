#include "les/quality/window_eval.h"

#include <algorithm>

#include "les/model/context.h"
#include "les/util/error.h"

namespace les::quality {

int count_windows(size_t n_tokens, const WindowOptions& opt) {
  if (opt.n_ctx < 1) return 0;
  const size_t n = n_tokens / static_cast<size_t>(opt.n_ctx);
  const size_t cap = opt.max_windows > 0 ? static_cast<size_t>(opt.max_windows) : n;
  return static_cast<int>(std::min<size_t>({n, cap, static_cast<size_t>(INT32_MAX)}));
}

void check_window_options(size_t n_tokens, const WindowOptions& opt) {
  if (opt.n_ctx < 2) throw Error(strfmt("window size (n_ctx) must be >= 2, got %d", opt.n_ctx));
  if (opt.first < 1 || opt.first >= opt.n_ctx) {
    throw Error(strfmt("first scored token must be in [1, %d) for windows of %d tokens, got %d", opt.n_ctx, opt.n_ctx,
                       opt.first));
  }
  if (opt.max_windows < 0) throw Error(strfmt("max_windows must be >= 0 (0 = all), got %d", opt.max_windows));
  if (opt.n_threads < 1) throw Error(strfmt("n_threads must be >= 1, got %d", opt.n_threads));
  if (n_tokens < static_cast<size_t>(opt.n_ctx)) {
    throw Error(strfmt("the text has %zu tokens, fewer than one window of %d (use a longer text or a smaller context)",
                       n_tokens, opt.n_ctx));
  }
}

WindowEvaluator::WindowEvaluator(const Model& model, std::span<const int32_t> tokens, const WindowOptions& opt)
    : tokens_(tokens), opt_(opt) {
  check_window_options(tokens.size(), opt);
  if (opt.bos >= model.config().n_vocab) {
    throw Error(strfmt("BOS token %d is outside the model's vocabulary of %d", opt.bos, model.config().n_vocab));
  }
  n_windows_ = count_windows(tokens.size(), opt);
  ContextParams cp;
  cp.n_ctx = opt.n_ctx;
  cp.n_batch = opt.n_ctx;
  cp.n_threads = opt.n_threads;
  cp.type_k = opt.type_k;
  cp.type_v = opt.type_v;
  ctx_ = std::make_unique<Context>(model, cp);
  window_.resize(static_cast<size_t>(opt.n_ctx));
}

WindowEvaluator::~WindowEvaluator() = default;

int WindowEvaluator::n_vocab() const { return ctx_->model().config().n_vocab; }

void WindowEvaluator::eval(int w) {
  LES_ASSERT(w >= 0 && w < n_windows_);
  const auto* src = tokens_.data() + static_cast<size_t>(w) * static_cast<size_t>(opt_.n_ctx);
  std::copy(src, src + opt_.n_ctx, window_.begin());
  if (opt_.bos >= 0) window_[0] = opt_.bos;
  ctx_->rollback(0);
  ctx_->eval(window_, true);
}

const float* WindowEvaluator::logits(int j) const {
  LES_ASSERT(j >= 0 && j < opt_.n_ctx && ctx_->n_outputs() == opt_.n_ctx);
  return ctx_->logits(j);
}

int32_t WindowEvaluator::token(int w, int i) const {
  LES_ASSERT(w >= 0 && w < n_windows_ && i >= 0 && i < opt_.n_ctx);
  return tokens_[static_cast<size_t>(w) * static_cast<size_t>(opt_.n_ctx) + static_cast<size_t>(i)];
}

ThreadPool& WindowEvaluator::pool() { return ctx_->pool(); }

void eval_windows(const Model& model, std::span<const int32_t> tokens, const WindowOptions& opt,
                  const PositionFn& on_position, const ProgressFn& progress) {
  WindowEvaluator ev(model, tokens, opt);
  for (int w = 0; w < ev.n_windows(); ++w) {
    ev.eval(w);
    for (int j = opt.first - 1; j <= opt.n_ctx - 2; ++j) on_position(w, j, ev.token(w, j + 1), ev.logits(j));
    if (progress) progress(w + 1, ev.n_windows());
  }
}

}  // namespace les::quality
