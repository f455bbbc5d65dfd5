// Shared pieces of the aarch64 kernels of Q4_K, Q5_K and Q6_K (x Q8_K activations): weight
// decoding, scale unpacking, and (where the including file is compiled with +dotprod) the SDOT
// tile that kernels_k456_dotprod.cpp uses as vec_dot and gemm and kernels_k456_i8mm.cpp uses for
// the edges of its SMMLA tiles. Include only from kernels_k456_{neon,dotprod,i8mm}.cpp: all of it
// has internal linkage, so each ISA file gets its own copy compiled with its own -march (no
// +dotprod code can reach the neon file through the ODR).
//
// Exactness: every integer sum is exact in int32 (the scalar reference's integers). The float
// order of one output, fixed here and reproduced by the i8mm tiles lane by lane:
//   Q4_K/Q5_K, per block: acc_d = fma(xd * yd, float(sumi), acc_d);
//                         acc_m = fma(xdmin * yd, float(summ), acc_m);    result acc_d - acc_m
//   Q6_K, per block:      acc_d = fma(xd * yd, float(sumi), acc_d);       result acc_d
// sumi = sum over sub-blocks of scale * (weights . activations), summ = sum of min * bsums.
#pragma once

#include <arm_neon.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"

namespace les {
namespace {
namespace k456 {

constexpr size_t kQ8K_d = offsetof(block_q8_K, d);
constexpr size_t kQ8K_qs = offsetof(block_q8_K, qs);
constexpr size_t kQ8K_bsums = offsetof(block_q8_K, bsums);
static_assert(offsetof(block_q4_K, dmin) == offsetof(block_q4_K, d) + 2 &&
              offsetof(block_q5_K, dmin) == offsetof(block_q5_K, d) + 2, "d and dmin are read as one pair");
// 16 bytes are read at the scales (12 used): the block goes on after them.
static_assert(offsetof(block_q4_K, scales) + 16 <= sizeof(block_q4_K) &&
              offsetof(block_q6_K, scales) + 16 <= sizeof(block_q6_K), "scale loads stay in the block");

inline float ld_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}
inline uint32_t ld_u32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}
inline uint16_t ld_u16(const uint8_t* p) {
  uint16_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}
inline uint8x16_t ld(const uint8_t* p) { return vld1q_u8(p); }
inline int8x16_t lds(const uint8_t* p) { return vreinterpretq_s8_u8(vld1q_u8(p)); }
inline int16x8_t ld16(const uint8_t* p) { return vreinterpretq_s16_u8(vld1q_u8(p)); }

// The fp16 pair (d, dmin) at p as floats (exact, subnormals included).
inline float32x2_t f16_pair(const uint8_t* p) {
  return vget_low_f32(vcvt_f32_f16(vreinterpret_f16_u32(vdup_n_u32(ld_u32(p)))));
}
inline float f16_one(const uint8_t* p) {
  return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(ld_u16(p)))), 0);
}

// Q4_K/Q5_K: 12 bytes of 6-bit scales and mins -> sc0..7, m0..7. As dwords D0 D1 D2:
// sc0-3 = D0 & 0x3f, sc4-7 = (D2 & 0x0f) | (D0 >> 6 & 3) << 4,
// m0-3 = D1 & 0x3f,  m4-7 = (D2 >> 4 & 0x0f) | (D1 >> 6 & 3) << 4.
struct ScalesMins {
  uint8x8_t sc, mn;
};
inline ScalesMins scales_mins_k4(const uint8_t* p) {
  const uint8x16_t v = ld(p);
  const uint8x8_t d01 = vget_low_u8(v);
  const uint32x2_t d2 = vdup_laneq_u32(vreinterpretq_u32_u8(v), 2);
  const int32x2_t nib_shift = {0, -4};
  const uint8x8_t d2_nibs = vreinterpret_u8_u32(vshl_u32(d2, nib_shift));  // low nibbles: D2, D2 >> 4
  const uint8x8_t lo = vand_u8(d01, vdup_n_u8(0x3f));
  // bits 0-3 from D2's nibbles, bits 4-5 from bits 6-7 of D0 / D1 (bits 6-7 come out zero)
  const uint8x8_t hi = vbsl_u8(vdup_n_u8(0x0f), d2_nibs, vshr_n_u8(d01, 2));
  const uint32x2_t lo32 = vreinterpret_u32_u8(lo), hi32 = vreinterpret_u32_u8(hi);
  return {vreinterpret_u8_u32(vzip1_u32(lo32, hi32)), vreinterpret_u8_u32(vzip2_u32(lo32, hi32))};
}

