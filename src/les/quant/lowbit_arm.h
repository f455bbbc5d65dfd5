// Shared parts of the aarch64 kernels of TQ1_0, TQ2_0 (against Q8_K), MXFP4 and NVFP4 (against
// Q8_0): block decoders to signed bytes in the order of the activation bytes, the integer sums of
// each ISA, the per-block float steps, and the vec_dot / gemm drivers that fix the float order.
//
// Exactness: every block (NVFP4: every 16-element sub-block) gives one exact int32 sum, the
// scalar reference's integer; the way it is formed (SDOT, SMMLA, widening NEON products) never
// changes it. The floats are then updated per output in one fixed sequence:
//   TQ1_0, TQ2_0, MXFP4: acc[i % 2] = fma(float(sum_i), d_w * d_a, acc[i % 2]) for block i in
//     order, result acc[0] + acc[1];
//   NVFP4: lane s of a float32x4: acc[s] = fma(float(sum_is), d_w(s) * d_a, acc[s]) for
//     sub-block s of block i, blocks in order, result (acc[0] + acc[1]) + (acc[2] + acc[3]).
// Every gemm (here: 1 weight row x up to 4 activation rows; the i8mm file: 2 x 2 SMMLA tiles)
// evaluates exactly this sequence per output, so it equals the vec_dot of its table bit for bit.
// Written with explicit fma where one is meant: the project builds aarch64 with -ffp-contract=off.
//
// Internal: include only from kernels_lowbit_{neon,dotprod,i8mm}.cpp. Each includer is one
// translation unit of its own (never in a unity batch) compiled with its own -march, and
// everything here is file-local, so no copy built with +dotprod can stand in for a baseline one.
// SdotInts exists only where the file is built with dotprod.
#pragma once

#include <arm_neon.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels.h"
#include "les/quant/lowbit_scales.h"

namespace les {
namespace {
namespace lowbit_arm {

inline float load_half(const uint8_t* p) {
  __fp16 h;
  std::memcpy(&h, p, sizeof h);
  return static_cast<float>(h);
}
inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}
inline int8x16_t load_s8(const uint8_t* p) { return vld1q_s8(reinterpret_cast<const int8_t*>(p)); }

constexpr size_t kQ80d = offsetof(block_q8_0, d), kQ80qs = offsetof(block_q8_0, qs);
constexpr size_t kQ8Kd = offsetof(block_q8_K, d), kQ8Kqs = offsetof(block_q8_K, qs);

// ---------------------------------------------------------------------------------------------
// Decoders: one weight block as signed bytes in the order of the activation bytes.

// MXFP4: elements 0..15 (low nibbles) in lo, 16..31 (high nibbles) in hi; the E2M1 values
// (kFp4Values, doubled: -12..12) and the halved E8M0 scale.
struct Mxfp4 {
  static constexpr size_t kWBytes = sizeof(block_mxfp4), kABytes = sizeof(block_q8_0);
  static constexpr int64_t kBlock = QK_MXFP4;
  struct Weights {
    int8x16_t lo, hi;
    float d;
  };
  [[gnu::always_inline]] static void decode(const uint8_t* b, Weights& w) {
    const int8x16_t book = vld1q_s8(kFp4Values);
    const uint8x16_t q = vld1q_u8(b + offsetof(block_mxfp4, qs));
    w.lo = vqtbl1q_s8(book, vandq_u8(q, vdupq_n_u8(0x0f)));
    w.hi = vqtbl1q_s8(book, vshrq_n_u8(q, 4));
    w.d = e8m0_half_to_f32(b[offsetof(block_mxfp4, e)]);
  }
};

// NVFP4: v[s] = sub-block s (16 elements: the low nibbles of qs[8s .. 8s+7], then their high
// nibbles), against bytes 16 (s % 2) .. of Q8_0 block s / 2; the four halved UE4M3 scales as lanes.
struct Nvfp4 {
  static constexpr size_t kWBytes = sizeof(block_nvfp4), kABytes = 2 * sizeof(block_q8_0);
  static constexpr int64_t kBlock = QK_NVFP4;
  struct Weights {
    int8x16_t v[4];
    float32x4_t d;  // lane s: scale of sub-block s
    float ds[4];    // the same scales
  };
  [[gnu::always_inline]] static void decode(const uint8_t* b, Weights& w) {
    const int8x16_t book = vld1q_s8(kFp4Values);
    for (int h = 0; h < 2; ++h) {
      const uint8x16_t q = vld1q_u8(b + offsetof(block_nvfp4, qs) + 16 * h);
      const int8x16_t lo = vqtbl1q_s8(book, vandq_u8(q, vdupq_n_u8(0x0f)));  // [s lo, s+1 lo]
      const int8x16_t hi = vqtbl1q_s8(book, vshrq_n_u8(q, 4));               // [s hi, s+1 hi]
      w.v[2 * h] = vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(lo), vreinterpretq_s64_s8(hi)));
      w.v[2 * h + 1] = vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(lo), vreinterpretq_s64_s8(hi)));
    }
    for (int s = 0; s < 4; ++s) w.ds[s] = ue4m3_half_to_f32(b[offsetof(block_nvfp4, d) + s]);
    w.d = vld1q_f32(w.ds);
  }
};

