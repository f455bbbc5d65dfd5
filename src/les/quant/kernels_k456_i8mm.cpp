// i8mm (SMMLA) gemm of Q4_K, Q5_K, Q6_K x Q8_K; vec_dot stays dotprod's.
// Tiles of 2 weight rows x 2 activation rows: the two rows' packed weight bytes are interleaved
// by 8 (zip of 64-bit halves) before decoding (the decode is bytewise), the activations likewise,
// and SMMLA forms the 4 sums of 8 products at once: lanes {r0c0, r0c1, r1c0, r1c1}. Every integer
// is exact, so sumi and summ of each output equal the dotprod vec_dot's; the float steps per
// block are the same IEEE operations lane by lane (kernels_k456_arm.h), so every output is
// bit-identical to the dotprod vec_dot. Odd edge rows / columns use the dotprod tiles themselves.
#include "les/quant/kernels_i8mm_zip.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_k456_arm.h"

namespace les {
namespace {

using namespace k456;

// SMMLA over 16 elements at offset off of two activation rows (w_lo, w_hi: the weights of those
// elements, rows interleaved: bytes 0-7 / 8-15 of the 16).
inline int32x4_t mmla16(int32x4_t acc, int8x16_t w_lo, int8x16_t w_hi, const uint8_t* y0, const uint8_t* y1) {
  const uint8x16_t a = ld(y0), b = ld(y1);
  acc = vmmlaq_s32(acc, w_lo, vreinterpretq_s8_u8(zip_lo(a, b)));
  return vmmlaq_s32(acc, w_hi, vreinterpretq_s8_u8(zip_hi(a, b)));
}
// sumi lanes {r0c0, r0c1, r1c0, r1c1} from acc0 (scaled by row 0's scales) and acc1 (row 1's).
inline int32x4_t merge_rows(int32x4_t acc0, int32x4_t acc1) { return vcombine_s32(vget_low_s32(acc0), vget_high_s32(acc1)); }
// {v00, v01, v10, v11} from four int32x4 whose lane sums are the outputs.
inline int32x4_t reduce4(int32x4_t v00, int32x4_t v01, int32x4_t v10, int32x4_t v11) {
  return vpaddq_s32(vpaddq_s32(v00, v01), vpaddq_s32(v10, v11));
}
// {x0 * y0, x0 * y1, x1 * y0, x1 * y1}.
inline float32x4_t outer(float x0, float x1, float32x2_t y) {
  return vcombine_f32(vmul_n_f32(y, x0), vmul_n_f32(y, x1));
}
inline float32x2_t act_scales(const uint8_t* a0, const uint8_t* a1) {
  return float32x2_t{ld_f32(a0 + kQ8K_d), ld_f32(a1 + kQ8K_d)};
}
inline void store_tile(float32x4_t v, float* y, int64_t y_stride) {
  y[0] = vgetq_lane_f32(v, 0);
  y[y_stride] = vgetq_lane_f32(v, 1);
  y[1] = vgetq_lane_f32(v, 2);
  y[y_stride + 1] = vgetq_lane_f32(v, 3);
}

inline int32x4_t widen_lo(uint8x8_t v) { return vreinterpretq_s32_u32(vmovl_u16(vget_low_u16(vmovl_u8(v)))); }
inline int32x4_t widen_hi(uint8x8_t v) { return vreinterpretq_s32_u32(vmovl_high_u16(vmovl_u8(v))); }

// Chunk K (sub-blocks 2K, 2K+1) of a Q4_K/Q5_K block pair: q0, q1 the two rows' qs, qh their qh
// interleaved (l 0-7, 8-15, 16-23, 24-31), y0, y1 the activations. acc0 / acc1 gather
// scale * sums with row 0's / row 1's scales (sc0: sc0..3, sc4..7 of row 0; sc1: row 1).
template <bool kQ5, int K>
inline void q45_chunk_mmla(const uint8_t* q0, const uint8_t* q1, const uint8x16_t qh[4], const uint8_t* y0,
                           const uint8_t* y1, const int32x4_t sc0[2], const int32x4_t sc1[2], int32x4_t& acc0,
                           int32x4_t& acc1) {
  const uint8x16_t b00 = ld(q0 + 32 * K), b01 = ld(q0 + 32 * K + 16);
  const uint8x16_t b10 = ld(q1 + 32 * K), b11 = ld(q1 + 32 * K + 16);
  int8x16_t a[4], b[4];
  decode_q45<kQ5, K>(zip_lo(b00, b10), zip_lo(b01, b11), qh[0], qh[2], a);  // l 0-7, 16-23
  decode_q45<kQ5, K>(zip_hi(b00, b10), zip_hi(b01, b11), qh[1], qh[3], b);  // l 8-15, 24-31
  const uint8_t* ya = y0 + 64 * K;
  const uint8_t* yb = y1 + 64 * K;
  int32x4_t lo = mmla16(vdupq_n_s32(0), a[0], b[0], ya, yb);
  int32x4_t hi = mmla16(vdupq_n_s32(0), a[2], b[2], ya + 32, yb + 32);
  lo = mmla16(lo, a[1], b[1], ya + 16, yb + 16);
  hi = mmla16(hi, a[3], b[3], ya + 48, yb + 48);
  acc0 = vmlaq_laneq_s32(acc0, lo, sc0[K / 2], (2 * K) % 4);
  acc0 = vmlaq_laneq_s32(acc0, hi, sc0[K / 2], (2 * K + 1) % 4);
  acc1 = vmlaq_laneq_s32(acc1, lo, sc1[K / 2], (2 * K) % 4);
  acc1 = vmlaq_laneq_s32(acc1, hi, sc1[K / 2], (2 * K + 1) % 4);
}

// 2 x 2 tile: weight rows w0, w1, activation rows a0, a1; returns {r0c0, r0c1, r1c0, r1c1}.
template <bool kQ5>
float32x4_t q45_tile_mmla(int64_t nb, const uint8_t* w0, const uint8_t* w1, const uint8_t* a0, const uint8_t* a1) {
  constexpr size_t kBytes = kQ5 ? sizeof(block_q5_K) : sizeof(block_q4_K);
  constexpr size_t kQs = kQ5 ? offsetof(block_q5_K, qs) : offsetof(block_q4_K, qs);
  float32x4_t acc_d = vdupq_n_f32(0.0f), acc_m = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nb; ++i, w0 += kBytes, w1 += kBytes, a0 += sizeof(block_q8_K), a1 += sizeof(block_q8_K)) {
    const ScalesMins sm0 = scales_mins_k4(w0 + offsetof(block_q4_K, scales));
    const ScalesMins sm1 = scales_mins_k4(w1 + offsetof(block_q4_K, scales));
    const int32x4_t sc0[2] = {widen_lo(sm0.sc), widen_hi(sm0.sc)};
    const int32x4_t sc1[2] = {widen_lo(sm1.sc), widen_hi(sm1.sc)};
    uint8x16_t qh[4] = {vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0), vdupq_n_u8(0)};
    if constexpr (kQ5) {
      const uint8x16_t h00 = ld(w0 + offsetof(block_q5_K, qh)), h01 = ld(w0 + offsetof(block_q5_K, qh) + 16);
      const uint8x16_t h10 = ld(w1 + offsetof(block_q5_K, qh)), h11 = ld(w1 + offsetof(block_q5_K, qh) + 16);
      qh[0] = zip_lo(h00, h10);
      qh[1] = zip_hi(h00, h10);
      qh[2] = zip_lo(h01, h11);
      qh[3] = zip_hi(h01, h11);
    }
    const uint8_t* y0 = a0 + kQ8K_qs;
    const uint8_t* y1 = a1 + kQ8K_qs;
    int32x4_t acc0 = vdupq_n_s32(0), acc1 = vdupq_n_s32(0);
    q45_chunk_mmla<kQ5, 0>(w0 + kQs, w1 + kQs, qh, y0, y1, sc0, sc1, acc0, acc1);
    q45_chunk_mmla<kQ5, 1>(w0 + kQs, w1 + kQs, qh, y0, y1, sc0, sc1, acc0, acc1);
    q45_chunk_mmla<kQ5, 2>(w0 + kQs, w1 + kQs, qh, y0, y1, sc0, sc1, acc0, acc1);
    q45_chunk_mmla<kQ5, 3>(w0 + kQs, w1 + kQs, qh, y0, y1, sc0, sc1, acc0, acc1);
    const int16x8_t mn0 = vreinterpretq_s16_u16(vmovl_u8(sm0.mn)), mn1 = vreinterpretq_s16_u16(vmovl_u8(sm1.mn));
    const int32x4_t summ = reduce4(mins_dot_bsums(mn0, a0 + kQ8K_bsums), mins_dot_bsums(mn0, a1 + kQ8K_bsums),
                                   mins_dot_bsums(mn1, a0 + kQ8K_bsums), mins_dot_bsums(mn1, a1 + kQ8K_bsums));
    const float32x2_t yd = act_scales(a0, a1);
    const float32x2_t x0 = f16_pair(w0), x1 = f16_pair(w1);
    const float32x4_t d = outer(vget_lane_f32(x0, 0), vget_lane_f32(x1, 0), yd);
    const float32x4_t dmin = outer(vget_lane_f32(x0, 1), vget_lane_f32(x1, 1), yd);
    acc_d = vfmaq_f32(acc_d, d, vcvtq_f32_s32(merge_rows(acc0, acc1)));
    acc_m = vfmaq_f32(acc_m, dmin, vcvtq_f32_s32(summ));
  }
  return vsubq_f32(acc_d, acc_m);
}