// sum over the 8 sub-blocks of 32 of mins[j] * (bsums[2j] + bsums[2j+1]), in 4 int32 lanes.
inline int32x4_t mins_dot_bsums(int16x8_t mins, const uint8_t* bsums) {
  const int16x8_t sub = vpaddq_s16(ld16(bsums), ld16(bsums + 16));  // |.| <= 4096
  return vmlal_high_s16(vmull_s16(vget_low_s16(sub), vget_low_s16(mins)), sub, mins);
}

// Q6_K: -32 * scale as int16 (|.| <= 4096) for the two halves of the 16 scales.
struct Q6Scales {
  int16x8_t lo, hi;
};
// sum over the 16 groups of -32 * scales[g] * bsums[g] (the -32 offset of every Q6_K value), in
// 4 int32 lanes: |.| <= 16 * 4096 * 2048.
inline int32x4_t q6k_offset_sum(const Q6Scales& m32, const uint8_t* bsums) {
  const int16x8_t b0 = ld16(bsums), b1 = ld16(bsums + 16);
  int32x4_t s = vmull_s16(vget_low_s16(b0), vget_low_s16(m32.lo));
  s = vmlal_high_s16(s, b0, m32.lo);
  s = vmlal_s16(s, vget_low_s16(b1), vget_low_s16(m32.hi));
  return vmlal_high_s16(s, b1, m32.hi);
}
inline Q6Scales q6k_minus32_scales(int8x16_t sc) {
  const int16x8_t m32 = vdupq_n_s16(-32);
  return {vmulq_s16(vmovl_s8(vget_low_s8(sc)), m32), vmulq_s16(vmovl_high_s8(sc), m32)};
}

// Weights of chunk K (64 elements, sub-blocks 2K, 2K+1) of a Q4_K/Q5_K block as unsigned bytes,
// from the packed bytes b0, b1 (qs[32K + l]) and, for Q5_K, the qh bytes of the same l (qh0, qh1):
// q[0], q[1]: low nibbles (elements 64K + l), q[2], q[3]: high nibbles (64K + 32 + l).
// Bytewise, so the registers may hold any selection of l (e.g. two rows interleaved).
template <bool kQ5, int K>
inline void decode_q45(uint8x16_t b0, uint8x16_t b1, uint8x16_t qh0, uint8x16_t qh1, int8x16_t q[4]) {
  const uint8x16_t m4 = vdupq_n_u8(0x0f);
  if constexpr (kQ5) {
    // 5th bit of the low-nibble elements is bit 2K of qh, of the high-nibble ones bit 2K+1:
    // moved to bit 4 (shl 7-k then shr 3 leaves bits 5-7 zero), the nibble inserted below it.
    const uint8x16_t h0 = vshrq_n_u8(vshlq_n_u8(qh0, 7 - 2 * K), 3), h1 = vshrq_n_u8(vshlq_n_u8(qh1, 7 - 2 * K), 3);
    const uint8x16_t g0 = vshrq_n_u8(vshlq_n_u8(qh0, 6 - 2 * K), 3), g1 = vshrq_n_u8(vshlq_n_u8(qh1, 6 - 2 * K), 3);
    q[0] = vreinterpretq_s8_u8(vbslq_u8(m4, b0, h0));
    q[1] = vreinterpretq_s8_u8(vbslq_u8(m4, b1, h1));
    q[2] = vreinterpretq_s8_u8(vsriq_n_u8(g0, b0, 4));
    q[3] = vreinterpretq_s8_u8(vsriq_n_u8(g1, b1, 4));
  } else {
    (void)qh0;
    (void)qh1;
    q[0] = vreinterpretq_s8_u8(vandq_u8(b0, m4));
    q[1] = vreinterpretq_s8_u8(vandq_u8(b1, m4));
    q[2] = vreinterpretq_s8_u8(vshrq_n_u8(b0, 4));
    q[3] = vreinterpretq_s8_u8(vshrq_n_u8(b1, 4));
  }
}
// The same from one block's qs (q[0], q[1]: elements 64K + 0..15, 16..31) and qh registers.
template <bool kQ5, int K>
inline void decode_q45_chunk(const uint8_t* qs, uint8x16_t qh0, uint8x16_t qh1, int8x16_t q[4]) {
  decode_q45<kQ5, K>(ld(qs + 32 * K), ld(qs + 32 * K + 16), qh0, qh1, q);
}