// TQ1_0 / TQ2_0: v[j] = the digits minus 1 (-1..1; TQ2_0's code 3 is +2) of elements 16j .. 16j+15,
// and the fp16 scale.
struct TernaryWeights {
  int8x16_t v[16];
  float d;
};

// Digit minus 1 of each byte s (already multiplied by 3^k mod 256): the digit is (3 s) >> 8, i.e.
// 0 below 86, 2 from 171, so digit - 1 = [s >= 171] - [s < 86] (comparison masks are 0 / -1).
inline int8x16_t trit_m1(uint8x16_t s) {
  return vreinterpretq_s8_u8(vsubq_u8(vcltq_u8(s, vdupq_n_u8(86)), vcgeq_u8(s, vdupq_n_u8(171))));
}

// TQ1_0 element order (lowbit_ref.cpp): digit k of qs[m] (m < 32) is element 32k + m, digit k of
// qs[32 + m] element 160 + 16k + m, digit k (< 4) of qh[j] element 240 + 4k + j.
struct Tq1 {
  static constexpr size_t kWBytes = sizeof(block_tq1_0), kABytes = sizeof(block_q8_K);
  static constexpr int64_t kBlock = QK_K;
  using Weights = TernaryWeights;
  [[gnu::always_inline]] static void decode(const uint8_t* b, Weights& w) {
    static constexpr uint8_t kPow3[5] = {1, 3, 9, 27, 81};
    static constexpr uint8_t kQhPow3[16] = {1, 1, 1, 1, 3, 3, 3, 3, 9, 9, 9, 9, 27, 27, 27, 27};
    const uint8x16_t q0 = vld1q_u8(b), q1 = vld1q_u8(b + 16), q2 = vld1q_u8(b + 32);
    for (int k = 0; k < 5; ++k) {
      const uint8x16_t p = vdupq_n_u8(kPow3[k]);
      w.v[2 * k] = trit_m1(vmulq_u8(q0, p));
      w.v[2 * k + 1] = trit_m1(vmulq_u8(q1, p));
      w.v[10 + k] = trit_m1(vmulq_u8(q2, p));
    }
    uint32_t qh;
    std::memcpy(&qh, b + offsetof(block_tq1_0, qh), sizeof qh);
    w.v[15] = trit_m1(vmulq_u8(vreinterpretq_u8_u32(vdupq_n_u32(qh)), vld1q_u8(kQhPow3)));
    w.d = load_half(b + offsetof(block_tq1_0, d));
  }
};

// TQ2_0: bits 2k of qs[32h + 16p + l] are element 128h + 32k + 16p + l (vector 8h + 2k + p).
struct Tq2 {
  static constexpr size_t kWBytes = sizeof(block_tq2_0), kABytes = sizeof(block_q8_K);
  static constexpr int64_t kBlock = QK_K;
  using Weights = TernaryWeights;
  [[gnu::always_inline]] static void decode(const uint8_t* b, Weights& w) {
    const uint8x16_t three = vdupq_n_u8(3);
    const int8x16_t one = vdupq_n_s8(1);
    for (int h = 0; h < 2; ++h) {
      for (int p = 0; p < 2; ++p) {
        const uint8x16_t q = vld1q_u8(b + 32 * h + 16 * p);
        const uint8x16_t d[4] = {vandq_u8(q, three), vandq_u8(vshrq_n_u8(q, 2), three),
                                 vandq_u8(vshrq_n_u8(q, 4), three), vshrq_n_u8(q, 6)};
        for (int k = 0; k < 4; ++k) w.v[8 * h + 2 * k + p] = vsubq_s8(vreinterpretq_s8_u8(d[k]), one);
      }
    }
    w.d = load_half(b + offsetof(block_tq2_0, d));
  }
};

// ---------------------------------------------------------------------------------------------
// Integer sums. Each policy gives the exact sums of the scalar reference:
//   sum32(lo, hi, a)    32 products of weights |w| <= 12 against a[0..31]
//   sum16x4(v, a, b)    4 lanes: lanes 0, 1 the 16 products of v[0], v[1] and a[0..15], a[16..31],
//                       lanes 2, 3 those of v[2], v[3] and b[0..15], b[16..31]
//   sum256(v, a)        256 products of weights -1..2 against a[0..255]