// Chunk K of half H of a Q6_K block pair (groups 8H+2K, 8H+2K+1): l, h the two rows' ql / qh of
// the half interleaved, lo = bytes 0-7 of each 16, hi = bytes 8-15. sc0 / sc1: the int32 scales.
template <int H, int K>
inline void q6_chunk_mmla(const uint8x16_t l_lo[4], const uint8x16_t l_hi[4], const uint8x16_t h_lo[2],
                          const uint8x16_t h_hi[2], const uint8_t* y0, const uint8_t* y1, const int32x4_t sc0[4],
                          const int32x4_t sc1[4], int32x4_t& acc0, int32x4_t& acc1) {
  int8x16_t a[2], b[2];
  decode_q6_chunk<K>(l_lo, h_lo, a);
  decode_q6_chunk<K>(l_hi, h_hi, b);
  constexpr int g = 8 * H + 2 * K;
  const size_t off = 128 * H + 32 * K;
  const int32x4_t v0 = mmla16(vdupq_n_s32(0), a[0], b[0], y0 + off, y1 + off);
  const int32x4_t v1 = mmla16(vdupq_n_s32(0), a[1], b[1], y0 + off + 16, y1 + off + 16);
  acc0 = vmlaq_laneq_s32(acc0, v0, sc0[g / 4], g % 4);
  acc0 = vmlaq_laneq_s32(acc0, v1, sc0[g / 4], (g + 1) % 4);
  acc1 = vmlaq_laneq_s32(acc1, v0, sc1[g / 4], g % 4);
  acc1 = vmlaq_laneq_s32(acc1, v1, sc1[g / 4], (g + 1) % 4);
}