// Q6_K, half H (elements 128H .. 128H+127), chunk K (32 elements, groups 8H+2K, 8H+2K+1) as
// unsigned 6-bit bytes (the -32 comes off through q6k_offset_sum). l[0..3]: ql[64H .. 64H+63],
// h[0..1]: qh[32H .. 32H+31]. Low 4 bits: nibble K/2 of ql[64H + 32(K&1) + l], bits 4-5: bits
// 2K, 2K+1 of qh[32H + l]. Bytewise, as decode_q45.
template <int K>
inline void decode_q6_chunk(const uint8x16_t l[4], const uint8x16_t h[2], int8x16_t q[2]) {
  const uint8x16_t m63 = vdupq_n_u8(0x3f);
  for (int r = 0; r < 2; ++r) {
    const uint8x16_t lb = l[2 * (K & 1) + r];
    uint8x16_t v;
    if constexpr (K == 0) {
      v = vandq_u8(vsliq_n_u8(lb, h[r], 4), m63);
    } else if constexpr (K == 1) {
      v = vandq_u8(vsliq_n_u8(lb, vshrq_n_u8(h[r], 2), 4), m63);
    } else if constexpr (K == 2) {
      v = vsriq_n_u8(vandq_u8(h[r], vdupq_n_u8(0x30)), lb, 4);
    } else {
      v = vsriq_n_u8(vshrq_n_u8(h[r], 2), lb, 4);
    }
    q[r] = vreinterpretq_s8_u8(v);
  }
}

// The float step of a Q4_K/Q5_K output for one block (see the top): acc = {acc_d, acc_m},
// dd = {xd * yd, xdmin * yd}, sums = {sumi, summ}.
inline float32x2_t accumulate(float32x2_t acc, float32x2_t dd, int32x2_t sums) {
  return vfma_f32(acc, dd, vcvt_f32_s32(sums));
}
inline float result(float32x2_t acc) { return vget_lane_f32(acc, 0) - vget_lane_f32(acc, 1); }

#if defined(__ARM_FEATURE_DOTPROD)

// SDOT tiles: one weight row x NC (1..4) activation rows. Each weight block is decoded once per
// chunk and reused for the NC rows; vec_dot is the 1 x 1 tile. out[c] = dot with row c.

template <bool kQ5, int K, int NC>
inline void q45_chunk_sdot(const uint8_t* qs, uint8x16_t qh0, uint8x16_t qh1, const uint8_t* const y[NC],
                           int32x4_t sc_lo, int32x4_t sc_hi, int32x4_t sumi[NC]) {
  int8x16_t q[4];
  decode_q45_chunk<kQ5, K>(qs, qh0, qh1, q);
  for (int c = 0; c < NC; ++c) {
    const uint8_t* yc = y[c] + 64 * K;
    int32x4_t d0 = vdotq_s32(vdupq_n_s32(0), q[0], lds(yc));
    int32x4_t d1 = vdotq_s32(vdupq_n_s32(0), q[2], lds(yc + 32));
    d0 = vdotq_s32(d0, q[1], lds(yc + 16));
    d1 = vdotq_s32(d1, q[3], lds(yc + 48));
    const int32x4_t sc = K < 2 ? sc_lo : sc_hi;
    sumi[c] = vmlaq_laneq_s32(sumi[c], d0, sc, (2 * K) % 4);
    sumi[c] = vmlaq_laneq_s32(sumi[c], d1, sc, (2 * K + 1) % 4);
  }
}

