// The body of attention_kernels.h's loops, written on GCC/clang vector extensions so that each ISA's
// compile (attention_kernels*.cpp) maps a 16-float vector to its registers. Include once per
// translation unit with LES_ATTN_NS defined to that ISA's namespace name.
#include <cstdint>
#include <cstring>

#include "les/model/attention_kernels.h"

// The 64-byte vectors are passed between this file's own functions only (never across files), so
// GCC's note that their ABI differs without AVX-512 does not matter here. GCC gives that note at
// the end of the translation unit: the including file is kept out of unity builds (CMakeLists.txt)
// so that the setting stays its own.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

namespace les::LES_ATTN_NS {

typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

inline f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof v); }
inline f32x16 splat(float x) { return f32x16{} + x; }

// exp(x) for x <= 0 (inputs below -87 give exp(-87)): 2^k * e^r with r = x - k ln2 (Cody-Waite),
// e^r by its degree-6 Taylor polynomial (|r| <= ln2 / 2: relative error under 1.5e-7).
inline f32x16 exp16(f32x16 x) {
  const f32x16 lo = splat(-87.0f);
  const i32x16 below = x < lo;
  x = (f32x16)(((i32x16)x & ~below) | ((i32x16)lo & below));
  const f32x16 magic = splat(12582912.0f);  // 1.5 * 2^23: adding it rounds to an integer
  const f32x16 k = (x * splat(1.44269504088896341f) + magic) - magic;
  const f32x16 r = (x - k * splat(0.693145751953125f)) - k * splat(1.428606765330187e-06f);
  f32x16 p = splat(1.0f / 720.0f);
  p = p * r + splat(1.0f / 120.0f);
  p = p * r + splat(1.0f / 24.0f);
  p = p * r + splat(1.0f / 6.0f);
  p = p * r + splat(0.5f);
  p = p * r + splat(1.0f);
  p = p * r + splat(1.0f);
  const i32x16 e = (__builtin_convertvector(k, i32x16) + 127) << 23;
  return p * (f32x16)e;
}

float exp_sum(float* x, int n, float scale, float m) {
  f32x16 acc{};
  int j = 0;
  for (; j + 16 <= n; j += 16) {
    const f32x16 e = exp16(load16(x + j) * splat(scale) - splat(m));
    store16(x + j, e);
    acc += e;
  }
  if (j < n) {  // the tail in the lanes it would take, the others zero
    float t[16] = {};
    std::memcpy(t, x + j, static_cast<size_t>(n - j) * sizeof(float));
    f32x16 e = exp16(load16(t) * splat(scale) - splat(m));
    std::memcpy(t, &e, sizeof t);
    for (int l = n - j; l < 16; ++l) t[l] = 0.0f;
    std::memcpy(x + j, t, static_cast<size_t>(n - j) * sizeof(float));
    acc += load16(t);
  }
  float s = 0.0f;
  for (int l = 0; l < 16; ++l) s += acc[l];
  return s;
}

float max_value(const float* x, int n) {
  float best = x[0];
  int j = 0;
  if (n >= 16) {
    f32x16 mx = load16(x);
    for (j = 16; j + 16 <= n; j += 16) {
      const f32x16 v = load16(x + j);
      const i32x16 gt = v > mx;
      mx = (f32x16)(((i32x16)v & gt) | ((i32x16)mx & ~gt));
    }
    for (int l = 0; l < 16; ++l) best = mx[l] > best ? mx[l] : best;
  }
  for (; j < n; ++j) best = x[j] > best ? x[j] : best;
  return best;
}

// Four heads by 64 output values held in 16 vectors across the positions.
template <int H>
inline void pv_block(const float* p, int64_t p_stride, const float* v, int64_t v_stride, int n, float* o, int64_t os) {
  f32x16 acc[H][4];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[h][c] = load16(o + h * os + 16 * c);
  }
  for (int j = 0; j < n; ++j) {
    const float* vr = v + j * v_stride;
    const f32x16 v0 = load16(vr), v1 = load16(vr + 16), v2 = load16(vr + 32), v3 = load16(vr + 48);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      const f32x16 ph = splat(p[h * p_stride + j]);
      acc[h][0] += ph * v0;
      acc[h][1] += ph * v1;
      acc[h][2] += ph * v2;
      acc[h][3] += ph * v3;
    }
  }
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h) {
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) store16(o + h * os + 16 * c, acc[h][c]);
  }
}

// One head by 16 output values (the part of dv beyond the multiples of 64).
inline void pv_block16(const float* p, const float* v, int64_t v_stride, int n, float* o) {
  f32x16 acc = load16(o);
  for (int j = 0; j < n; ++j) acc += splat(p[j]) * load16(v + j * v_stride);
  store16(o, acc);
}

void pv_accumulate(const float* p, int64_t p_stride, int n_heads, const float* v, int64_t v_stride, int n, int dv,
                   float* o, int64_t os) {
  int d0 = 0;
  for (; d0 + 64 <= dv; d0 += 64) {
    int h = 0;
    for (; h + 4 <= n_heads; h += 4) pv_block<4>(p + h * p_stride, p_stride, v + d0, v_stride, n, o + h * os + d0, os);
    for (; h < n_heads; ++h) pv_block<1>(p + h * p_stride, p_stride, v + d0, v_stride, n, o + h * os + d0, os);
  }
  for (; d0 < dv; d0 += 16) {
    for (int h = 0; h < n_heads; ++h) pv_block16(p + h * p_stride, v + d0, v_stride, n, o + h * os + d0);
  }
}

const AttnKernels& table() {
  static const AttnKernels t{exp_sum, max_value, pv_accumulate};
  return t;
}

}  // namespace les::LES_ATTN_NS