template <int H>
inline void q6_half_mmla(const uint8_t* w0, const uint8_t* w1, const uint8_t* y0, const uint8_t* y1,
                         const int32x4_t sc0[4], const int32x4_t sc1[4], int32x4_t& acc0, int32x4_t& acc1) {
  const uint8_t* ql0 = w0 + offsetof(block_q6_K, ql) + 64 * H;
  const uint8_t* ql1 = w1 + offsetof(block_q6_K, ql) + 64 * H;
  const uint8_t* qh0 = w0 + offsetof(block_q6_K, qh) + 32 * H;
  const uint8_t* qh1 = w1 + offsetof(block_q6_K, qh) + 32 * H;
  uint8x16_t l_lo[4], l_hi[4], h_lo[2], h_hi[2];
  for (int k = 0; k < 4; ++k) {
    const uint8x16_t u = ld(ql0 + 16 * k), v = ld(ql1 + 16 * k);
    l_lo[k] = zip_lo(u, v);
    l_hi[k] = zip_hi(u, v);
  }
  for (int k = 0; k < 2; ++k) {
    const uint8x16_t u = ld(qh0 + 16 * k), v = ld(qh1 + 16 * k);
    h_lo[k] = zip_lo(u, v);
    h_hi[k] = zip_hi(u, v);
  }
  q6_chunk_mmla<H, 0>(l_lo, l_hi, h_lo, h_hi, y0, y1, sc0, sc1, acc0, acc1);
  q6_chunk_mmla<H, 1>(l_lo, l_hi, h_lo, h_hi, y0, y1, sc0, sc1, acc0, acc1);
  q6_chunk_mmla<H, 2>(l_lo, l_hi, h_lo, h_hi, y0, y1, sc0, sc1, acc0, acc1);
  q6_chunk_mmla<H, 3>(l_lo, l_hi, h_lo, h_hi, y0, y1, sc0, sc1, acc0, acc1);
}

