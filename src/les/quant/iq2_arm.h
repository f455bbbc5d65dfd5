// Shared parts of the aarch64 kernels of IQ2_XXS, IQ2_XS, IQ2_S against Q8_K (kernels_iq2_neon.cpp,
// kernels_iq2_dotprod.cpp): block decoding into signed int8 weights, the exact per-block integer
// sum (widening NEON products or SDOT, chosen by the including file), and the row loops.
//
// Exactness: per super-block the scalar reference's integer sum, then its float order
// (sumf += (d_w * d_a) * bsum, 0.125 * sumf; aarch64 builds with -ffp-contract=off): every result
// equals the scalar table's bit for bit, and gemm (each weight row decoded once, reused for every
// activation row) equals vec_dot.
//
// Everything has internal linkage: each ISA's translation unit compiles its own copy for its own
// -march.
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/iq2_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels.h"

namespace les {
namespace {
namespace iq2_arm {

// A decoded block: 256 signed weights (grid byte times sign) and the multiplier 2 ls + 1 of each
// 16-element chunk.
struct Decoded {
  int8_t w[QK_K];
  int32_t mult[16];
  float d;
};

inline float half_to_float(const uint8_t* p) {
  __fp16 f;
  std::memcpy(&f, p, sizeof f);
  return static_cast<float>(f);
}

// 8 weights of grid point g with sign byte s.
inline void put8(int8_t* w, uint64_t g, uint8_t s) {
  const uint8x8_t bits = {1, 2, 4, 8, 16, 32, 64, 128};
  const int8x8_t neg = vreinterpret_s8_u8(vtst_u8(vdup_n_u8(s), bits));  // -1 where negative
  const int8x8_t v = vreinterpret_s8_u64(vcreate_u64(g));
  vst1_s8(w, vsub_s8(veor_s8(v, neg), neg));
}

inline void decode_xxs(const uint8_t* blk, Decoded& o) {
  const uint8_t* qs = blk + offsetof(block_iq2_xxs, qs);
  for (int ib = 0; ib < 8; ++ib) {
    const Iq2xxsSub sub = iq2xxs_sub(qs, ib);
    for (int l = 0; l < 4; ++l) put8(o.w + 32 * ib + 8 * l, kIq2xxsGrid[sub.grid[l]], iq2_signs(sub.sign_code[l]));
    o.mult[2 * ib] = o.mult[2 * ib + 1] = 2 * sub.ls + 1;
  }
  o.d = half_to_float(blk);
}

inline void decode_xs(const uint8_t* blk, Decoded& o) {
  const uint8_t* qs = blk + offsetof(block_iq2_xs, qs);
  const uint8_t* sc = blk + offsetof(block_iq2_xs, scales);
  for (int g = 0; g < 32; ++g) {
    uint16_t q;
    std::memcpy(&q, qs + 2 * g, 2);
    put8(o.w + 8 * g, kIq2xsGrid[q & 511], iq2_signs(q >> 9));
  }
  for (int s = 0; s < 16; ++s) o.mult[s] = 2 * ((sc[s / 2] >> (4 * (s % 2))) & 0x0f) + 1;
  o.d = half_to_float(blk);
}

inline void decode_s(const uint8_t* blk, Decoded& o) {
  const uint8_t* qs = blk + offsetof(block_iq2_s, qs);
  const uint8_t* qh = blk + offsetof(block_iq2_s, qh);
  const uint8_t* sc = blk + offsetof(block_iq2_s, scales);
  for (int g = 0; g < 32; ++g) put8(o.w + 8 * g, kIq2sGrid[iq2s_grid_index(qs, qh, g)], qs[QK_K / 8 + g]);
  for (int s = 0; s < 16; ++s) o.mult[s] = 2 * ((sc[s / 2] >> (4 * (s % 2))) & 0x0f) + 1;
  o.d = half_to_float(blk);
}

// sum of 16 products w * a as 4 int32 lanes.
#if defined(__ARM_FEATURE_DOTPROD)
inline int32x4_t dot16(int8x16_t w, int8x16_t a) { return vdotq_s32(vdupq_n_s32(0), w, a); }
#else
inline int32x4_t dot16(int8x16_t w, int8x16_t a) {
  const int16x8_t p = vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a);  // |2 * 43 * 128| fits
  return vpaddlq_s16(p);
}
#endif

// The exact integer sum of a decoded block against 256 int8 activations.
inline int32_t block_sum(const Decoded& b, const int8_t* q8) {
  int32x4_t acc = vdupq_n_s32(0);
  for (int c = 0; c < 16; ++c) acc = vmlaq_n_s32(acc, dot16(vld1q_s8(b.w + 16 * c), vld1q_s8(q8 + 16 * c)), b.mult[c]);
  return vaddvq_s32(acc);
}

constexpr size_t kQ8Bytes = sizeof(block_q8_K);

inline float act_d(const uint8_t* a) {
  float d;
  std::memcpy(&d, a + offsetof(block_q8_K, d), 4);
  return d;
}
inline const int8_t* act_qs(const uint8_t* a) { return reinterpret_cast<const int8_t*>(a + offsetof(block_q8_K, qs)); }

template <void (*Decode)(const uint8_t*, Decoded&), size_t BlockBytes>
float vec_dot(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  float sumf = 0;
  Decoded b;
  for (int64_t i = 0; i < n / QK_K; ++i, w += BlockBytes, a += kQ8Bytes) {
    Decode(w, b);
    const float d = b.d * act_d(a);
    sumf += d * static_cast<float>(block_sum(b, act_qs(a)));
  }
  return 0.125f * sumf;
}

template <void (*Decode)(const uint8_t*, Decoded&), size_t BlockBytes>
void gemm(int64_t n, const void* vw, size_t w_stride, int64_t nr, const void* va, size_t a_stride, int64_t nc,
          float* y, int64_t y_stride) {
  const int64_t nb = n / QK_K;
  const auto* a = static_cast<const uint8_t*>(va);
  if (nc == 1) {
    for (int64_t r = 0; r < nr; ++r) {
      y[r] = vec_dot<Decode, BlockBytes>(n, static_cast<const uint8_t*>(vw) + static_cast<size_t>(r) * w_stride, va);
    }
    return;
  }
  thread_local std::vector<Decoded> row;
  if (row.size() < static_cast<size_t>(nb)) row.resize(static_cast<size_t>(nb));
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* w = static_cast<const uint8_t*>(vw) + static_cast<size_t>(r) * w_stride;
    for (int64_t i = 0; i < nb; ++i) Decode(w + i * BlockBytes, row[static_cast<size_t>(i)]);
    for (int64_t c = 0; c < nc; ++c) {
      const uint8_t* ac = a + static_cast<size_t>(c) * a_stride;
      float sumf = 0;
      for (int64_t i = 0; i < nb; ++i, ac += kQ8Bytes) {
        const Decoded& b = row[static_cast<size_t>(i)];
        const float d = b.d * act_d(ac);
        sumf += d * static_cast<float>(block_sum(b, act_qs(ac)));
      }
      y[c * y_stride + r] = 0.125f * sumf;
    }
  }
}

inline void fill(KernelTable& t) {
  t.vec_dot[static_cast<int>(Type::IQ2_XXS)] = vec_dot<decode_xxs, sizeof(block_iq2_xxs)>;
  t.vec_dot[static_cast<int>(Type::IQ2_XS)] = vec_dot<decode_xs, sizeof(block_iq2_xs)>;
  t.vec_dot[static_cast<int>(Type::IQ2_S)] = vec_dot<decode_s, sizeof(block_iq2_s)>;
  t.gemm[static_cast<int>(Type::IQ2_XXS)] = gemm<decode_xxs, sizeof(block_iq2_xxs)>;
  t.gemm[static_cast<int>(Type::IQ2_XS)] = gemm<decode_xs, sizeof(block_iq2_xs)>;
  t.gemm[static_cast<int>(Type::IQ2_S)] = gemm<decode_s, sizeof(block_iq2_s)>;
}

}  // namespace iq2_arm
}  // namespace
}  // namespace les
