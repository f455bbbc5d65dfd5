// Evaluation of a token stream in fixed windows, as the perplexity protocol of
// tests/data/trained/README.md and llama.cpp's llama-perplexity do it:
//
//   window w = tokens[w*n_ctx, (w+1)*n_ctx); consecutive, non-overlapping; a partial last window
//   is dropped. Every window is evaluated from an empty context at position 0, as one batch.
//
// Which logits score which token: inside a window, the logits at position j (the output after
// reading window tokens 0..j) give the distribution of window token j+1. The scored tokens are
// window tokens first..n_ctx-1, i.e. the logits of positions first-1..n_ctx-2 are used:
// n_ctx - first predictions per window. first = 1 scores every token but the window's first
// (the README protocol: 511 per 512-token window). llama.cpp's perplexity tool calls the logits
// position its "first" (n_ctx/2 there); that is our first = n_ctx/2 + 1.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "les/model/model.h"

namespace les {
class Context;
class ThreadPool;
}  // namespace les

namespace les::quality {

struct WindowOptions {
  int n_ctx = 512;       // tokens per window
  int first = 1;         // first scored token of a window (1 <= first < n_ctx), see above
  int max_windows = 0;   // 0 = every complete window
  int n_threads = 1;
  // >= 0: window token 0 is evaluated as this token instead (the scored tokens never include it).
  // llama.cpp does this with the BOS token when the vocabulary's add_bos_token is set.
  int32_t bos = -1;
  Type type_k = Type::F32, type_v = Type::F32;  // KV cache types (kv_cache.h)
};

// Number of windows evaluated for n_tokens tokens (complete windows, capped by max_windows).
int count_windows(size_t n_tokens, const WindowOptions& opt);

// Throws les::Error when the options are out of range or the stream is shorter than one window.
void check_window_options(size_t n_tokens, const WindowOptions& opt);

// Calls on_position(window, j, next_token, logits[n_vocab]) for every scored position, in order:
// j runs over first-1..n_ctx-2, next_token is window token j+1, logits are those at position j.
using PositionFn = std::function<void(int window, int j, int32_t next_token, const float* logits)>;
using ProgressFn = std::function<void(int windows_done, int windows_total)>;
void eval_windows(const Model& model, std::span<const int32_t> tokens, const WindowOptions& opt,
                  const PositionFn& on_position, const ProgressFn& progress = {});

// The same, one window at a time (for running two models in lockstep). Keeps one context of
// n_ctx positions; eval(w) replaces the logits of the previous window.
class WindowEvaluator {
 public:
  // tokens must outlive the evaluator. Throws les::Error as check_window_options does.
  WindowEvaluator(const Model& model, std::span<const int32_t> tokens, const WindowOptions& opt);
  ~WindowEvaluator();

  int n_windows() const { return n_windows_; }
  const WindowOptions& options() const { return opt_; }
  int n_vocab() const;

  // Evaluates window w (0 <= w < n_windows()) from an empty context.
  void eval(int w);
  // Logits at position j (0 <= j < n_ctx) of the last evaluated window, [n_vocab].
  const float* logits(int j) const;
  // Token i (0 <= i < n_ctx) of window w as it stands in the stream (never the bos substitute).
  int32_t token(int w, int i) const;
  // The context's thread pool (idle between evals): for work on the logits.
  ThreadPool& pool();

 private:
  std::span<const int32_t> tokens_;
  WindowOptions opt_;
  int n_windows_ = 0;
  std::unique_ptr<Context> ctx_;
  std::vector<int32_t> window_;
};

}  // namespace les::quality
