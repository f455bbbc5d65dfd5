// Causal multi-head attention over a KV cache: softmax(q k^T * scale) v for each (token, head),
// with grouped-query heads (query head h reads KV head h / (n_head / n_head_kv)).
#pragma once

#include <cstdint>
#include <span>

#include "les/model/kv_cache.h"
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

// q: n query rows, head h of token i at q + i * q_stride + h * head_dim_k (floats).
// k, v: the cache rows of positions 0 .. pos0 + n - 1; token i (position pos0 + i) attends to
// positions 0 .. pos0 + i (the last `window` of them with a window).
// out: [n][n_head * head_dim_v].
//
// An f32 cache (both K and V f32) is computed as llama.cpp computes attention without flash
// attention: scores by the F32 product, one softmax over the row (sum in double), values summed
// in position order.
// Any other cache is computed as llama.cpp's flash attention computes it: each query head is
// converted to K's activation type (q8_0 for q8_0/q4_0/q5_0/iq4_nl keys, q8_1 for q4_1/q5_1, f16,
// bf16) and multiplied with the keys in place by the K type's dot product; V rows are converted to
// float as they are read. The visible positions are cut at fixed multiples of kAttnChunk; each
// piece gives its maximum, sum and weighted values, and the pieces combine in position order.
// Results depend only on the inputs (not on n, pos0 beyond the token's position, or the thread
// count): a token's attention is bit-identical however it was batched. All query heads of a KV head
// read each K and V row once.
void causal_attention(const AttentionShape& s, const float* q, int64_t q_stride, const KvView& k, const KvView& v,
                      int n, int pos0, float* out, ThreadPool& pool);

inline constexpr int kAttnChunk = 256;

// Several sequences' tokens at once (batched decoding), each over its own cache: the same results,
// bit for bit, as one causal_attention call per sequence, in one parallel loop. All caches of one
// type pair; q and out: the sequence's rows (q_stride apart; n_head * head_dim_v apart).
struct AttentionSeq {
  const float* q;
  KvView k, v;
  int n, pos0;
  float* out;
};
void causal_attention(const AttentionShape& s, int64_t q_stride, std::span<const AttentionSeq> seqs, ThreadPool& pool);

// Float rows (tests, f32 caches held as plain arrays): rows of n_head_kv * head_dim_k /
// head_dim_v floats.
void causal_attention(const AttentionShape& s, const float* q, int64_t q_stride, const float* k_cache,
                      const float* v_cache, int n, int pos0, float* out, ThreadPool& pool);

}  // namespace les
