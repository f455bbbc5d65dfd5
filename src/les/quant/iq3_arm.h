// aarch64 block decoders of IQ3_XXS and IQ3_S for the loops of iq_arm_tiles.h (included by
// kernels_iq3_{neon,dotprod,i8mm}.cpp, each with its own -march).
//
// Sub-block ib (32 elements) becomes vectors 2 ib (codebook points 0..3) and 2 ib + 1 (points
// 4..7), each point 4 magnitude bytes loaded from the codebook, negated by the byte mask of its
// sign bits; the multiplier 2 ls + 1 is the sub-block's. The block sum is then the scalar
// reference's per-block integer (iq3_ref.cpp), and the float steps are its own:
//   sumf += (d_w * d_a) * float(sum) per block; IQ3_XXS returns 0.25 * sumf.
#pragma once

#include <arm_neon.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "les/quant/blocks.h"
#include "les/quant/iq3_common.h"
#include "les/quant/iq_arm_tiles.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels.h"

namespace les {
namespace {
namespace iq3_arm {

using iq_arm::Decoded;

// The 4 codebook entries g[i0 .. i3] as 16 bytes.
inline uint8x16_t grid4(const uint32_t* g, unsigned i0, unsigned i1, unsigned i2, unsigned i3) {
  uint32x4_t v = vld1q_dup_u32(g + i0);
  v = vld1q_lane_u32(g + i1, v, 1);
  v = vld1q_lane_u32(g + i2, v, 2);
  v = vld1q_lane_u32(g + i3, v, 3);
  return vreinterpretq_u8_u32(v);
}

// IQ3_XXS: the negation mask of 8 elements from a 7-bit sign code (iq2_signs: the 8th sign
// makes the count of negatives even).
inline constexpr std::array<uint64_t, 128> kEvenSignMask = [] {
  std::array<uint64_t, 128> t{};
  for (int c = 0; c < 128; ++c) t[static_cast<size_t>(c)] = iq_arm::kByteSignMask[iq2_signs(c)];
  return t;
}();

// The float steps shared by both types.
struct Iq3Float {
  static int context() { return 0; }  // the codebooks are global
  static float finish(float acc, float dd, int32_t sum) { return acc + dd * static_cast<float>(sum); }
  static float32x4_t finish4(float32x4_t acc, float32x4_t dd, int32x4_t sum) {
    return vaddq_f32(acc, vmulq_f32(dd, vcvtq_f32_s32(sum)));
  }
};

struct Xxs : Iq3Float {
  static constexpr size_t kBytes = sizeof(block_iq3_xxs);
  static constexpr int kVecsPerScale = 2;
  static float final(float sumf) { return 0.25f * sumf; }
  static float32x4_t final4(float32x4_t sumf) { return vmulq_n_f32(sumf, 0.25f); }

  [[gnu::always_inline]] static void decode(const uint8_t* b, Decoded<2>& x, int) {
    const uint8_t* qs = b + offsetof(block_iq3_xxs, qs);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = qs + 8 * ib;
      const uint32_t aux = iq3xxs_signs_scale(qs, ib);
      const uint8x16_t m0 = grid4(kIq3xxsGrid, q[0], q[1], q[2], q[3]);
      const uint8x16_t m1 = grid4(kIq3xxsGrid, q[4], q[5], q[6], q[7]);
      const uint8x16_t n0 = vcombine_u8(vcreate_u8(kEvenSignMask[aux & 127]), vcreate_u8(kEvenSignMask[(aux >> 7) & 127]));
      const uint8x16_t n1 =
          vcombine_u8(vcreate_u8(kEvenSignMask[(aux >> 14) & 127]), vcreate_u8(kEvenSignMask[(aux >> 21) & 127]));
      x.q[2 * ib] = iq_arm::apply_signs(m0, n0);
      x.q[2 * ib + 1] = iq_arm::apply_signs(m1, n1);
      x.mult[ib] = static_cast<int32_t>(2 * (aux >> 28) + 1);
    }
    x.d = iq_arm::half_to_float(b);
  }
};

struct S : Iq3Float {
  static constexpr size_t kBytes = sizeof(block_iq3_s);
  static constexpr int kVecsPerScale = 2;
  static float final(float sumf) { return sumf; }
  static float32x4_t final4(float32x4_t sumf) { return sumf; }

  [[gnu::always_inline]] static void decode(const uint8_t* b, Decoded<2>& x, int) {
    const uint8_t* qs = b + offsetof(block_iq3_s, qs);
    const uint8_t* qh = b + offsetof(block_iq3_s, qh);
    const uint8_t* signs = b + offsetof(block_iq3_s, signs);
    const uint8_t* scales = b + offsetof(block_iq3_s, scales);
    for (int ib = 0; ib < 8; ++ib) {
      const uint8_t* q = qs + 8 * ib;
      const unsigned h = qh[ib];  // bit g: the 9th index bit of point g
      auto idx = [&](int g) { return q[g] | ((h << (8 - g)) & 256u); };
      const uint8x16_t m0 = grid4(kIq3sGrid, idx(0), idx(1), idx(2), idx(3));
      const uint8x16_t m1 = grid4(kIq3sGrid, idx(4), idx(5), idx(6), idx(7));
      const uint8_t* s = signs + 4 * ib;
      x.q[2 * ib] = iq_arm::apply_signs(m0, iq_arm::sign_mask16(s[0], s[1]));
      x.q[2 * ib + 1] = iq_arm::apply_signs(m1, iq_arm::sign_mask16(s[2], s[3]));
      x.mult[ib] = 2 * iq3s_scale(scales, ib) + 1;
    }
    x.d = iq_arm::half_to_float(b);
  }
};

// The entries of this unit's ISA: vec_dot and the 1-row tiles (neon, dotprod), or the SMMLA gemm
// over the dotprod vec_dot the table keeps (i8mm).
inline void fill_row_tiles(KernelTable& t) {
  t.vec_dot[static_cast<int>(Type::IQ3_XXS)] = iq_arm::vec_dot<Xxs>;
  t.vec_dot[static_cast<int>(Type::IQ3_S)] = iq_arm::vec_dot<S>;
  t.gemm[static_cast<int>(Type::IQ3_XXS)] = iq_arm::gemm<Xxs>;
  t.gemm[static_cast<int>(Type::IQ3_S)] = iq_arm::gemm<S>;
}
#if defined(__ARM_FEATURE_MATMUL_INT8)
inline void fill_mmla(KernelTable& t) {
  t.gemm[static_cast<int>(Type::IQ3_XXS)] = iq_arm::gemm_mmla<Xxs>;
  t.gemm[static_cast<int>(Type::IQ3_S)] = iq_arm::gemm_mmla<S>;
}
#endif

}  // namespace iq3_arm
}  // namespace
}  // namespace les
