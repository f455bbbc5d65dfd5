// The aarch64 loops of the IQ3 and IQ1 kernels against Q8_K activations (iq3_arm.h, iq1_arm.h
// supply the block decoders; kernels_iq{3,1}_{neon,dotprod,i8mm}.cpp instantiate them).
//
// A weight type W decodes one 256-element block (W::decode(block, out, W::context()), the context
// fetched once per row: a table pointer or nothing) into Decoded<W::kVecsPerScale>: 16 vectors of
// signed int8 weights (elements 16v .. 16v+15), the integer multiplier of every run of
// kVecsPerScale vectors, and the block's float scale d. Its block sum against 256 int8
// activations is the exact integer sum over runs of multiplier * (weights . activations), the
// integer the scalar reference forms per block, whichever way it is computed here:
//   neon:    widening products (vmull/vmlal) into int16 lanes, at most 4 per lane, each of
//            |w| <= 62 times |a| <= 128 (4 * 7936 < 32768), then pairwise-widened into int32;
//   dotprod: SDOT (4 products per int32 lane);
//   i8mm:    SMMLA on two weight rows x two activation rows (the gemm only).
// The block's float update is the scalar reference's (W::finish: acc + (d_w * d_a) * ..., in
// block order; aarch64 builds with -ffp-contract=off, so no product is fused into an add), and
// W::final its last step. So vec_dot, every gemm tile, and the scalar table give the same float
// bit for bit: gemm == vec_dot for any tile shape, which the i8mm gemm relies on (its table keeps
// the dotprod vec_dot).
//
// Everything has internal linkage: each ISA's translation unit compiles its own copy for its own
// -march (SDOT only where the unit is built with dotprod, SMMLA where with i8mm).
#pragma once

#include <arm_neon.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"

namespace les {
namespace {
namespace iq_arm {

// A decoded weight block. mult[k]: the multiplier of vectors G k .. G k + G - 1.
template <int G>
struct Decoded {
  static_assert(G == 1 || G == 2);
  int8x16_t q[16];
  int32_t mult[16 / G];
  float d;
};

inline float half_to_float(const uint8_t* p) {
  __fp16 h;
  std::memcpy(&h, p, sizeof h);
  return static_cast<float>(h);
}

// 8 bytes per sign byte: 0xff for each set bit (element k of 8 <-> bit k), as a uint64 for vcreate.
inline constexpr std::array<uint64_t, 256> kByteSignMask = [] {
  std::array<uint64_t, 256> t{};
  for (unsigned s = 0; s < 256; ++s) {
    for (int k = 0; k < 8; ++k) {
      if ((s >> k) & 1) t[s] |= 0xffull << (8 * k);
    }
  }
  return t;
}();

// The magnitudes m (bytes <= 127) negated where the mask n is 0xff.
inline int8x16_t apply_signs(uint8x16_t m, uint8x16_t n) {
  return vreinterpretq_s8_u8(vsubq_u8(veorq_u8(m, n), n));
}
// The negation mask of 16 elements from two sign bytes (elements 0..7, 8..15).
inline uint8x16_t sign_mask16(uint8_t s0, uint8_t s1) {
  return vcombine_u8(vcreate_u8(kByteSignMask[s0]), vcreate_u8(kByteSignMask[s1]));
}

constexpr size_t kQ8Bytes = sizeof(block_q8_K);

inline float act_d(const uint8_t* a) {
  float d;
  std::memcpy(&d, a + offsetof(block_q8_K, d), sizeof d);
  return d;
}
inline const int8_t* act_qs(const uint8_t* a) { return reinterpret_cast<const int8_t*>(a + offsetof(block_q8_K, qs)); }

// The exact block sum (see the top of this file) of a decoded block against activations a[256].
template <int G>
[[gnu::always_inline]] inline int32_t block_sum(const Decoded<G>& w, const int8_t* a) {
  int32x4_t t = vdupq_n_s32(0);
  for (int j = 0; j < 16 / (4 * G); ++j) {  // four multipliers at a time
    int32x4_t d[4];
    for (int k = 0; k < 4; ++k) {
      const int v = G * (4 * j + k);
      const int8x16_t a0 = vld1q_s8(a + 16 * v);
#if defined(__ARM_FEATURE_DOTPROD)
      d[k] = vdotq_s32(vdupq_n_s32(0), w.q[v], a0);
      if constexpr (G == 2) d[k] = vdotq_s32(d[k], w.q[v + 1], vld1q_s8(a + 16 * v + 16));
#else
      int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(w.q[v]), vget_low_s8(a0)), w.q[v], a0);
      if constexpr (G == 2) {
        const int8x16_t a1 = vld1q_s8(a + 16 * v + 16);
        p = vmlal_high_s8(vmlal_s8(p, vget_low_s8(w.q[v + 1]), vget_low_s8(a1)), w.q[v + 1], a1);
      }
      d[k] = vpaddlq_s16(p);
#endif
    }
    // lane k: the run of multiplier 4 j + k
    t = vmlaq_s32(t, vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3])), vld1q_s32(w.mult + 4 * j));
  }
  return vaddvq_s32(t);
}

