// The body of attention_kernels.h's loops, written on GCC/clang vector extensions so that each ISA's
// compile (attention_kernels*.cpp) maps a 16-float vector to its registers. Include once per
// translation unit with LES_ATTN_NS defined to that ISA's namespace name.
#include <cstdint>
#include <cstring>

#include "les/model/attention_kernels.h"

#if defined(__AVX2__) || defined(__AVX512F__)
#include <immintrin.h>
#endif

// The 64-byte vectors are passed between this file's own functions only (never across files), so
// GCC's note that their ABI differs without AVX-512 does not matter here. GCC gives that note at
// the end of the translation unit: the including file is kept out of unity builds (CMakeLists.txt)
// so that the setting stays its own.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wpsabi"
// GCC 12 reports the deliberately undefined source of AVX-512 conversions (_mm512_undefined_*) as
// maybe uninitialized.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace les::LES_ATTN_NS {

typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint16_t u16x16 __attribute__((vector_size(32)));
typedef int8_t i8x16 __attribute__((vector_size(16)));
// Unaligned forms for loads straight from memory (GCC splits some memcpy loads into scalar moves).
typedef float f32x16u __attribute__((vector_size(64), aligned(4)));
typedef uint16_t u16x16u __attribute__((vector_size(32), aligned(2)));
typedef int8_t i8x16u __attribute__((vector_size(16), aligned(1)));

inline f32x16 load16(const float* p) { return *reinterpret_cast<const f32x16u*>(p); }
inline void store16(float* p, f32x16 v) { *reinterpret_cast<f32x16u*>(p) = v; }
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

// IEEE half bits to float, exactly (normals and subnormals by one multiply: the 5-bit exponent
// placed in the float's 8-bit field and rebiased by 2^112; infinities and NaNs kept).
inline f32x16 half_to_float16(u16x16 h) {
  const u32x16 w = __builtin_convertvector(h, u32x16);
  const u32x16 sign = (w & 0x8000u) << 16;
  const u32x16 mag = (w & 0x7fffu) << 13;
  f32x16 f = (f32x16)mag * splat(0x1p112f);
  const u32x16 special = (u32x16)((w & 0x7c00u) == 0x7c00u);  // all ones where inf / NaN
  const u32x16 fb = ((u32x16)f & ~special) | ((mag | 0x7f800000u) & special);
  return (f32x16)(fb | sign);
}

inline float half_to_float(uint16_t h) {
  u16x16 v{};
  v[0] = h;
  return half_to_float16(v)[0];
}

// 16 halves / 16 int8 values to floats (F16C and sign-extending moves where the ISA has them:
// GCC's generic vector conversions of these go lane by lane).
inline void halves_to_floats(const uint8_t* x, float* y) {
#if defined(__AVX512F__)
  _mm512_storeu_ps(y, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x))));
#elif defined(__AVX2__) && defined(__F16C__)
  _mm256_storeu_ps(y, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))));
  _mm256_storeu_ps(y + 8, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x + 16))));
#else
  store16(y, half_to_float16(*reinterpret_cast<const u16x16u*>(x)));
#endif
}

inline void int8s_to_floats(const uint8_t* x, float d, float* y) {
#if defined(__AVX512F__)
  const __m512 v = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x))));
  _mm512_storeu_ps(y, _mm512_mul_ps(_mm512_set1_ps(d), v));
#elif defined(__AVX2__)
  const __m256 dv = _mm256_set1_ps(d);
  _mm256_storeu_ps(y, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x))))));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(dv, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(x + 8))))));
#else
  for (int l = 0; l < 16; ++l) y[l] = d * static_cast<float>(static_cast<int8_t>(x[l]));
#endif
}

bool rows_to_float(Type t, const uint8_t* rows, size_t row_bytes, int n_rows, int width, float* out) {
  if (t != Type::F16 && t != Type::BF16 && t != Type::Q8_0) return false;
  for (int r = 0; r < n_rows; ++r) {
    const uint8_t* x = rows + static_cast<size_t>(r) * row_bytes;
    float* y = out + static_cast<size_t>(r) * static_cast<size_t>(width);
    if (t == Type::F16) {
      for (int d = 0; d < width; d += 16) halves_to_floats(x + 2 * d, y + d);
    } else if (t == Type::BF16) {
      for (int d = 0; d < width; d += 16) {
        const u16x16 h = *reinterpret_cast<const u16x16u*>(x + 2 * d);
        store16(y + d, (f32x16)(__builtin_convertvector(h, u32x16) << 16));
      }
    } else {  // q8_0: blocks of an f16 scale and 32 int8 values
      for (int b = 0; b < width / 32; ++b) {
        const uint8_t* blk = x + 34 * static_cast<size_t>(b);
        uint16_t dh;
        std::memcpy(&dh, blk, 2);
        const float d = half_to_float(dh);
        int8s_to_floats(blk + 2, d, y + 32 * b);
        int8s_to_floats(blk + 18, d, y + 32 * b + 16);
      }
    }
  }
  return true;
}

const AttnKernels& table() {
  static const AttnKernels t{exp_sum, max_value, pv_accumulate, rows_to_float};
  return t;
}

}  // namespace les::LES_ATTN_NS
