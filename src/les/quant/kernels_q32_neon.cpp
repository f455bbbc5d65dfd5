// aarch64 Advanced SIMD (armv8-a, no SDOT) kernels of the q32 family: the activation quantizers
// (Q8_0, Q8_1, Q8_K, F16, BF16), the float dot products (F32, F16, BF16) and the integer dot
// products of Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL. The dotprod and i8mm tables inherit the
// quantizers and float products.
//
// Exactness:
// - Quantizers are bit-identical to quant_ref.cpp: the same float operations in the same order
//   (amax by maxnm, which ignores NaN as the scalar max does; x * id clamped to [lo-1, hi+1] by
//   FMAX/FMIN, which keep a NaN's bits as the scalar clamp does; rounding by adding 1.5 * 2^23
//   and reading the mantissa, so a NaN quantizes through its bits as in the scalar code; integer
//   clamp by saturating narrows). Half conversion by FCVTN (round to nearest even, overflow to
//   infinity, exact subnormals) with NaNs reduced to sign | 0x7e00 as the portable conversion
//   does; bfloat16 by the same integer rounding as the portable one.
// - Integer products are exact int32 sums per block (vmull/vmlal pairs in int16, which cannot
//   overflow for weights above -128; Q8_0 weights, which may be -128, widen each product pair);
//   the float order per block is the family's (kernels_q32_arm.h), which the gemm (one weight row x
//   up to 4 activation rows) keeps per output, so it is bit-identical to this table's vec_dot.
// - Float products accumulate products in float lanes (FMA), within the rounding the tests allow.

#include <arm_neon.h>

#include <cstring>

#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_q32_arm.h"

