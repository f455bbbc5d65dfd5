// Multi-head latent attention (deepseek2: DeepSeek-V2/V3, Kimi-K2) in the absorbed form llama.cpp
// runs for files with attn_k_b / attn_v_b, with its compressed KV cache:
//   q = attn_q . x, or attn_q_b . RMSNorm(attn_q_a . x) * attn_q_a_norm  (q LoRA)
//       per head [nope | rope]
//   [c | k_rope] = attn_kv_a_mqa . x;  latent = RMSNorm(c) * attn_kv_a_norm   (kv_lora_rank dims)
//   RoPE (interleaved pairs, YaRN) on every head's rope part and on the one shared k_rope
//   cache row of a position: [latent | k_rope]   (n_lora_kv + n_rot floats, all heads share it)
//   per head h: Q_h = [attn_k_b[h] . q_nope_h | q_rope_h]
//               a_h = softmax(kq_scale * Q_h . row_j over the causal past) . latent_j
//               o_h = attn_v_b[h] . a_h
//   out = attn_output . [o_0 | o_1 | ...]
#pragma once

#include <cstdint>
#include <vector>

#include "les/model/config.h"
#include "les/model/matmul.h"
#include "les/model/product_names.h"
#include "les/model/weights.h"
#include "les/util/thread_pool.h"

namespace les {

class MlaAttention {
 public:
  explicit MlaAttention(const ModelConfig& c) : c_(c) {}

  // x: n normed input rows [n][n_embd] at positions pos0..; cache: this layer's rows
  // [n_ctx][n_lora_kv + n_rot] (rows pos0 .. pos0 + n - 1 are written); out: [n][n_embd].
  // tap (may be null) sees the input rows of the 2-D projections (attn_q or attn_q_a / attn_q_b,
  // attn_kv_a_mqa, attn_output), on the calling thread. Every output is computed by one thread
  // in a fixed order: the result depends neither on the thread count nor on how positions are
  // split into calls.
  void forward(const LayerWeights& L, const float* x, int n, int pos0, float* cache, float* out, ThreadPool& pool,
               const ProductTap* tap = nullptr);

  uint64_t bytes() const;

 private:
  const ModelConfig& c_;
  std::vector<float> qa_, q_, kv_, qabs_, lat_, o_, rope_;
  QuantizedActs acts_, acts2_;
};

}  // namespace les