template <bool kQ5, int NC>
void q45_tile_sdot(int64_t nb, const uint8_t* w, const uint8_t* a, size_t a_stride, float* out) {
  constexpr size_t kBytes = kQ5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  constexpr size_t kQs = kQ5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
  float32x2_t acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = vdup_n_f32(0.0f);
  for (int64_t i = 0; i < nb; ++i, w += kBytes, a += sizeof(block_q8_K)) {
    const ScalesMins sm = scales_mins_k4(w + offsetof(block_q4_K, scales));
    const uint16x8_t sc16 = vmovl_u8(sm.sc);
    const int32x4_t sc_lo = vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(sc16)));
    const int32x4_t sc_hi = vreinterpretq_s32_u32(vmovl_high_u16(sc16));
    const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(sm.mn));
    const float32x2_t wd = f16_pair(w);
    uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
    if constexpr (kQ5) {
      qh0 = ld(w + offsetof(block_q5_K, qh));
      qh1 = ld(w + offsetof(block_q5_K, qh) + 16);
    }
    const uint8_t* y[NC];
    int32x4_t sumi[NC];
    for (int c = 0; c < NC; ++c) {
      y[c] = a + c * a_stride + kQ8K_qs;
      sumi[c] = vdupq_n_s32(0);
    }
    const uint8_t* qs = w + kQs;
    q45_chunk_sdot<kQ5, 0, NC>(qs, qh0, qh1, y, sc_lo, sc_hi, sumi);
    q45_chunk_sdot<kQ5, 1, NC>(qs, qh0, qh1, y, sc_lo, sc_hi, sumi);
    q45_chunk_sdot<kQ5, 2, NC>(qs, qh0, qh1, y, sc_lo, sc_hi, sumi);
    q45_chunk_sdot<kQ5, 3, NC>(qs, qh0, qh1, y, sc_lo, sc_hi, sumi);
    for (int c = 0; c < NC; ++c) {
      const uint8_t* ac = a + c * a_stride;
      const int32x4_t summ = mins_dot_bsums(mins, ac + kQ8K_bsums);
      const int32x4_t pair = vpaddq_s32(sumi[c], summ);
      acc[c] = accumulate(acc[c], vmul_n_f32(wd, ld_f32(ac + kQ8K_d)), vget_low_s32(vpaddq_s32(pair, pair)));
    }
  }
  for (int c = 0; c < NC; ++c) out[c] = result(acc[c]);
}

template <int K, int NC>
inline void q6_chunk_sdot(const uint8x16_t l[4], const uint8x16_t h[2], const uint8_t* const y[NC], int32x4_t sc,
                          int32x4_t sumi[NC]) {
  int8x16_t q[2];
  decode_q6_chunk<K>(l, h, q);
  for (int c = 0; c < NC; ++c) {
    const uint8_t* yc = y[c] + 32 * K;
    const int32x4_t d0 = vdotq_s32(vdupq_n_s32(0), q[0], lds(yc));
    const int32x4_t d1 = vdotq_s32(vdupq_n_s32(0), q[1], lds(yc + 16));
    sumi[c] = vmlaq_laneq_s32(sumi[c], d0, sc, (2 * K) % 4);
    sumi[c] = vmlaq_laneq_s32(sumi[c], d1, sc, (2 * K + 1) % 4);
  }
}

// Half H of a Q6_K block against NC activation rows (y[c]: the activations of this half).
// sc_a: int32 scales of groups 8H..8H+3, sc_b: 8H+4..8H+7.
template <int H, int NC>
inline void q6_half_sdot(const uint8_t* w, const uint8_t* const y[NC], int32x4_t sc_a, int32x4_t sc_b,
                         int32x4_t sumi[NC]) {
  const uint8_t* ql = w + offsetof(block_q6_K, ql) + 64 * H;
  const uint8_t* qh = w + offsetof(block_q6_K, qh) + 32 * H;
  const uint8x16_t l[4] = {ld(ql), ld(ql + 16), ld(ql + 32), ld(ql + 48)};
  const uint8x16_t h[2] = {ld(qh), ld(qh + 16)};
  const uint8_t* yh[NC];
  for (int c = 0; c < NC; ++c) yh[c] = y[c] + 128 * H;
  q6_chunk_sdot<0, NC>(l, h, yh, sc_a, sumi);
  q6_chunk_sdot<1, NC>(l, h, yh, sc_a, sumi);
  q6_chunk_sdot<2, NC>(l, h, yh, sc_b, sumi);
  q6_chunk_sdot<3, NC>(l, h, yh, sc_b, sumi);
}

