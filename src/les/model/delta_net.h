// Gated DeltaNet sequence mixer (qwen35moe and qwen3next recurrent layers) and its per-sequence state.
//
// Per token, with S = ssm_d_state, n_k q/k heads, n_v v heads (v head h uses q/k head
// ModelConfig::ssm_qk_head(h): h % n_k, or h / (n_v / n_k) for grouped heads):
//   mixed = attn_qkv . x; z = attn_gate . x; beta = sigmoid(ssm_beta . x);
//   (qwen3next: beta and alpha rows from the fused ssm_ba, mixed and z from a legacy fused ssm_in)
//   g = softplus(ssm_alpha . x + dt_bias) * ssm_a                       (log-decay, <= 0)
//   y = silu(causal depthwise conv of mixed over the last d_conv tokens) = [q | k | v]
//   q, k L2-normalised per head; per v head, state M [key i][value j]:
//     M *= exp(g); delta = beta * (v - M^T k); M += k delta^T; o = M^T q / sqrt(S)
//   out = ssm_out . (RMSNorm(o_h) * ssm_norm * silu(z_h) per head)
// Arithmetic follows ggml's CPU ops (ssm_conv, gated_delta_net): F32 state, token by token.
#pragma once

#include <cstdint>
#include <vector>

#include "les/model/config.h"
#include "les/model/matmul.h"
#include "les/model/product_names.h"
#include "les/model/weights.h"
#include "les/util/thread_pool.h"

namespace les {

// Conv and delta-rule state of every recurrent layer of one sequence, with a snapshot of the
// state at the start of the last evaluation (for rollback without recomputing from position 0).
// The delta-rule state is double-buffered: an evaluation's first token reads the snapshot buffer
// and writes the other one, so taking the snapshot copies nothing.
class RecurrentState {
 public:
  explicit RecurrentState(const ModelConfig& c);

  // Zero state at position 0; the snapshot is that zero state.
  void reset();
  // Starts an evaluation at position pos: the current state becomes the snapshot.
  void begin_eval(int pos);
  // Position of the snapshot (the state before the last evaluation).
  int snapshot_pos() const { return snap_pos_; }
  // Current state := the snapshot.
  void restore_snapshot();

  // Layer slot r (the r-th recurrent layer): conv state [conv_dim][d_conv - 1] (oldest first).
  float* conv(int r) { return conv_.data() + static_cast<size_t>(r) * conv_per_layer_; }
  // Delta-rule state [n_v][S value j][S key i]: where the next token reads it from and where it
  // writes it (the same buffer except for an evaluation's first token).
  const float* ssm_read(int r) const;
  float* ssm_write(int r);
  // Marks layer r's first token of this evaluation as done (later tokens work in place).
  void ssm_written(int r) { first_[static_cast<size_t>(r)] = 0; }

  uint64_t bytes() const;
  // What bytes() is for a model (for memory budgets before a context exists).
  static uint64_t bytes_for(const ModelConfig& c);

 private:
  size_t conv_per_layer_ = 0, ssm_per_layer_ = 0;
  std::vector<float> conv_, conv_snap_;
  std::vector<float> ssm_[2];
  int cur_ = 0;        // buffer holding the current state (after the first token of an eval)
  int src_ = 0;        // buffer holding the snapshot
  std::vector<uint8_t> first_;  // per layer: the current eval's first token is still to come
  int snap_pos_ = 0;
};

// Work buffers and the forward computation of a DeltaNet layer.
class DeltaNetMixer {
 public:
  explicit DeltaNetMixer(const ModelConfig& c) : c_(c) {}

  // Chunked form of the delta rule for batches of more than one token (chunks of 64 tokens,
  // the WY representation: a triangular solve per chunk, then matrix products). Equal to the
  // token-by-token recurrence up to rounding; off by default because llama.cpp's CPU backend runs
  // the recurrence (its fused op), which this engine then matches closest, and decode = prefill
  // bit for bit.
  void set_chunked(bool on) { chunked_ = on; }

  // x: n normed input rows [n][n_embd]; out: [n][n_embd] (overwritten). State slot r is advanced
  // by the n tokens. Every output element is computed by one thread (thread-count independent).
  // tap (may be null) sees the input rows of each projection, on the calling thread.
  void forward(const LayerWeights& L, RecurrentState& st, int r, const float* x, int n, float* out,
               ThreadPool& pool, const ProductTap* tap = nullptr);

  uint64_t bytes() const;
  // Float work buffers per token of a batch (for memory budgets).
  static uint64_t floats_per_token(const ModelConfig& c);

 private:
  // The delta rule of v head h over n tokens in chunks; m_in: state before, m_out: after.
  void delta_rule_chunked(int64_t h, int n, const float* m_in, float* m_out);

  const ModelConfig& c_;
  bool chunked_ = false;
  std::vector<float> mixed_, y_, z_, beta_, g_, o_;
  std::vector<float> fused_;  // output of a fused product (ssm_in, ssm_ba) before its rows are gathered
  QuantizedActs acts_;
};

}  // namespace les