// One weight row of nb blocks against NC activation rows (as bytes apart): each block decoded once
// for all NC; y[c * ys] = the vec_dot of activation row c.
template <class W, int NC>
void row_tile(int64_t nb, const uint8_t* w, const uint8_t* a, size_t as, float* y, int64_t ys) {
  float acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
  Decoded<W::kVecsPerScale> x;
  const auto ctx = W::context();
  for (int64_t i = 0; i < nb; ++i) {
    W::decode(w + static_cast<size_t>(i) * W::kBytes, x, ctx);
    for (int c = 0; c < NC; ++c) {
      const uint8_t* ab = a + static_cast<size_t>(c) * as + static_cast<size_t>(i) * kQ8Bytes;
      acc[c] = W::finish(acc[c], x.d * act_d(ab), block_sum(x, act_qs(ab)));
    }
  }
  for (int c = 0; c < NC; ++c) y[c * ys] = W::final(acc[c]);
}

template <class W>
float vec_dot(int64_t n, const void* w, const void* a) {
  float y;
  row_tile<W, 1>(n / QK_K, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a), 0, &y, 1);
  return y;
}

constexpr int kRowTileTokens = 8;  // activation rows per pass over a weight row

// Weight row w against activation rows 0 .. nc-1 into y[c * ys].
template <class W>
void row_tiles(int64_t nb, const uint8_t* w, const uint8_t* a, size_t as, int64_t nc, float* y, int64_t ys) {
  for (int64_t c = 0; c < nc; c += kRowTileTokens) {
    const uint8_t* ac = a + static_cast<size_t>(c) * as;
    float* yc = y + c * ys;
    switch (nc - c < kRowTileTokens ? nc - c : kRowTileTokens) {
      case 8: row_tile<W, 8>(nb, w, ac, as, yc, ys); break;
      case 7: row_tile<W, 7>(nb, w, ac, as, yc, ys); break;
      case 6: row_tile<W, 6>(nb, w, ac, as, yc, ys); break;
      case 5: row_tile<W, 5>(nb, w, ac, as, yc, ys); break;
      case 4: row_tile<W, 4>(nb, w, ac, as, yc, ys); break;
      case 3: row_tile<W, 3>(nb, w, ac, as, yc, ys); break;
      case 2: row_tile<W, 2>(nb, w, ac, as, yc, ys); break;
      default: row_tile<W, 1>(nb, w, ac, as, yc, ys); break;
    }
  }
}

// The gemm of 1-row x up-to-8-token tiles (see GemmFn).
template <class W>
void gemm(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y,
          int64_t ys) {
  const auto* w = static_cast<const uint8_t*>(vw);
  for (int64_t r = 0; r < nr; ++r) {
    row_tiles<W>(n / QK_K, w + static_cast<size_t>(r) * ws, static_cast<const uint8_t*>(va), as, nc, y + r, ys);
  }
}

#if defined(__ARM_FEATURE_MATMUL_INT8)
// SMMLA operands: two rows' 16 bytes as their first halves and their second halves.
inline int8x16_t zip_lo8(int8x16_t x, int8x16_t y) {
  return vreinterpretq_s8_s64(vzip1q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)));
}
inline int8x16_t zip_hi8(int8x16_t x, int8x16_t y) {
  return vreinterpretq_s8_s64(vzip2q_s64(vreinterpretq_s64_s8(x), vreinterpretq_s64_s8(y)));
}

