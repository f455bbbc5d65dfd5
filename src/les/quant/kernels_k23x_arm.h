// Shared parts of the aarch64 kernels of the k23x family (Q2_K, Q3_K, IQ4_XS weights against
// Q8_K activations): block decoders, the per-block float update, and the row-tile loops.
//
// Exactness: every kernel forms, per 256-element block and per output, the exact integer sums the
// scalar reference forms (the block's whole scaled sum, and for Q2_K the min correction), so the
// way the integers are computed (SDOT, SMMLA, widening NEON products) never changes a result.
// The floats are then updated per block in one fixed sequence (finish / the lane-wise version of
// it in the i8mm file): a gemm of any tile shape reproduces the vec_dot of the same ISA bit for bit.
// That sequence is written as separate multiplies and adds in places: it relies on the project's
// -ffp-contract=off on aarch64 (CMakeLists.txt), which keeps GCC from fusing some of them into FMAs
// in one file and not in another.
//
// Everything is in an anonymous namespace: each ISA's translation unit compiles its own copy for
// its own -march, so no function built with +dotprod/+i8mm can stand in for a baseline one.
// The SDOT integer sums are only visible where the translation unit is built with dotprod.
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"

namespace les {
namespace {

// Marks the lambdas of static_for: their bodies are unrolled kernel code, never calls.
#define LES_K23X_INLINE __attribute__((always_inline))

// Calls f(std::integral_constant<int, I>) for I = 0 .. N-1 (lane numbers and shifts of NEON
// intrinsics must be compile-time constants).
template <int N, class F>
[[gnu::always_inline]] inline void static_for(F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) LES_K23X_INLINE { (f(std::integral_constant<int, I>{}), ...); }(
      std::make_integer_sequence<int, N>{});
}

inline float half_to_float(uint16_t h) {
  __fp16 f;
  std::memcpy(&f, &h, sizeof f);
  return static_cast<float>(f);
}

inline int8x16_t load_s8(const int8_t* p) { return vld1q_s8(p); }

// sum over the 16 sub-blocks of v[g] * bsums[g] (v: two int16x8 halves), as 4 int32 lanes.
[[gnu::always_inline]] inline int32x4_t dot_bsums(const int16x8_t (&v)[2], const block_q8_K_u& a) {
  const int16x8_t bs0 = vld1q_s16(a.bsums), bs1 = vld1q_s16(a.bsums + 8);
  int32x4_t t = vmull_s16(vget_low_s16(v[0]), vget_low_s16(bs0));
  t = vmlal_high_s16(t, v[0], bs0);
  t = vmlal_s16(t, vget_low_s16(v[1]), vget_low_s16(bs1));
  return vmlal_high_s16(t, v[1], bs1);
}

// Q2_K. Sub-block g (elements 16g .. 16g+15) = 8h + 2k + s holds the bits 2k of
// qs[32h + 16s .. 32h + 16s + 15]. Decoded: q[g] = value * (scales[g] & 15) (0 .. 45, so int8
// products need no per-sub-block accumulator), mins = scales >> 4 widened to int16.
struct Q2K {
  using Block = block_q2_K_u;
  struct Weights {
    int8x16_t q[16];
    int16x8_t mins[2];
    float d, dmin;
  };
  struct Sums {
    int32_t isum;   // sum over elements of a * q * scale
    int32_t summs;  // sum over sub-blocks of bsums * min
  };

  [[gnu::always_inline]] static void decode(const Block& b, Weights& w) {
    const uint8x16_t packed = vld1q_u8(b.scales);
    const uint8x16_t scales = vandq_u8(packed, vdupq_n_u8(0x0f));
    const uint8x16_t mins = vshrq_n_u8(packed, 4);
    w.mins[0] = vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(mins)));
    w.mins[1] = vreinterpretq_s16_u16(vmovl_high_u8(mins));
    const uint8x16_t three = vdupq_n_u8(3);
    static_for<4>([&](auto hs_) LES_K23X_INLINE {
      constexpr int hs = decltype(hs_)::value, h = hs / 2, s = hs % 2;
      const uint8x16_t bits = vld1q_u8(b.qs + 16 * hs);
      static_for<4>([&](auto k_) LES_K23X_INLINE {
        constexpr int k = decltype(k_)::value, g = 8 * h + 2 * k + s;
        uint8x16_t v;
        if constexpr (k == 0) {
          v = vandq_u8(bits, three);
        } else if constexpr (k == 3) {
          v = vshrq_n_u8(bits, 6);
        } else {
          v = vandq_u8(vshrq_n_u8(bits, 2 * k), three);
        }
        w.q[g] = vreinterpretq_s8_u8(vmulq_u8(v, vdupq_laneq_u8(scales, g)));
      });
    });
    w.d = half_to_float(b.d);
    w.dmin = half_to_float(b.dmin);
  }

  // sum over sub-blocks of bsums * min, for one weight block and one activation block.
  [[gnu::always_inline]] static int32x4_t min_products(const Weights& w, const block_q8_K_u& a) {
    return dot_bsums(w.mins, a);
  }

  // The per-block float update (the scalar reference's order); i8mm does it lane-wise.
  [[gnu::always_inline]] static float finish(float acc, const Weights& w, float ad, Sums s) {
    const float dall = ad * w.d;
    const float dmin = ad * w.dmin;
    return acc + (dall * static_cast<float>(s.isum) - dmin * static_cast<float>(s.summs));
  }
};

