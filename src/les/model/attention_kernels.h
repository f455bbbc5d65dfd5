// The inner loops of attention over a typed KV cache (attention_core.cpp), compiled once per x86
// ISA (attention_kernels_{avx2,avx512}.cpp) and once portably, chosen by the active kernel ISA.
// Each is deterministic: the same inputs give the same bits whatever the thread or call.
#pragma once

#include <cstddef>
#include <cstdint>

#include "les/quant/types.h"

namespace les {

struct AttnKernels {
  // x[j] = exp(x[j] * scale - m) for j < n (a polynomial exp, within 2 ulp of expf); returns the
  // sum of the new x[j] (16 lanes, j mod 16, added in lane order).
  float (*exp_sum)(float* x, int n, float scale, float m);
  // The largest of x[0 .. n) (n >= 1).
  float (*max_value)(const float* x, int n);
  // o[h * o_stride + d] += sum over j < n, in order, of p[h * p_stride + j] * v[j * v_stride + d],
  // for h < n_heads, d < dv (dv a multiple of 16).
  void (*pv_accumulate)(const float* p, int64_t p_stride, int n_heads, const float* v, int64_t v_stride, int n,
                        int dv, float* o, int64_t o_stride);
  // V rows to float: out[r * width + d] = value d of the `width` values at rows + r * row_bytes
  // (width a multiple of 16; of 32 for q8_0), for r < n_rows, bit-identical to the type's dequantization. Returns
  // false (nothing written) for a type it has no fast path for (f16, bf16 and q8_0 have one).
  bool (*rows_to_float)(Type t, const uint8_t* rows, size_t row_bytes, int n_rows, int width, float* out);
};

const AttnKernels& attn_kernels();

}  // namespace les
