// NEON (Armv8.0, no SDOT) vec_dot of Q4_K, Q5_K, Q6_K x Q8_K.
// Products of the unsigned weights (<= 63) and int8 activations are formed by SMULL/SMLAL in int16
// lanes (at most 4 products per lane: |sum| <= 4 * 63 * 128 = 32256, exact), then multiplied by
// the sub-block scale into int32 lanes with SMLAL by element (exact). The -32 of Q6_K and the mins
// of Q4_K/Q5_K come off through the activation block sums (kernels_k456_arm.h). Float order per
// block as in the header (the same as the dotprod kernels; no gemm here: products use vec_dot).
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_k456_arm.h"

namespace les {
namespace {

using namespace k456;

// sum of q[k] * y[k] over 32 bytes (two registers), as 8 int16 lanes (exact for q <= 63).
inline int16x8_t dot32_i16(int8x16_t q0, int8x16_t q1, const uint8_t* y) {
  const int8x16_t y0 = lds(y), y1 = lds(y + 16);
  int16x8_t p = vmull_s8(vget_low_s8(q0), vget_low_s8(y0));
  p = vmlal_high_s8(p, q0, y0);
  p = vmlal_s8(p, vget_low_s8(q1), vget_low_s8(y1));
  return vmlal_high_s8(p, q1, y1);
}
// the same over 16 bytes.
inline int16x8_t dot16_i16(int8x16_t q, const uint8_t* y) {
  const int8x16_t y0 = lds(y);
  return vmlal_high_s8(vmull_s8(vget_low_s8(q), vget_low_s8(y0)), q, y0);
}
// acc + p * scale (lane J of sc), int16 x int16 -> int32.
template <int J>
inline int32x4_t add_scaled(int32x4_t acc, int16x8_t p, int16x8_t sc) {
  return vmlal_high_laneq_s16(vmlal_laneq_s16(acc, vget_low_s16(p), sc, J), p, sc, J);
}

template <bool kQ5, int K>
inline int32x4_t q45_chunk(const uint8_t* qs, uint8x16_t qh0, uint8x16_t qh1, const uint8_t* y, int16x8_t sc,
                           int32x4_t sumi) {
  int8x16_t q[4];
  decode_q45_chunk<kQ5, K>(qs, qh0, qh1, q);
  sumi = add_scaled<2 * K>(sumi, dot32_i16(q[0], q[1], y + 64 * K), sc);
  return add_scaled<2 * K + 1>(sumi, dot32_i16(q[2], q[3], y + 64 * K + 32), sc);
}

template <bool kQ5>
float vec_dot_q45(int64_t n, const void* vw, const void* va) {
  constexpr size_t kBytes = kQ5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  constexpr size_t kQs = kQ5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  float32x2_t acc = vdup_n_f32(0.0f);
  for (int64_t i = 0; i < n / QK_K; ++i, w += kBytes, a += sizeof(block_q8_K)) {
    const ScalesMins sm = scales_mins_k4(w + offsetof(block_q4_K, scales));
    const int16x8_t sc = vreinterpretq_s16_u16(vmovl_u8(sm.sc));
    const int16x8_t mins = vreinterpretq_s16_u16(vmovl_u8(sm.mn));
    uint8x16_t qh0 = vdupq_n_u8(0), qh1 = vdupq_n_u8(0);
    if constexpr (kQ5) {
      qh0 = ld(w + offsetof(block_q5_K, qh));
      qh1 = ld(w + offsetof(block_q5_K, qh) + 16);
    }
    const uint8_t* qs = w + kQs;
    const uint8_t* y = a + kQ8K_qs;
    int32x4_t sumi = vdupq_n_s32(0);
    sumi = q45_chunk<kQ5, 0>(qs, qh0, qh1, y, sc, sumi);
    sumi = q45_chunk<kQ5, 1>(qs, qh0, qh1, y, sc, sumi);
    sumi = q45_chunk<kQ5, 2>(qs, qh0, qh1, y, sc, sumi);
    sumi = q45_chunk<kQ5, 3>(qs, qh0, qh1, y, sc, sumi);
    const int32x4_t pair = vpaddq_s32(sumi, mins_dot_bsums(mins, a + kQ8K_bsums));
    acc = accumulate(acc, vmul_n_f32(f16_pair(w), ld_f32(a + kQ8K_d)), vget_low_s32(vpaddq_s32(pair, pair)));
  }
  return result(acc);
}

// Half H of a Q6_K block; sc: the int16 scales of its 8 groups.
template <int H>
inline int32x4_t q6_half(const uint8_t* w, const uint8_t* y, int16x8_t sc, int32x4_t sumi) {
  const uint8_t* ql = w + offsetof(block_q6_K, ql) + 64 * H;
  const uint8_t* qh = w + offsetof(block_q6_K, qh) + 32 * H;
  const uint8x16_t l[4] = {ld(ql), ld(ql + 16), ld(ql + 32), ld(ql + 48)};
  const uint8x16_t h[2] = {ld(qh), ld(qh + 16)};
  y += 128 * H;
  int8x16_t q[2];
  decode_q6_chunk<0>(l, h, q);
  sumi = add_scaled<0>(sumi, dot16_i16(q[0], y), sc);
  sumi = add_scaled<1>(sumi, dot16_i16(q[1], y + 16), sc);
  decode_q6_chunk<1>(l, h, q);
  sumi = add_scaled<2>(sumi, dot16_i16(q[0], y + 32), sc);
  sumi = add_scaled<3>(sumi, dot16_i16(q[1], y + 48), sc);
  decode_q6_chunk<2>(l, h, q);
  sumi = add_scaled<4>(sumi, dot16_i16(q[0], y + 64), sc);
  sumi = add_scaled<5>(sumi, dot16_i16(q[1], y + 80), sc);
  decode_q6_chunk<3>(l, h, q);
  sumi = add_scaled<6>(sumi, dot16_i16(q[0], y + 96), sc);
  return add_scaled<7>(sumi, dot16_i16(q[1], y + 112), sc);
}

float vec_dot_q6(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  float acc = 0.0f;
  for (int64_t i = 0; i < n / QK_K; ++i, w += sizeof(block_q6_K), a += sizeof(block_q8_K)) {
    const int8x16_t sc8 = lds(w + offsetof(block_q6_K, scales));
    int32x4_t sumi = q6k_offset_sum(q6k_minus32_scales(sc8), a + kQ8K_bsums);
    sumi = q6_half<0>(w, a + kQ8K_qs, vmovl_s8(vget_low_s8(sc8)), sumi);
    sumi = q6_half<1>(w, a + kQ8K_qs, vmovl_high_s8(sc8), sumi);
    const float d = f16_one(w + offsetof(block_q6_K, d)) * ld_f32(a + kQ8K_d);
    acc = std::fma(d, static_cast<float>(vaddvq_s32(sumi)), acc);
  }
  return acc;
}

}  // namespace

void fill_kernel_table_neon_k456(KernelTable& t) {
  t.vec_dot[static_cast<int>(Type::Q4_K)] = vec_dot_q45<false>;
  t.vec_dot[static_cast<int>(Type::Q5_K)] = vec_dot_q45<true>;
  t.vec_dot[static_cast<int>(Type::Q6_K)] = vec_dot_q6;
}

}  // namespace les