template <int NC>
void q6_tile_sdot(int64_t nb, const uint8_t* w, const uint8_t* a, size_t a_stride, float* out) {
  float acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
  for (int64_t i = 0; i < nb; ++i, w += sizeof(block_q6_K), a += sizeof(block_q8_K)) {
    const int8x16_t sc8 = lds(w + offsetof(block_q6_K, scales));
    const Q6Scales m32 = q6k_minus32_scales(sc8);
    const int16x8_t s16_lo = vmovl_s8(vget_low_s8(sc8)), s16_hi = vmovl_high_s8(sc8);
    const int32x4_t sc0 = vmovl_s16(vget_low_s16(s16_lo)), sc1 = vmovl_high_s16(s16_lo);
    const int32x4_t sc2 = vmovl_s16(vget_low_s16(s16_hi)), sc3 = vmovl_high_s16(s16_hi);
    const float wd = f16_one(w + offsetof(block_q6_K, d));
    const uint8_t* y[NC];
    int32x4_t sumi[NC];
    for (int c = 0; c < NC; ++c) {
      y[c] = a + c * a_stride + kQ8K_qs;
      sumi[c] = q6k_offset_sum(m32, a + c * a_stride + kQ8K_bsums);
    }
    q6_half_sdot<0, NC>(w, y, sc0, sc1, sumi);
    q6_half_sdot<1, NC>(w, y, sc2, sc3, sumi);
    for (int c = 0; c < NC; ++c) {
      const float d = wd * ld_f32(a + c * a_stride + kQ8K_d);
      acc[c] = std::fma(d, static_cast<float>(vaddvq_s32(sumi[c])), acc[c]);
    }
  }
  for (int c = 0; c < NC; ++c) out[c] = acc[c];
}

// Tile function of one type: rows x NC columns via the NC template.
using TileFn = void (*)(int64_t nb, const uint8_t* w, const uint8_t* a, size_t a_stride, float* out);

// One weight row against activation rows c0 .. nc-1 in tiles of up to 4 (y: this row's first
// output, outputs of consecutive activation rows y_stride apart).
template <template <int> class Tiles>
void row_sdot(int64_t nb, const uint8_t* w, const uint8_t* a, size_t a_stride, int64_t nc, float* y,
              int64_t y_stride) {
  float out[4];
  for (int64_t c = 0; c < nc; c += 4) {
    const int64_t m = nc - c < 4 ? nc - c : 4;
    const uint8_t* ac = a + c * a_stride;
    switch (m) {
      case 1: Tiles<1>::run(nb, w, ac, a_stride, out); break;
      case 2: Tiles<2>::run(nb, w, ac, a_stride, out); break;
      case 3: Tiles<3>::run(nb, w, ac, a_stride, out); break;
      default: Tiles<4>::run(nb, w, ac, a_stride, out); break;
    }
    for (int64_t k = 0; k < m; ++k) y[(c + k) * y_stride] = out[k];
  }
}

template <int NC>
struct Q4Tiles {
  static void run(int64_t nb, const uint8_t* w, const uint8_t* a, size_t s, float* o) { q45_tile_sdot<false, NC>(nb, w, a, s, o); }
};
template <int NC>
struct Q5Tiles {
  static void run(int64_t nb, const uint8_t* w, const uint8_t* a, size_t s, float* o) { q45_tile_sdot<true, NC>(nb, w, a, s, o); }
};
template <int NC>
struct Q6Tiles {
  static void run(int64_t nb, const uint8_t* w, const uint8_t* a, size_t s, float* o) { q6_tile_sdot<NC>(nb, w, a, s, o); }
};

#endif  // __ARM_FEATURE_DOTPROD

}  // namespace k456
}  // namespace
}  // namespace les
