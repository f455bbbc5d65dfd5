// Gated full-attention mixer (qwen35moe attention layers):
//   [q_h | gate_h] per head = attn_q . x;  k = attn_k . x;  v = attn_v . x
//   q_h, k_h: per-head RMSNorm (attn_q_norm / attn_k_norm), then RoPE on the first n_rot dims
//   (interleaved M-RoPE sections; text tokens use one position)
//   a = causal GQA attention (scale 1/sqrt(head_dim)) over the KV cache (K after norm and RoPE)
//   out = attn_output . (a * sigmoid(gate))
#pragma once

#include <cstdint>
#include <vector>

#include "les/model/config.h"
#include "les/model/kv_cache.h"
#include "les/model/matmul.h"
#include "les/model/product_names.h"
#include "les/model/weights.h"
#include "les/util/thread_pool.h"

namespace les {

class GatedAttentionMixer {
 public:
  explicit GatedAttentionMixer(const ModelConfig& c) : c_(c) {}

  // x: n normed input rows [n][n_embd] at positions pos0..; k_rows/v_rows: the KV cache, layer
  // `slot` of it this layer's (rows pos0 .. pos0 + n - 1 are written); out: [n][n_embd].
  // tap (may be null) sees the input rows of each projection, on the calling thread.
  void forward(const LayerWeights& L, const float* x, int n, int pos0, KvRows& k_rows, KvRows& v_rows, int slot,
               float* out, ThreadPool& pool, const ProductTap* tap = nullptr);

  uint64_t bytes() const;

 private:
  const ModelConfig& c_;
  std::vector<float> qg_, q_, k_, v_, att_, rope_;
  QuantizedActs acts_;
};

}  // namespace les