// Without SDOT: products widened to int16 lanes (vmull / vmlal) against |a| <= 128, each lane
// holding at most 4 products of |w| <= 12 (|lane| <= 6144), 8 for sum16x4 after the pairwise adds
// (12288), or 16 products of |w| <= 2 per sum256 accumulator (4096; the two added: 8192), then
// widened to int32.
struct WideningInts {
  [[gnu::always_inline]] static int16x8_t mul16(int8x16_t w, int8x16_t a) {
    return vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a);
  }
  [[gnu::always_inline]] static int16x8_t mla16(int16x8_t p, int8x16_t w, int8x16_t a) {
    return vmlal_high_s8(vmlal_s8(p, vget_low_s8(w), vget_low_s8(a)), w, a);
  }
  [[gnu::always_inline]] static int32_t sum32(int8x16_t lo, int8x16_t hi, const uint8_t* a) {
    return vaddlvq_s16(mla16(mul16(lo, load_s8(a)), hi, load_s8(a + 16)));
  }
  [[gnu::always_inline]] static int32x4_t sum16x4(const int8x16_t (&v)[4], const uint8_t* a, const uint8_t* b) {
    const int16x8_t d[4] = {mul16(v[0], load_s8(a)), mul16(v[1], load_s8(a + 16)), mul16(v[2], load_s8(b)),
                            mul16(v[3], load_s8(b + 16))};
    return vpaddlq_s16(vpaddq_s16(vpaddq_s16(d[0], d[1]), vpaddq_s16(d[2], d[3])));
  }
  [[gnu::always_inline]] static int32_t sum256(const int8x16_t (&v)[16], const uint8_t* a) {
    int16x8_t acc[2] = {mul16(v[0], load_s8(a)), mul16(v[1], load_s8(a + 16))};
    for (int j = 2; j < 16; ++j) acc[j % 2] = mla16(acc[j % 2], v[j], load_s8(a + 16 * j));
    return vaddlvq_s16(vaddq_s16(acc[0], acc[1]));
  }
};

#if defined(__ARM_FEATURE_DOTPROD)
// SDOT: 4 products per int32 lane per instruction.
struct SdotInts {
  [[gnu::always_inline]] static int32_t sum32(int8x16_t lo, int8x16_t hi, const uint8_t* a) {
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), lo, load_s8(a)), hi, load_s8(a + 16)));
  }
  [[gnu::always_inline]] static int32x4_t sum16x4(const int8x16_t (&v)[4], const uint8_t* a, const uint8_t* b) {
    const int32x4_t z = vdupq_n_s32(0);
    const int32x4_t d[4] = {vdotq_s32(z, v[0], load_s8(a)), vdotq_s32(z, v[1], load_s8(a + 16)),
                            vdotq_s32(z, v[2], load_s8(b)), vdotq_s32(z, v[3], load_s8(b + 16))};
    return vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3]));
  }
  [[gnu::always_inline]] static int32_t sum256(const int8x16_t (&v)[16], const uint8_t* a) {
    int32x4_t acc[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int j = 0; j < 16; ++j) acc[j % 2] = vdotq_s32(acc[j % 2], v[j], load_s8(a + 16 * j));
    return vaddvq_s32(vaddq_s32(acc[0], acc[1]));
  }
};
#endif

// ---------------------------------------------------------------------------------------------
// Per-output float state and steps (the sequence of the header comment).

// TQ1_0, TQ2_0, MXFP4: even and odd blocks.
struct PairAcc {
  float s[2] = {0.0f, 0.0f};
  float result() const { return s[0] + s[1]; }
};
// NVFP4: one lane per sub-block.
struct LaneAcc {
  float32x4_t s = vdupq_n_f32(0.0f);
  float result() const {
    return (vgetq_lane_f32(s, 0) + vgetq_lane_f32(s, 1)) + (vgetq_lane_f32(s, 2) + vgetq_lane_f32(s, 3));
  }
};

// Block i of weights w (decoded) against its activation block(s) at a, into acc.
template <class Ints>
[[gnu::always_inline]] inline void step(PairAcc& acc, const Mxfp4::Weights& w, const uint8_t* a, int64_t i) {
  const int32_t sum = Ints::sum32(w.lo, w.hi, a + kQ80qs);
  const float d = w.d * load_half(a + kQ80d);
  acc.s[i & 1] = __builtin_fmaf(static_cast<float>(sum), d, acc.s[i & 1]);
}
template <class Ints>
[[gnu::always_inline]] inline void step(PairAcc& acc, const TernaryWeights& w, const uint8_t* a, int64_t i) {
  const int32_t sum = Ints::sum256(w.v, a + kQ8Kqs);
  const float d = w.d * load_f32(a + kQ8Kd);
  acc.s[i & 1] = __builtin_fmaf(static_cast<float>(sum), d, acc.s[i & 1]);
}
// NVFP4: sub-blocks 0, 1 against Q8_0 block a, 2, 3 against the next; lanes' activation scales
// [d_a0, d_a0, d_a1, d_a1].
template <class Ints>
[[gnu::always_inline]] inline void step(LaneAcc& acc, const Nvfp4::Weights& w, const uint8_t* a, int64_t) {
  const uint8_t* a1 = a + sizeof(block_q8_0);
  const int32x4_t sum = Ints::sum16x4(w.v, a + kQ80qs, a1 + kQ80qs);
  const float32x4_t da = vcombine_f32(vdup_n_f32(load_half(a + kQ80d)), vdup_n_f32(load_half(a1 + kQ80d)));
  acc.s = vfmaq_f32(acc.s, vcvtq_f32_s32(sum), vmulq_f32(w.d, da));
}