// Two weight rows w0, w1 against NP pairs of activation rows (activation row c at a + c as):
// out[p] lanes [r0 c0, r0 c1, r1 c0, r1 c1] of activation rows 2p, 2p + 1. Per block and output
// the exact block sum (each SMMLA adds the 2 x 2 products of 8 elements; the multipliers of row 0
// go into t0, row 1's into t1), then W::finish4, the lane-wise form of W::finish.
template <class W, int NP>
void mmla_tile(int64_t nb, const uint8_t* w0, const uint8_t* w1, const uint8_t* a, size_t as, float32x4_t* out) {
  constexpr int G = W::kVecsPerScale;
  float32x4_t acc[NP];
  for (int p = 0; p < NP; ++p) acc[p] = vdupq_n_f32(0.0f);
  Decoded<G> x0, x1;
  int8x16_t lo[16], hi[16];
  const auto ctx = W::context();
  for (int64_t i = 0; i < nb; ++i) {
    W::decode(w0 + static_cast<size_t>(i) * W::kBytes, x0, ctx);
    W::decode(w1 + static_cast<size_t>(i) * W::kBytes, x1, ctx);
    for (int v = 0; v < 16; ++v) {
      lo[v] = zip_lo8(x0.q[v], x1.q[v]);
      hi[v] = zip_hi8(x0.q[v], x1.q[v]);
    }
    const float32x4_t dw = vcombine_f32(vdup_n_f32(x0.d), vdup_n_f32(x1.d));
    for (int p = 0; p < NP; ++p) {
      const uint8_t* a0 = a + static_cast<size_t>(2 * p) * as + static_cast<size_t>(i) * kQ8Bytes;
      const uint8_t* a1 = a0 + as;
      const int8_t* q0 = act_qs(a0);
      const int8_t* q1 = act_qs(a1);
      int32x4_t t0 = vdupq_n_s32(0), t1 = vdupq_n_s32(0);
      for (int k = 0; k < 16 / G; ++k) {
        int32x4_t s = vdupq_n_s32(0);
        for (int v = G * k; v < G * k + G; ++v) {
          const int8x16_t b0 = vld1q_s8(q0 + 16 * v), b1 = vld1q_s8(q1 + 16 * v);
          s = vmmlaq_s32(vmmlaq_s32(s, lo[v], zip_lo8(b0, b1)), hi[v], zip_hi8(b0, b1));
        }
        t0 = vmlaq_n_s32(t0, s, x0.mult[k]);
        t1 = vmlaq_n_s32(t1, s, x1.mult[k]);
      }
      const int32x4_t isum = vcombine_s32(vget_low_s32(t0), vget_high_s32(t1));
      const float32x2_t da = vset_lane_f32(act_d(a1), vdup_n_f32(act_d(a0)), 1);
      acc[p] = W::finish4(acc[p], vmulq_f32(dw, vcombine_f32(da, da)), isum);
    }
  }
  for (int p = 0; p < NP; ++p) out[p] = W::final4(acc[p]);
}

// The gemm of 2-row x up-to-8-token SMMLA tiles; an odd last weight row or activation row goes
// through row_tile (SDOT: this unit is built with dotprod), which gives the same floats.
template <class W>
void gemm_mmla(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y,
               int64_t ys) {
  const int64_t nb = n / QK_K;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  int64_t r = 0;
  for (; r + 2 <= nr; r += 2) {
    const uint8_t* w0 = w + static_cast<size_t>(r) * ws;
    const uint8_t* w1 = w0 + ws;
    int64_t c = 0;
    while (nc - c >= 2) {
      float32x4_t out[4];
      const int np = static_cast<int>(nc - c >= 8 ? 4 : (nc - c) / 2);
      const uint8_t* ac = a + static_cast<size_t>(c) * as;
      switch (np) {
        case 4: mmla_tile<W, 4>(nb, w0, w1, ac, as, out); break;
        case 3: mmla_tile<W, 3>(nb, w0, w1, ac, as, out); break;
        case 2: mmla_tile<W, 2>(nb, w0, w1, ac, as, out); break;
        default: mmla_tile<W, 1>(nb, w0, w1, ac, as, out); break;
      }
      for (int p = 0; p < np; ++p, c += 2) {
        y[c * ys + r] = vgetq_lane_f32(out[p], 0);
        y[(c + 1) * ys + r] = vgetq_lane_f32(out[p], 1);
        y[c * ys + r + 1] = vgetq_lane_f32(out[p], 2);
        y[(c + 1) * ys + r + 1] = vgetq_lane_f32(out[p], 3);
      }
    }
    if (c < nc) {  // the last, odd activation row
      const uint8_t* ac = a + static_cast<size_t>(c) * as;
      row_tile<W, 1>(nb, w0, ac, as, y + c * ys + r, ys);
      row_tile<W, 1>(nb, w1, ac, as, y + c * ys + r + 1, ys);
    }
  }
  if (r < nr) row_tiles<W>(nb, w + static_cast<size_t>(r) * ws, a, as, nc, y + r, ys);  // the last, odd weight row
}
#endif

}  // namespace iq_arm
}  // namespace
}  // namespace les