// Per-lane shifts that move the 2 high bits of Q3_K scale g (bits 2 (g / 4) of byte g % 4) to bits 4, 5.
inline constexpr int8_t kQ3kHighShift[16] = {4, 4, 4, 4, 2, 2, 2, 2, 0, 0, 0, 0, -2, -2, -2, -2};

// Q3_K. Sub-blocks as Q2_K; the third bit of sub-block g = 8h + 2k + s is bit 4h + k of
// hmask[16s .. 16s + 15]. Decoded as u = q + 4 in 0 .. 7 (so a * q sums become
// a * u - 4 * bsums), the 6-bit signed scales as int32 lanes and -4 * scale as int16.
struct Q3K {
  using Block = block_q3_K_u;
  struct Weights {
    int8x16_t u[16];
    int32x4_t scales[4];         // scales[q] lane j: scale of sub-block 4q + j
    int16x8_t scales_x_m4[2];    // -4 * scale of sub-blocks 0..7, 8..15
    float d;
  };
  using Sums = int32_t;  // sum over elements of a * q * scale

  [[gnu::always_inline]] static void decode(const Block& b, Weights& w) {
    const uint8x16_t high[2] = {vld1q_u8(b.hmask), vld1q_u8(b.hmask + 16)};
    const uint8x16_t seven = vdupq_n_u8(7);
    static_for<4>([&](auto hs_) LES_K23X_INLINE {
      constexpr int hs = decltype(hs_)::value, h = hs / 2, s = hs % 2;
      const uint8x16_t bits = vld1q_u8(b.qs + 16 * hs);
      static_for<4>([&](auto k_) LES_K23X_INLINE {
        constexpr int k = decltype(k_)::value, g = 8 * h + 2 * k + s, j = 4 * h + k;
        uint8x16_t low = bits, hb = high[s];
        if constexpr (k != 0) low = vshrq_n_u8(bits, 2 * k);
        if constexpr (j != 0) hb = vshrq_n_u8(high[s], j);
        w.u[g] = vreinterpretq_s8_u8(vandq_u8(vsliq_n_u8(low, hb, 2), seven));  // hb bit 0 -> bit 2
      });
    });
    // scale g: low nibble of scales[g % 8] (high nibble for g >= 8), bits 2 (g / 4) of
    // scales[8 + g % 4] as bits 4, 5; minus 32.
    const uint8x8_t lo8 = vld1_u8(b.scales);
    uint32_t hi_bytes;
    std::memcpy(&hi_bytes, b.scales + 8, sizeof hi_bytes);
    const uint8x16_t low4 = vcombine_u8(vand_u8(lo8, vdup_n_u8(0x0f)), vshr_n_u8(lo8, 4));
    const uint8x16_t high2 = vandq_u8(vshlq_u8(vreinterpretq_u8_u32(vdupq_n_u32(hi_bytes)), vld1q_s8(kQ3kHighShift)),
                                      vdupq_n_u8(0x30));
    const int8x16_t sc = vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(low4, high2)), vdupq_n_s8(32));
    const int16x8_t sc16[2] = {vmovl_s8(vget_low_s8(sc)), vmovl_high_s8(sc)};
    w.scales[0] = vmovl_s16(vget_low_s16(sc16[0]));
    w.scales[1] = vmovl_high_s16(sc16[0]);
    w.scales[2] = vmovl_s16(vget_low_s16(sc16[1]));
    w.scales[3] = vmovl_high_s16(sc16[1]);
    w.scales_x_m4[0] = vmulq_n_s16(sc16[0], -4);
    w.scales_x_m4[1] = vmulq_n_s16(sc16[1], -4);
    w.d = half_to_float(b.d);
  }

  // -4 * sum over sub-blocks of scale * bsums: the offset of the u = q + 4 encoding.
  [[gnu::always_inline]] static int32x4_t offset(const Weights& w, const block_q8_K_u& a) {
    return dot_bsums(w.scales_x_m4, a);
  }

  [[gnu::always_inline]] static float finish(float acc, const Weights& w, float ad, Sums s) {
    return acc + (w.d * ad) * static_cast<float>(s);
  }
};