// ---------------------------------------------------------------------------------------------
// Drivers.

// One weight row (nb blocks of K at w) against NC activation rows (a_stride bytes apart): each
// weight block decoded once for the NC outputs; out[c] = the vec_dot of activation row c.
template <class K, class Acc, class Ints, int NC>
inline void row_tile(int64_t nb, const uint8_t* w, const uint8_t* a, size_t a_stride, float* out, int64_t out_stride) {
  Acc acc[NC];
  for (int64_t i = 0; i < nb; ++i) {
    typename K::Weights wd;
    K::decode(w + static_cast<size_t>(i) * K::kWBytes, wd);
    for (int c = 0; c < NC; ++c) {
      step<Ints>(acc[c], wd, a + static_cast<size_t>(c) * a_stride + static_cast<size_t>(i) * K::kABytes, i);
    }
  }
  for (int c = 0; c < NC; ++c) out[c * out_stride] = acc[c].result();
}

template <class K, class Acc, class Ints>
float vec_dot(int64_t n, const void* w, const void* a) {
  float y;
  row_tile<K, Acc, Ints, 1>(n / K::kBlock, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a), 0, &y, 0);
  return y;
}

// Weight row w against activation rows 0 .. nc-1 into y[c * y_stride], up to 4 at a time.
template <class K, class Acc, class Ints>
inline void row_times_cols(int64_t nb, const uint8_t* w, const uint8_t* a, size_t a_stride, int64_t nc, float* y,
                           int64_t y_stride) {
  int64_t c = 0;
  for (; c + 4 <= nc; c += 4) {
    row_tile<K, Acc, Ints, 4>(nb, w, a + static_cast<size_t>(c) * a_stride, a_stride, y + c * y_stride, y_stride);
  }
  const uint8_t* ac = a + static_cast<size_t>(c) * a_stride;
  float* yc = y + c * y_stride;
  switch (nc - c) {
    case 3: row_tile<K, Acc, Ints, 3>(nb, w, ac, a_stride, yc, y_stride); break;
    case 2: row_tile<K, Acc, Ints, 2>(nb, w, ac, a_stride, yc, y_stride); break;
    case 1: row_tile<K, Acc, Ints, 1>(nb, w, ac, a_stride, yc, y_stride); break;
    default: break;
  }
}

// GemmFn of 1 weight row x up to 4 activation rows.
template <class K, class Acc, class Ints>
void gemm(int64_t n, const void* w, size_t w_stride, int64_t nr, const void* a, size_t a_stride, int64_t nc, float* y,
          int64_t y_stride) {
  for (int64_t r = 0; r < nr; ++r) {
    row_times_cols<K, Acc, Ints>(n / K::kBlock, static_cast<const uint8_t*>(w) + static_cast<size_t>(r) * w_stride,
                                 static_cast<const uint8_t*>(a), a_stride, nc, y + r, y_stride);
  }
}

inline int tid(Type t) { return static_cast<int>(t); }

// The vec_dot and gemm entries of the four types with integer sums Ints.
template <class Ints>
void set_all(KernelTable& t) {
  t.vec_dot[tid(Type::MXFP4)] = vec_dot<Mxfp4, PairAcc, Ints>;
  t.gemm[tid(Type::MXFP4)] = gemm<Mxfp4, PairAcc, Ints>;
  t.vec_dot[tid(Type::NVFP4)] = vec_dot<Nvfp4, LaneAcc, Ints>;
  t.gemm[tid(Type::NVFP4)] = gemm<Nvfp4, LaneAcc, Ints>;
  t.vec_dot[tid(Type::TQ1_0)] = vec_dot<Tq1, PairAcc, Ints>;
  t.gemm[tid(Type::TQ1_0)] = gemm<Tq1, PairAcc, Ints>;
  t.vec_dot[tid(Type::TQ2_0)] = vec_dot<Tq2, PairAcc, Ints>;
  t.gemm[tid(Type::TQ2_0)] = gemm<Tq2, PairAcc, Ints>;
}

}  // namespace lowbit_arm
}  // namespace
}  // namespace les
