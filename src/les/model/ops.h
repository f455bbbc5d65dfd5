// Element-wise and row operations of the forward pass, with llama.cpp's (ggml CPU) arithmetic:
// sums of squares and softmax denominators in double, products in float, in the same order.
#pragma once

#include <cstdint>

#include "les/model/config.h"

namespace les::ops {

// y = x / sqrt(mean(x^2) + eps) * w  (w may be null: no weight). y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t n, float eps);

// In-place softmax of n values: exp(x - max) / sum. Returns nothing; x is overwritten.
void softmax(float* x, int64_t n);
// The same with a sink logit in the denominator (ggml_soft_max_add_sinks): exp(x - m) / (sum +
// exp(sink - m)) with m = max(max x, sink).
void softmax_with_sink(float* x, int64_t n, float sink);

// Rotary embedding of one head vector (n_rot first dims rotated, rest untouched) at position pos.
// theta_scale = freq_base^(-2/n_rot); freq_factors optional [n_rot/2].
struct RopeParams {
  int n_rot = 0;
  RopeType type = RopeType::neox;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;
  const float* freq_factors = nullptr;
  const int* sections = nullptr;  // RopeType::imrope: the 4 M-RoPE sections (text positions)
  // YaRN (ggml's rope_yarn): ext_factor > 0 mixes interpolated (freq_scale * theta) and
  // extrapolated (theta) angles by a ramp between the correction dims, and multiplies the
  // magnitude by 1 + 0.1 ln(1 / freq_scale); attn_factor scales cos and sin always.
  float ext_factor = 0.0f;
  float attn_factor = 1.0f;
  float corr_dims[2] = {0.0f, 0.0f};
};
// The YaRN part of p from a model's configuration (n_rot and the YaRN fields) and p.freq_base,
// which must be set first (the correction dims depend on the base, per layer with SWA bases).
void set_yarn(RopeParams& p, const ModelConfig& c);
// Fills cache[0..n_rot) with interleaved (cos, sin) for position pos (as ggml's rope cache).
void rope_cache(const RopeParams& p, int64_t pos, float* cache);
// Applies a cache computed by rope_cache to one head vector in place.
void rope_apply(const RopeParams& p, const float* cache, float* x);

// x[0 .. n) in blocks of `block` values (a power of two dividing n), each replaced by its product
// with the orthonormal Walsh-Hadamard matrix of that size (Sylvester's order): scaled by
// 1/sqrt(block) first, then the butterflies (a + b, a - b) of widths 1, 2, 4, ... as ggml's fwht
// computes them, so the results are the same floats. The matrix is its own inverse.
void hadamard_blocks(float* x, int64_t n, int block);

inline float silu(float x) { return x / (1.0f + __builtin_expf(-x)); }
inline float sigmoid(float x) { return 1.0f / (1.0f + __builtin_expf(-x)); }
// gpt-oss's clamped SwiGLU (ggml_swiglu_oai with alpha 1.702, limit 7).
inline float swiglu_oai(float gate, float up) {
  const float x = gate < 7.0f ? gate : 7.0f;
  const float y = up < -7.0f ? -7.0f : (up > 7.0f ? 7.0f : up);
  return x / (1.0f + __builtin_expf(1.702f * -x)) * (y + 1.0f);
}

}  // namespace les::ops