inline void widen_scales_i8(int8x16_t s, int32x4_t out[4]) {
  const int16x8_t lo = vmovl_s8(vget_low_s8(s)), hi = vmovl_high_s8(s);
  out[0] = vmovl_s16(vget_low_s16(lo));
  out[1] = vmovl_high_s16(lo);
  out[2] = vmovl_s16(vget_low_s16(hi));
  out[3] = vmovl_high_s16(hi);
}

float32x4_t q6_tile_mmla(int64_t nb, const uint8_t* w0, const uint8_t* w1, const uint8_t* a0, const uint8_t* a1) {
  float32x4_t acc = vdupq_n_f32(0.0f);
  for (int64_t i = 0; i < nb;
       ++i, w0 += sizeof(block_q6_K), w1 += sizeof(block_q6_K), a0 += sizeof(block_q8_K), a1 += sizeof(block_q8_K)) {
    const int8x16_t s0 = lds(w0 + offsetof(block_q6_K, scales)), s1 = lds(w1 + offsetof(block_q6_K, scales));
    const Q6Scales m0 = q6k_minus32_scales(s0), m1 = q6k_minus32_scales(s1);
    const int32x4_t offsets = reduce4(q6k_offset_sum(m0, a0 + kQ8K_bsums), q6k_offset_sum(m0, a1 + kQ8K_bsums),
                                      q6k_offset_sum(m1, a0 + kQ8K_bsums), q6k_offset_sum(m1, a1 + kQ8K_bsums));
    int32x4_t sc0[4], sc1[4];
    widen_scales_i8(s0, sc0);
    widen_scales_i8(s1, sc1);
    int32x4_t acc0 = vdupq_n_s32(0), acc1 = vdupq_n_s32(0);
    q6_half_mmla<0>(w0, w1, a0 + kQ8K_qs, a1 + kQ8K_qs, sc0, sc1, acc0, acc1);
    q6_half_mmla<1>(w0, w1, a0 + kQ8K_qs, a1 + kQ8K_qs, sc0, sc1, acc0, acc1);
    const float32x4_t d = outer(f16_one(w0 + offsetof(block_q6_K, d)), f16_one(w1 + offsetof(block_q6_K, d)),
                                act_scales(a0, a1));
    acc = vfmaq_f32(acc, d, vcvtq_f32_s32(vaddq_s32(merge_rows(acc0, acc1), offsets)));
  }
  return acc;
}

// gemm: 2 x 2 SMMLA tiles; a last odd activation row per row pair and a last odd weight row use
// the dotprod tiles (Tiles, the same results as the dotprod vec_dot).
template <template <int> class Tiles, float32x4_t (*Tile2x2)(int64_t, const uint8_t*, const uint8_t*,
                                                             const uint8_t*, const uint8_t*)>
void gemm_mmla(int64_t n, const void* w, size_t w_stride, int64_t nr, const void* a, size_t a_stride, int64_t nc,
               float* y, int64_t y_stride) {
  const int64_t nb = n / QK_K;
  const auto* wr = static_cast<const uint8_t*>(w);
  const auto* ar = static_cast<const uint8_t*>(a);
  int64_t r = 0;
  for (; r + 1 < nr; r += 2) {
    const uint8_t* w0 = wr + r * w_stride;
    const uint8_t* w1 = w0 + w_stride;
    int64_t c = 0;
    for (; c + 1 < nc; c += 2) {
      const uint8_t* a0 = ar + c * a_stride;
      store_tile(Tile2x2(nb, w0, w1, a0, a0 + a_stride), y + c * y_stride + r, y_stride);
    }
    if (c < nc) {
      Tiles<1>::run(nb, w0, ar + c * a_stride, a_stride, y + c * y_stride + r);
      Tiles<1>::run(nb, w1, ar + c * a_stride, a_stride, y + c * y_stride + r + 1);
    }
  }
  if (r < nr) row_sdot<Tiles>(nb, wr + r * w_stride, ar, a_stride, nc, y + r, y_stride);
}

}  // namespace

void fill_kernel_table_i8mm_k456(KernelTable& t) {
  t.gemm[static_cast<int>(Type::Q4_K)] = gemm_mmla<Q4Tiles, q45_tile_mmla<false>>;
  t.gemm[static_cast<int>(Type::Q5_K)] = gemm_mmla<Q5Tiles, q45_tile_mmla<true>>;
  t.gemm[static_cast<int>(Type::Q6_K)] = gemm_mmla<Q6Tiles, q6_tile_mmla>;
}

}  // namespace les