namespace les {
namespace {

// ---------------------------------------------------------------------------------------------
// Conversions

// f32 -> binary16 bits as les::f32_to_fp16 gives them (NaN: sign | 0x7e00).
inline uint16x4_t to_half4(float32x4_t v) {
  const uint16x4_t h = vreinterpret_u16_f16(vcvt_f16_f32(v));
  const uint16x4_t nan = vmovn_u32(vmvnq_u32(vceqq_f32(v, v)));
  return vbic_u16(h, vand_u16(nan, vdup_n_u16(0x01ff)));
}

inline uint16_t to_half(float f) { return vget_lane_u16(to_half4(vdupq_n_f32(f)), 0); }

// f32 -> bfloat16 bits as les::f32_to_bf16 gives them (round to nearest even; NaN quieted).
inline uint16x4_t to_bf16_4(float32x4_t v) {
  const uint32x4_t u = vreinterpretq_u32_f32(v);
  const uint32x4_t nan = vcgtq_u32(vandq_u32(u, vdupq_n_u32(0x7fffffff)), vdupq_n_u32(0x7f800000));
  const uint32x4_t bias = vaddq_u32(vandq_u32(vshrq_n_u32(u, 16), vdupq_n_u32(1)), vdupq_n_u32(0x7fff));
  const uint32x4_t r = vbslq_u32(nan, vorrq_u32(u, vdupq_n_u32(0x00400000)), vaddq_u32(u, bias));
  return vshrn_n_u32(r, 16);
}

inline float32x4_t load4(const float* x) { return vld1q_f32(x); }

// ---------------------------------------------------------------------------------------------
// Activation quantizers

// nearest_int(clamp(v, lo - 1, hi + 1)) of quant_common.h's qround, before the integer clamp.
inline int32x4_t round_clamped(float32x4_t v, float lo1, float hi1) {
  v = vminq_f32(vmaxq_f32(v, vdupq_n_f32(lo1)), vdupq_n_f32(hi1));
  const uint32x4_t t = vreinterpretq_u32_f32(vaddq_f32(v, vdupq_n_f32(12582912.0f)));
  return vsubq_s32(vreinterpretq_s32_u32(vandq_u32(t, vdupq_n_u32(0x007fffff))), vdupq_n_s32(0x00400000));
}

// 16 values scaled by s, rounded and saturated to [-128, 127] (qround for lo = -128).
inline int8x16_t quant16(const float* x, float s, float lo1, float hi1) {
  const int32x4_t q0 = round_clamped(vmulq_n_f32(load4(x), s), lo1, hi1);
  const int32x4_t q1 = round_clamped(vmulq_n_f32(load4(x + 4), s), lo1, hi1);
  const int32x4_t q2 = round_clamped(vmulq_n_f32(load4(x + 8), s), lo1, hi1);
  const int32x4_t q3 = round_clamped(vmulq_n_f32(load4(x + 12), s), lo1, hi1);
  const int16x8_t h0 = vqmovn_high_s32(vqmovn_s32(q0), q1);
  const int16x8_t h1 = vqmovn_high_s32(vqmovn_s32(q2), q3);
  return vqmovn_high_s16(vqmovn_s16(h0), h1);
}

// Largest |x| of 32 floats, NaNs ignored (0 if there is none).
inline float amax32(const float* x) {
  float32x4_t m = vdupq_n_f32(0.0f);
  for (int j = 0; j < 32; j += 8) {
    m = vmaxnmq_f32(m, vmaxnmq_f32(vabsq_f32(load4(x + j)), vabsq_f32(load4(x + j + 4))));
  }
  return vmaxnmvq_f32(m);
}

// Q8_0 / Q8_1 block: d = amax / 127 (stored as half at d_out), q = qround(x * 127 / amax, -127,
// 127); returns sum(q).
inline int quant_block_q8(const float* x, float& d, uint8_t* d_out, int8_t* qs) {
  const float amax = amax32(x);
  d = amax / 127.0f;
  const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
  const uint16_t dh = to_half(d);
  std::memcpy(d_out, &dh, 2);
  const int8x16_t m127 = vdupq_n_s8(-127);
  const int8x16_t lo = vmaxq_s8(quant16(x, id, -128.0f, 128.0f), m127);
  const int8x16_t hi = vmaxq_s8(quant16(x + 16, id, -128.0f, 128.0f), m127);
  vst1q_s8(qs, lo);
  vst1q_s8(qs + 16, hi);
  return vaddlvq_s8(lo) + vaddlvq_s8(hi);
}

void quant_q8_0(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  for (int64_t i = 0; i < n / 32; ++i, x += 32, y += sizeof(block_q8_0)) {
    float d;
    quant_block_q8(x, d, y, reinterpret_cast<int8_t*>(y + 2));
  }
}

void quant_q8_1(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  for (int64_t i = 0; i < n / 32; ++i, x += 32, y += sizeof(block_q8_1)) {
    float d;
    const int sum = quant_block_q8(x, d, y, reinterpret_cast<int8_t*>(y + 4));
    const uint16_t s = to_half(d * static_cast<float>(sum));
    std::memcpy(y + 2, &s, 2);
  }
}

// Q8_K: the first element of largest magnitude (max) maps to -127: iscale = -127 / max,
// q = qround(iscale * x, -128, 127), d = 1 / iscale, bsums per 16; an all-zero block is zeros.
void quant_q8_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  for (int64_t i = 0; i < n / QK_K; ++i, x += QK_K, y += sizeof(block_q8_K)) {
    float32x4_t hi4 = vdupq_n_f32(0.0f), lo4 = vdupq_n_f32(0.0f);
    for (int j = 0; j < QK_K; j += 4) {
      const float32x4_t v = load4(x + j);
      hi4 = vmaxnmq_f32(hi4, v);
      lo4 = vminnmq_f32(lo4, v);
    }
    const float hi = vmaxnmvq_f32(hi4), lo = vminnmvq_f32(lo4);
    const float amax = hi > -lo ? hi : -lo;
    if (amax == 0.0f) {
      std::memset(y, 0, sizeof(block_q8_K));
      continue;
    }
    float max = hi == amax ? hi : lo;
    if (hi == amax && -lo == amax) {  // both signs reach amax: the first one counts
      int j = 0;
      while (x[j] != amax && x[j] != -amax) ++j;
      max = x[j];
    }
    const float iscale = -127.0f / max;
    auto* qs = reinterpret_cast<int8_t*>(y + 4);
    int16_t bsums[QK_K / 16];
    for (int g = 0; g < QK_K / 16; ++g) {
      const int8x16_t q = quant16(x + 16 * g, iscale, -129.0f, 128.0f);
      vst1q_s8(qs + 16 * g, q);
      bsums[g] = vaddlvq_s8(q);
    }
    std::memcpy(y + 4 + QK_K, bsums, sizeof(bsums));
    const float d = 1 / iscale;
    std::memcpy(y, &d, 4);
  }
}

void quant_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    vst1q_u8(y + 2 * i, vreinterpretq_u8_u16(vcombine_u16(to_half4(load4(x + i)), to_half4(load4(x + i + 4)))));
  }
  for (; i < n; ++i) {
    const uint16_t h = to_half(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

void quant_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    vst1q_u8(y + 2 * i, vreinterpretq_u8_u16(vcombine_u16(to_bf16_4(load4(x + i)), to_bf16_4(load4(x + i + 4)))));
  }
  for (; i < n; ++i) {
    const uint16_t h = vget_lane_u16(to_bf16_4(vdupq_n_f32(x[i])), 0);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Float dot products: 16 elements per step in four FMA accumulators, then the rest one by one.

// Element loaders of the three float formats: 4 elements at p[i] as f32 lanes.
struct F32Elems {
  static constexpr int kSize = 4;
  static inline float32x4_t load(const uint8_t* p) { return vreinterpretq_f32_u8(vld1q_u8(p)); }
  static inline float one(const uint8_t* p) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
};

struct F16Elems {
  static constexpr int kSize = 2;
  static inline float32x4_t load(const uint8_t* p) { return vcvt_f32_f16(vreinterpret_f16_u8(vld1_u8(p))); }
  static inline float one(const uint8_t* p) { return load_half(p); }
};

struct Bf16Elems {
  static constexpr int kSize = 2;
  static inline float32x4_t load(const uint8_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vreinterpret_u16_u8(vld1_u8(p)), 16));
  }
  static inline float one(const uint8_t* p) {
    uint16_t b;
    std::memcpy(&b, p, 2);
    const uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

template <class E>
float dot_float(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  constexpr int S = E::kSize;
  float32x4_t s0 = vdupq_n_f32(0.0f), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    s0 = vfmaq_f32(s0, E::load(w + S * i), E::load(a + S * i));
    s1 = vfmaq_f32(s1, E::load(w + S * (i + 4)), E::load(a + S * (i + 4)));
    s2 = vfmaq_f32(s2, E::load(w + S * (i + 8)), E::load(a + S * (i + 8)));
    s3 = vfmaq_f32(s3, E::load(w + S * (i + 12)), E::load(a + S * (i + 12)));
  }
  for (; i + 4 <= n; i += 4) s0 = vfmaq_f32(s0, E::load(w + S * i), E::load(a + S * i));
  float sum = vaddvq_f32(vaddq_f32(vaddq_f32(s0, s1), vaddq_f32(s2, s3)));
  for (; i < n; ++i) sum = __builtin_fmaf(E::one(w + S * i), E::one(a + S * i), sum);
  return sum;
}

// ---------------------------------------------------------------------------------------------
// Integer dot products without SDOT: int8 x int8 products widened to int16 (a pair of products
// summed by vmlal where both are above -16384 in size, i.e. weights above -128), then to int32.

template <bool kWide>
struct DotNeon {
  static inline int32_t sum(int8x16_t wl, int8x16_t wh, int8x16_t al, int8x16_t ah) {
    if constexpr (kWide) {
      int32x4_t s = vpaddlq_s16(vmull_s8(vget_low_s8(wl), vget_low_s8(al)));
      s = vpadalq_s16(s, vmull_high_s8(wl, al));
      s = vpadalq_s16(s, vmull_s8(vget_low_s8(wh), vget_low_s8(ah)));
      s = vpadalq_s16(s, vmull_high_s8(wh, ah));
      return vaddvq_s32(s);
    } else {
      const int16x8_t p0 = vmlal_s8(vmull_s8(vget_low_s8(wl), vget_low_s8(al)), vget_low_s8(wh), vget_low_s8(ah));
      const int16x8_t p1 = vmlal_high_s8(vmull_high_s8(wl, al), wh, ah);
      return vaddvq_s32(vpadalq_s16(vpaddlq_s16(p0), p1));
    }
  }
};

inline int tid(Type t) { return static_cast<int>(t); }

template <class D>
void set_int(KernelTable& t, Type type) {
  t.vec_dot[tid(type)] = vec_dot_q32<D, DotNeon<D::kWide>>;
  t.gemm[tid(type)] = gemm_q32<D, DotNeon<D::kWide>>;
}

}  // namespace

void fill_kernel_table_neon_q32(KernelTable& t) {
  t.quantize[tid(Type::Q8_0)] = quant_q8_0;
  t.quantize[tid(Type::Q8_1)] = quant_q8_1;
  t.quantize[tid(Type::Q8_K)] = quant_q8_K;
  t.quantize[tid(Type::F16)] = quant_f16;
  t.quantize[tid(Type::BF16)] = quant_bf16;
  t.vec_dot[tid(Type::F32)] = dot_float<F32Elems>;
  t.vec_dot[tid(Type::F16)] = dot_float<F16Elems>;
  t.vec_dot[tid(Type::BF16)] = dot_float<Bf16Elems>;
  set_int<DecQ4_0>(t, Type::Q4_0);
  set_int<DecQ4_1>(t, Type::Q4_1);
  set_int<DecQ5_0>(t, Type::Q5_0);
  set_int<DecQ5_1>(t, Type::Q5_1);
  set_int<DecQ8_0>(t, Type::Q8_0);
  set_int<DecIq4Nl>(t, Type::IQ4_NL);
}

}  // namespace les
