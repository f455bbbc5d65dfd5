// Causal multi-head attention over a KV cache: softmax(q k^T * scale) v for each (token, head),
// with grouped-query heads (query head h reads KV head h / (n_head / n_head_kv)).
#pragma once

#include <cstdint>

#include "les/util/thread_pool.h"

namespace les {

struct AttentionShape {
  int n_head = 0, n_head_kv = 0;
  int head_dim_k = 0, head_dim_v = 0;
  float scale = 1.0f;
  // Attention sinks (gpt-oss), [n_head] or null: head h's softmax denominator also holds
  // exp(sinks[h]) (ggml_soft_max_add_sinks); no value goes with it.
  const float* sinks = nullptr;
  // Sliding window, 0 for none: the token at position p sees positions max(0, p - window + 1) .. p
  // (llama.cpp's standard SWA mask).
  int window = 0;
};

// q: n query rows, head h of token i at q + i * q_stride + h * head_dim_k.
// k_cache/v_cache: rows of n_head_kv * head_dim_k / head_dim_v floats for positions 0 .. pos0 + n - 1;
// token i (position pos0 + i) attends to positions 0 .. pos0 + i (the last `window` of them with
// a window).
// out: [n][n_head * head_dim_v]. One (token, head) pair per task: thread-count independent.
void causal_attention(const AttentionShape& s, const float* q, int64_t q_stride, const float* k_cache,
                      const float* v_cache, int n, int pos0, float* out, ThreadPool& pool);

}  // namespace les