// IQ4_XS scales from the block's first 16 bytes: byte lane ib takes scales_l[ib / 2] (offset 4),
// lane 8 + ib takes the byte of scales_h (offset 2) holding bits 2ib, 2ib+1; per-lane shifts and
// masks then leave the 4 low bits in lane ib and the 2 high bits, as bits 4 and 5, in lane 8 + ib.
inline constexpr uint8_t kIq4xsScaleBytes[16] = {4, 4, 5, 5, 6, 6, 7, 7, 2, 2, 2, 2, 3, 3, 3, 3};
inline constexpr int8_t kIq4xsScaleShift[16] = {0, -4, 0, -4, 0, -4, 0, -4, 4, 2, 0, -2, 4, 2, 0, -2};
inline constexpr uint8_t kIq4xsScaleMask[16] = {15, 15, 15, 15, 15, 15, 15, 15, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30};
static_assert(offsetof(block_iq4_xs, scales_h) == 2 && offsetof(block_iq4_xs, scales_l) == 4);

// IQ4_XS. Sub-block ib (32 elements): codes in qs[16ib .. 16ib+15], low nibbles first. Decoded:
// q[2ib], q[2ib+1] = the codebook values of the low and high nibbles; scales ls - 32 as int32.
struct IQ4XS {
  using Block = block_iq4_xs_u;
  struct Weights {
    int8x16_t q[16];
    int32x4_t scales[2];  // scales[q] lane j: scale of sub-block 4q + j
    float d;
  };
  using Sums = int32_t;  // sum over sub-blocks of (ls - 32) * sum of a * value

  [[gnu::always_inline]] static void decode(const Block& b, Weights& w) {
    const int8x16_t values = vld1q_s8(kIq4nlValues);
    static_for<8>([&](auto ib) LES_K23X_INLINE {
      const uint8x16_t codes = vld1q_u8(b.qs + 16 * ib);
      w.q[2 * ib] = vqtbl1q_s8(values, vandq_u8(codes, vdupq_n_u8(0x0f)));
      w.q[2 * ib + 1] = vqtbl1q_s8(values, vshrq_n_u8(codes, 4));
    });
    // ls of sub-block ib: nibble ib of scales_l | bits 2ib, 2ib+1 of scales_h as bits 4, 5. The
    // first 16 bytes of the block (d, scales_h, scales_l, qs) are spread so that byte lane ib
    // holds the low part and lane 8 + ib the high part, shifted and masked in place.
    const uint8x16_t head = vld1q_u8(reinterpret_cast<const uint8_t*>(&b));
    const uint8x16_t parts = vandq_u8(vshlq_u8(vqtbl1q_u8(head, vld1q_u8(kIq4xsScaleBytes)), vld1q_s8(kIq4xsScaleShift)),
                                      vld1q_u8(kIq4xsScaleMask));
    const uint8x8_t ls = vorr_u8(vget_low_u8(parts), vget_high_u8(parts));
    const int16x8_t scales16 = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(ls)), vdupq_n_s16(32));
    w.scales[0] = vmovl_s16(vget_low_s16(scales16));
    w.scales[1] = vmovl_high_s16(scales16);
    w.d = half_to_float(b.d);
  }

  [[gnu::always_inline]] static float finish(float acc, const Weights& w, float ad, Sums s) {
    return acc + (w.d * ad) * static_cast<float>(s);
  }
};

// One weight row against NC activation rows (a_stride bytes apart): each weight block is decoded
// once and used for all NC; out[c] = the vec_dot of row c.
template <class T, class Ints, int NC>
inline void dot_tile(int64_t nb, const typename T::Block* w, const uint8_t* a, size_t a_stride, float* out) {
  float acc[NC] = {};
  for (int64_t i = 0; i < nb; ++i) {
    typename T::Weights wd;
    T::decode(w[i], wd);
    static_for<NC>([&](auto c) LES_K23X_INLINE {
      const block_q8_K_u& ab = reinterpret_cast<const block_q8_K_u*>(a + c * a_stride)[i];
      acc[c] = T::finish(acc[c], wd, ab.d, Ints::sums(wd, ab));
    });
  }
  for (int c = 0; c < NC; ++c) out[c] = acc[c];
}

