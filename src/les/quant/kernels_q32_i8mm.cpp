// aarch64 i8mm (SMMLA) gemm of the q32 family: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and IQ4_NL against
// Q8_0/Q8_1 activations. vec_dot stays dotprod's (kernels_q32_dotprod.cpp).
//
// Exactness: tiles of 2 weight rows x 2 activation rows. Per block, four SMMLAs over 8-byte
// slices give the exact int32 sums of the four outputs [r0c0, r0c1, r1c0, r1c1]; the float steps
// (kernels_q32_arm.h: fma(float(sum), d_w * d_a, acc), then fma(m_w, s_a, acc) for Q4_1/Q5_1,
// even and odd blocks in two accumulators added at the end) run on the four lanes at once, each
// lane the same single-rounding operations as dotprod's vec_dot, so outputs are bit-identical to
// it. An odd last row or column is computed as a duplicate and not stored.

#include <arm_neon.h>

#include "les/quant/kernels_i8mm_zip.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_q32_arm.h"

namespace les {
namespace {

// Halves at p and q widened to [p, p, q, q] and [p, q, p, q].
inline float32x4_t halves_ppqq(const uint8_t* p, const uint8_t* q) {
  uint16x4_t v = vld1_dup_u16(reinterpret_cast<const uint16_t*>(p));
  v = vld1_lane_u16(reinterpret_cast<const uint16_t*>(q), v, 2);
  v = vld1_lane_u16(reinterpret_cast<const uint16_t*>(q), v, 3);
  return vcvt_f32_f16(vreinterpret_f16_u16(v));
}
inline float32x4_t halves_pqpq(const uint8_t* p, const uint8_t* q) {
  uint16x4_t v = vld1_dup_u16(reinterpret_cast<const uint16_t*>(p));
  v = vld1_lane_u16(reinterpret_cast<const uint16_t*>(q), v, 1);
  v = vld1_lane_u16(reinterpret_cast<const uint16_t*>(q), v, 3);
  return vcvt_f32_f16(vreinterpret_f16_u16(v));
}

// One block of a 2x2 tile: acc lanes [r0c0, r0c1, r1c0, r1c1].
template <class D>
inline float32x4_t tile_block(float32x4_t acc, const uint8_t* w0, const uint8_t* w1, const uint8_t* a0,
                              const uint8_t* a1) {
  int8x16_t w0l, w0h, w1l, w1h, a0l, a0h, a1l, a1h;
  D::decode(w0, w0l, w0h);
  D::decode(w1, w1l, w1h);
  Act<D>::load(a0, a0l, a0h);
  Act<D>::load(a1, a1l, a1h);
  int32x4_t s = vmmlaq_s32(vdupq_n_s32(0), zip_lo(w0l, w1l), zip_lo(a0l, a1l));
  s = vmmlaq_s32(s, zip_hi(w0l, w1l), zip_hi(a0l, a1l));
  s = vmmlaq_s32(s, zip_lo(w0h, w1h), zip_lo(a0h, a1h));
  s = vmmlaq_s32(s, zip_hi(w0h, w1h), zip_hi(a0h, a1h));
  acc = vfmaq_f32(acc, vcvtq_f32_s32(s), vmulq_f32(halves_ppqq(w0, w1), halves_pqpq(a0, a1)));
  if constexpr (D::kAffine) acc = vfmaq_f32(acc, halves_ppqq(w0 + 2, w1 + 2), halves_pqpq(a0 + 2, a1 + 2));
  return acc;
}

template <class D>
inline float32x4_t tile(int64_t nb, const uint8_t* w0, const uint8_t* w1, const uint8_t* a0, const uint8_t* a1) {
  constexpr size_t wb = D::kBytes, ab = Act<D>::kBytes;
  float32x4_t even = vdupq_n_f32(0.0f), odd = even;
  int64_t i = 0;
  for (; i + 1 < nb; i += 2, w0 += 2 * wb, w1 += 2 * wb, a0 += 2 * ab, a1 += 2 * ab) {
    even = tile_block<D>(even, w0, w1, a0, a1);
    odd = tile_block<D>(odd, w0 + wb, w1 + wb, a0 + ab, a1 + ab);
  }
  if (i < nb) even = tile_block<D>(even, w0, w1, a0, a1);
  return vaddq_f32(even, odd);
}

template <class D>
void gemm_i8mm(int64_t n, const void* vw, size_t w_stride, int64_t nr, const void* va, size_t a_stride, int64_t nc,
               float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  for (int64_t r = 0; r < nr; r += 2) {
    const bool r1_ok = r + 1 < nr;
    const uint8_t* w0 = w + r * w_stride;
    const uint8_t* w1 = r1_ok ? w0 + w_stride : w0;
    for (int64_t c = 0; c < nc; c += 2) {
      const bool c1_ok = c + 1 < nc;
      const uint8_t* a0 = a + c * a_stride;
      const uint8_t* a1 = c1_ok ? a0 + a_stride : a0;
      const float32x4_t v = tile<D>(n / 32, w0, w1, a0, a1);
      float* y0 = y + c * y_stride + r;
      y0[0] = vgetq_lane_f32(v, 0);
      if (c1_ok) y0[y_stride] = vgetq_lane_f32(v, 1);
      if (r1_ok) {
        y0[1] = vgetq_lane_f32(v, 2);
        if (c1_ok) y0[y_stride + 1] = vgetq_lane_f32(v, 3);
      }
    }
  }
}

}  // namespace

void fill_kernel_table_i8mm_q32(KernelTable& t) {
  t.gemm[static_cast<int>(Type::Q4_0)] = gemm_i8mm<DecQ4_0>;
  t.gemm[static_cast<int>(Type::Q4_1)] = gemm_i8mm<DecQ4_1>;
  t.gemm[static_cast<int>(Type::Q5_0)] = gemm_i8mm<DecQ5_0>;
  t.gemm[static_cast<int>(Type::Q5_1)] = gemm_i8mm<DecQ5_1>;
  t.gemm[static_cast<int>(Type::Q8_0)] = gemm_i8mm<DecQ8_0>;
  t.gemm[static_cast<int>(Type::IQ4_NL)] = gemm_i8mm<DecIq4Nl>;
}

}  // namespace les
