// aarch64 block decoders of IQ1_S and IQ1_M for the loops of iq_arm_tiles.h (included by
// kernels_iq1_{neon,dotprod,i8mm}.cpp, each with its own -march).
//
// Each group of 8 weights is one entry of the signed grid (iq1_common.h): the bytes
// 8 * (grid + delta) in {-9, -7, -1, 1, 7, 9}; groups 2v, 2v + 1 of the block make vector v.
// Multipliers 2 ls + 1: per sub-block of 32 (IQ1_S, two vectors) or per 16 (IQ1_M, one vector).
// The block sum is the exact 8 * sumi + sumi1 of the scalar reference (iq1_ref.cpp), so
//   sumf += (d_w * d_a) * (float(sum) * 1/8)
// is its float step bit for bit (float(sum) / 8 equals its sumi + sumi1 / 8: every value
// involved is below 2^24).
#pragma once

#include <arm_neon.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/quant/iq1_common.h"
#include "les/quant/iq_arm_tiles.h"
#include "les/quant/kernels.h"

namespace les {
namespace {
namespace iq1_arm {

using iq_arm::Decoded;

// Vector of the signed-grid entries i0 (elements 0..7) and i1 (8..15).
inline int8x16_t pair(const uint64_t* sg, uint32_t i0, uint32_t i1) {
  return vreinterpretq_s8_u64(vcombine_u64(vld1_u64(sg + i0), vld1_u64(sg + i1)));
}

struct Iq1Float {
  static const uint64_t* context() { return iq1_signed_grid(); }
  static float finish(float acc, float dd, int32_t sum) { return acc + dd * (static_cast<float>(sum) * 0.125f); }
  static float32x4_t finish4(float32x4_t acc, float32x4_t dd, int32x4_t sum) {
    return vaddq_f32(acc, vmulq_f32(dd, vmulq_n_f32(vcvtq_f32_s32(sum), 0.125f)));
  }
  static float final(float sumf) { return sumf; }
  static float32x4_t final4(float32x4_t sumf) { return sumf; }
};

struct S : Iq1Float {
  static constexpr size_t kBytes = sizeof(block_iq1_s);
  static constexpr int kVecsPerScale = 2;

  [[gnu::always_inline]] static void decode(const uint8_t* b, Decoded<2>& x, const uint64_t* sg) {
    const uint8_t* qs = b + offsetof(block_iq1_s, qs);
    const uint8_t* qh = b + offsetof(block_iq1_s, qh);
    for (int ib = 0; ib < 8; ++ib) {
      uint16_t h;
      std::memcpy(&h, qh + 2 * ib, sizeof h);
      const uint8_t* q = qs + 4 * ib;
      x.q[2 * ib] = pair(sg, iq1s_signed_index(q, h, 0), iq1s_signed_index(q, h, 1));
      x.q[2 * ib + 1] = pair(sg, iq1s_signed_index(q, h, 2), iq1s_signed_index(q, h, 3));
      x.mult[ib] = iq1s_scale(h);
    }
    x.d = iq_arm::half_to_float(b);
  }
};

struct M : Iq1Float {
  static constexpr size_t kBytes = sizeof(block_iq1_m);
  static constexpr int kVecsPerScale = 1;

  [[gnu::always_inline]] static void decode(const uint8_t* b, Decoded<1>& x, const uint64_t* sg) {
    const uint8_t* qs = b + offsetof(block_iq1_m, qs);
    const uint8_t* qh = b + offsetof(block_iq1_m, qh);
    uint16_t sc[4];
    iq1m_scale_words(b + offsetof(block_iq1_m, scales), sc);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = qs + 4 * ib;
      const uint8_t* h = qh + 2 * ib;
      x.q[2 * ib] = pair(sg, iq1m_signed_index(q, h, 0), iq1m_signed_index(q, h, 1));
      x.q[2 * ib + 1] = pair(sg, iq1m_signed_index(q, h, 2), iq1m_signed_index(q, h, 3));
    }
    for (int v = 0; v < 16; ++v) x.mult[v] = iq1m_scale(sc, v);
    const uint16_t dbits = iq1m_d_bits(sc);
    x.d = iq_arm::half_to_float(reinterpret_cast<const uint8_t*>(&dbits));
  }
};

// The entries of this unit's ISA: vec_dot and the 1-row tiles (neon, dotprod), or the SMMLA gemm
// over the dotprod vec_dot the table keeps (i8mm).
inline void fill_row_tiles(KernelTable& t) {
  t.vec_dot[static_cast<int>(Type::IQ1_S)] = iq_arm::vec_dot<S>;
  t.vec_dot[static_cast<int>(Type::IQ1_M)] = iq_arm::vec_dot<M>;
  t.gemm[static_cast<int>(Type::IQ1_S)] = iq_arm::gemm<S>;
  t.gemm[static_cast<int>(Type::IQ1_M)] = iq_arm::gemm<M>;
}
#if defined(__ARM_FEATURE_MATMUL_INT8)
inline void fill_mmla(KernelTable& t) {
  t.gemm[static_cast<int>(Type::IQ1_S)] = iq_arm::gemm_mmla<S>;
  t.gemm[static_cast<int>(Type::IQ1_M)] = iq_arm::gemm_mmla<M>;
}
#endif

}  // namespace iq1_arm
}  // namespace
}  // namespace les