template <class T, class Ints>
float vec_dot_rows(int64_t n, const void* w, const void* a) {
  float r;
  dot_tile<T, Ints, 1>(n / QK_K, static_cast<const typename T::Block*>(w), static_cast<const uint8_t*>(a), 0, &r);
  return r;
}

// Weight row r against activation rows c0 .. c0+nc-1 (nc <= 4) into y[(c0 + c) * y_stride + r].
template <class T, class Ints>
inline void dot_row_tiles(int64_t n, const uint8_t* wrow, const uint8_t* a, size_t a_stride, int64_t nc,
                          float* y, int64_t y_stride) {
  const auto* w = reinterpret_cast<const typename T::Block*>(wrow);
  for (int64_t c = 0; c < nc; c += 4) {
    float out[4];
    const uint8_t* ac = a + static_cast<size_t>(c) * a_stride;
    const int64_t m = std::min<int64_t>(4, nc - c);
    switch (m) {
      case 4: dot_tile<T, Ints, 4>(n / QK_K, w, ac, a_stride, out); break;
      case 3: dot_tile<T, Ints, 3>(n / QK_K, w, ac, a_stride, out); break;
      case 2: dot_tile<T, Ints, 2>(n / QK_K, w, ac, a_stride, out); break;
      default: dot_tile<T, Ints, 1>(n / QK_K, w, ac, a_stride, out); break;
    }
    for (int64_t j = 0; j < m; ++j) y[(c + j) * y_stride] = out[j];
  }
}

// The gemm of 1-row x up-to-4-activation-row tiles (see GemmFn).
template <class T, class Ints>
void gemm_rows_tiled(int64_t n, const void* w, size_t w_stride, int64_t nr, const void* a, size_t a_stride,
                     int64_t nc, float* y, int64_t y_stride) {
  for (int64_t r = 0; r < nr; ++r) {
    dot_row_tiles<T, Ints>(n, static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * w_stride,
                           static_cast<const uint8_t*>(a), a_stride, nc, y + r, y_stride);
  }
}

#if defined(__ARM_FEATURE_DOTPROD)
// Integer sums with SDOT (16 products of 4 int8 pairs per instruction).
struct SdotInts {
  [[gnu::always_inline]] static Q2K::Sums sums(const Q2K::Weights& w, const block_q8_K_u& a) {
    int32x4_t acc[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
    static_for<16>([&](auto g) LES_K23X_INLINE { acc[g % 2] = vdotq_s32(acc[g % 2], w.q[g], load_s8(a.qs + 16 * g)); });
    return {vaddvq_s32(vaddq_s32(acc[0], acc[1])), vaddvq_s32(Q2K::min_products(w, a))};
  }

  // Sub-blocks 4q .. 4q+3 of 16: their 4 dot products as the lanes of one vector.
  [[gnu::always_inline]] static int32x4_t sub16x4(const int8x16_t* w, const int8_t* a) {
    int32x4_t d[4];
    static_for<4>([&](auto j) LES_K23X_INLINE { d[j] = vdotq_s32(vdupq_n_s32(0), w[j], load_s8(a + 16 * j)); });
    return vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3]));
  }

  [[gnu::always_inline]] static Q3K::Sums sums(const Q3K::Weights& w, const block_q8_K_u& a) {
    int32x4_t t = Q3K::offset(w, a);
    static_for<4>([&](auto q) LES_K23X_INLINE { t = vmlaq_s32(t, sub16x4(w.u + 4 * q, a.qs + 64 * q), w.scales[q]); });
    return vaddvq_s32(t);
  }

  // Sub-blocks 4q .. 4q+3 of 32.
  [[gnu::always_inline]] static int32x4_t sub32x4(const int8x16_t* w, const int8_t* a) {
    int32x4_t d[4];
    static_for<4>([&](auto j) LES_K23X_INLINE {
      d[j] = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w[2 * j], load_s8(a + 32 * j)), w[2 * j + 1],
                       load_s8(a + 32 * j + 16));
    });
    return vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3]));
  }

  [[gnu::always_inline]] static IQ4XS::Sums sums(const IQ4XS::Weights& w, const block_q8_K_u& a) {
    int32x4_t t = vmulq_s32(sub32x4(w.q, a.qs), w.scales[0]);
    t = vmlaq_s32(t, sub32x4(w.q + 8, a.qs + 128), w.scales[1]);
    return vaddvq_s32(t);
  }
};
#endif

}  // namespace
}  // namespace les
