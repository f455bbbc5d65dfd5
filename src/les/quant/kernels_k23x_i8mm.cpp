// i8mm (SMMLA) gemm of the k23x family: Q2_K, Q3_K and IQ4_XS weights against Q8_K.
//
// Tiles of 2 weight rows x 2 to 8 activation rows: each pair of weight blocks is decoded once
// (kernels_k23x_arm.h) and interleaved 8 bytes per row, as SMMLA takes its operands; each SMMLA
// adds the 2x2 products of 8 elements, so per block a 2x2 tile gets the exact integer sums of the
// scalar reference, in lanes [r0c0, r0c1, r1c0, r1c1]. The float update is the lane-wise form of
// the dotprod vec_dot's (same operations, same order), so every output equals that vec_dot (which
// this table keeps) bit for bit. Edge rows and columns use the dotprod tiles.
#include "les/quant/kernels_i8mm_zip.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_k23x_arm.h"

namespace les {
namespace {

// 16 decoded bytes of two weight rows, interleaved for SMMLA: elements 0..7 and 8..15.
struct Interleaved {
  int8x16_t lo[16], hi[16];
  [[gnu::always_inline]] void set(const int8x16_t* w0, const int8x16_t* w1) {
    for (int g = 0; g < 16; ++g) {
      lo[g] = zip_lo(w0[g], w1[g]);
      hi[g] = zip_hi(w0[g], w1[g]);
    }
  }
};

// The 2x2 integer products of 16 elements: vector g of both weight rows and both activations.
[[gnu::always_inline]] inline int32x4_t mmla16(int32x4_t acc, const Interleaved& w, int g, const int8_t* a0, const int8_t* a1) {
  const int8x16_t x0 = load_s8(a0), x1 = load_s8(a1);
  return vmmlaq_s32(vmmlaq_s32(acc, w.lo[g], zip_lo(x0, x1)), w.hi[g], zip_hi(x0, x1));
}

// Lane-wise [d(r0), d(r0), d(r1), d(r1)] and [a(c0), a(c1), a(c0), a(c1)].
inline float32x4_t per_row(float r0, float r1) { return vcombine_f32(vdup_n_f32(r0), vdup_n_f32(r1)); }
inline float32x4_t per_col(float c0, float c1) {
  const float32x2_t c = vset_lane_f32(c1, vdup_n_f32(c0), 1);
  return vcombine_f32(c, c);
}

// Lanes [x0 * y0, x0 * y1, x1 * y0, x1 * y1] of two int32x4 partial sums (as the 2x2 tile).
inline int32x4_t products2x2(int32x4_t p00, int32x4_t p01, int32x4_t p10, int32x4_t p11) {
  return vpaddq_s32(vpaddq_s32(p00, p01), vpaddq_s32(p10, p11));
}

struct Q2KPair {
  using T = Q2K;
  Interleaved q;
  float32x4_t d, dmin;
  [[gnu::always_inline]] void set(const Q2K::Weights& w0, const Q2K::Weights& w1) {
    q.set(w0.q, w1.q);
    d = per_row(w0.d, w1.d);
    dmin = per_row(w0.dmin, w1.dmin);
  }
  [[gnu::always_inline]] float32x4_t update(float32x4_t acc, const Q2K::Weights& w0, const Q2K::Weights& w1, const block_q8_K_u& a0,
                     const block_q8_K_u& a1) const {
    int32x4_t s[2] = {vdupq_n_s32(0), vdupq_n_s32(0)};
    for (int g = 0; g < 16; ++g) s[g % 2] = mmla16(s[g % 2], q, g, a0.qs + 16 * g, a1.qs + 16 * g);
    const int32x4_t isum = vaddq_s32(s[0], s[1]);
    const int32x4_t summs = products2x2(Q2K::min_products(w0, a0), Q2K::min_products(w0, a1),
                                        Q2K::min_products(w1, a0), Q2K::min_products(w1, a1));
    const float32x4_t ad = per_col(a0.d, a1.d);
    const float32x4_t dall = vmulq_f32(ad, d), dm = vmulq_f32(ad, dmin);
    return vaddq_f32(acc, vsubq_f32(vmulq_f32(dall, vcvtq_f32_s32(isum)), vmulq_f32(dm, vcvtq_f32_s32(summs))));
  }
};

// Q3_K and IQ4_XS: per sub-block a fresh 2x2 sum, scaled per row (row 0's scales into t0, row
// 1's into t1; lanes 0, 1 of t0 and 2, 3 of t1 are the tile's).
struct Q3KPair {
  using T = Q3K;
  Interleaved q;  // q = u - 4 (signed), so no bsums offset is needed
  float32x4_t d;
  [[gnu::always_inline]] void set(const Q3K::Weights& w0, const Q3K::Weights& w1) {
    int8x16_t s0[16], s1[16];
    for (int g = 0; g < 16; ++g) {
      s0[g] = vsubq_s8(w0.u[g], vdupq_n_s8(4));
      s1[g] = vsubq_s8(w1.u[g], vdupq_n_s8(4));
    }
    q.set(s0, s1);
    d = per_row(w0.d, w1.d);
  }
  [[gnu::always_inline]] float32x4_t update(float32x4_t acc, const Q3K::Weights& w0, const Q3K::Weights& w1, const block_q8_K_u& a0,
                     const block_q8_K_u& a1) const {
    int32x4_t t0 = vdupq_n_s32(0), t1 = vdupq_n_s32(0);
    static_for<16>([&](auto g_) LES_K23X_INLINE {
      constexpr int g = decltype(g_)::value;
      const int32x4_t p = mmla16(vdupq_n_s32(0), q, g, a0.qs + 16 * g, a1.qs + 16 * g);
      t0 = vmlaq_laneq_s32(t0, p, w0.scales[g / 4], g % 4);
      t1 = vmlaq_laneq_s32(t1, p, w1.scales[g / 4], g % 4);
    });
    const int32x4_t isum = vcombine_s32(vget_low_s32(t0), vget_high_s32(t1));
    return vaddq_f32(acc, vmulq_f32(vmulq_f32(d, per_col(a0.d, a1.d)), vcvtq_f32_s32(isum)));
  }
};

struct IQ4XSPair {
  using T = IQ4XS;
  Interleaved q;
  float32x4_t d;
  [[gnu::always_inline]] void set(const IQ4XS::Weights& w0, const IQ4XS::Weights& w1) {
    q.set(w0.q, w1.q);
    d = per_row(w0.d, w1.d);
  }
  [[gnu::always_inline]] float32x4_t update(float32x4_t acc, const IQ4XS::Weights& w0, const IQ4XS::Weights& w1, const block_q8_K_u& a0,
                     const block_q8_K_u& a1) const {
    int32x4_t t0 = vdupq_n_s32(0), t1 = vdupq_n_s32(0);
    static_for<8>([&](auto ib_) LES_K23X_INLINE {
      constexpr int ib = decltype(ib_)::value;
      const int32x4_t p = mmla16(mmla16(vdupq_n_s32(0), q, 2 * ib, a0.qs + 32 * ib, a1.qs + 32 * ib), q, 2 * ib + 1,
                                 a0.qs + 32 * ib + 16, a1.qs + 32 * ib + 16);
      t0 = vmlaq_laneq_s32(t0, p, w0.scales[ib / 4], ib % 4);
      t1 = vmlaq_laneq_s32(t1, p, w1.scales[ib / 4], ib % 4);
    });
    const int32x4_t isum = vcombine_s32(vget_low_s32(t0), vget_high_s32(t1));
    return vaddq_f32(acc, vmulq_f32(vmulq_f32(d, per_col(a0.d, a1.d)), vcvtq_f32_s32(isum)));
  }
};

// Weight rows w0, w1 against NP pairs of activation rows (a_stride bytes apart); out[p] lanes
// [r0c0, r0c1, r1c0, r1c1] of pair p.
template <class P, int NP>
void mmla_tile(int64_t nb, const typename P::T::Block* w0, const typename P::T::Block* w1, const uint8_t* a,
               size_t a_stride, float32x4_t* out) {
  float32x4_t acc[NP];
  for (int p = 0; p < NP; ++p) acc[p] = vdupq_n_f32(0);
  for (int64_t i = 0; i < nb; ++i) {
    typename P::T::Weights d0, d1;
    P::T::decode(w0[i], d0);
    P::T::decode(w1[i], d1);
    P pair;
    pair.set(d0, d1);
    for (int p = 0; p < NP; ++p) {
      const auto* a0 = reinterpret_cast<const block_q8_K_u*>(a + static_cast<size_t>(2 * p) * a_stride);
      const auto* a1 = reinterpret_cast<const block_q8_K_u*>(a + static_cast<size_t>(2 * p + 1) * a_stride);
      acc[p] = pair.update(acc[p], d0, d1, a0[i], a1[i]);
    }
  }
  for (int p = 0; p < NP; ++p) out[p] = acc[p];
}

template <class P>
void gemm_mmla(int64_t n, const void* w, size_t w_stride, int64_t nr, const void* a, size_t a_stride, int64_t nc,
               float* y, int64_t y_stride) {
  using Block = typename P::T::Block;
  const int64_t nb = n / QK_K;
  const auto* wb = static_cast<const uint8_t*>(w);
  const auto* ab = static_cast<const uint8_t*>(a);
  int64_t r = 0;
  for (; r + 2 <= nr; r += 2) {
    const auto* w0 = reinterpret_cast<const Block*>(wb + static_cast<size_t>(r) * w_stride);
    const auto* w1 = reinterpret_cast<const Block*>(wb + static_cast<size_t>(r + 1) * w_stride);
    int64_t c = 0;
    while (nc - c >= 2) {
      float32x4_t out[4];
      const int np = static_cast<int>(std::min<int64_t>(4, (nc - c) / 2));
      const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
      switch (np) {
        case 4: mmla_tile<P, 4>(nb, w0, w1, ac, a_stride, out); break;
        case 3: mmla_tile<P, 3>(nb, w0, w1, ac, a_stride, out); break;
        case 2: mmla_tile<P, 2>(nb, w0, w1, ac, a_stride, out); break;
        default: mmla_tile<P, 1>(nb, w0, w1, ac, a_stride, out); break;
      }
      for (int p = 0; p < np; ++p, c += 2) {
        y[c * y_stride + r] = vgetq_lane_f32(out[p], 0);
        y[(c + 1) * y_stride + r] = vgetq_lane_f32(out[p], 1);
        y[c * y_stride + r + 1] = vgetq_lane_f32(out[p], 2);
        y[(c + 1) * y_stride + r + 1] = vgetq_lane_f32(out[p], 3);
      }
    }
    if (c < nc) {  // the last, odd activation row
      const uint8_t* ac = ab + static_cast<size_t>(c) * a_stride;
      dot_tile<typename P::T, SdotInts, 1>(nb, w0, ac, a_stride, y + c * y_stride + r);
      dot_tile<typename P::T, SdotInts, 1>(nb, w1, ac, a_stride, y + c * y_stride + r + 1);
    }
  }
  if (r < nr) {  // the last, odd weight row
    dot_row_tiles<typename P::T, SdotInts>(n, wb + static_cast<size_t>(r) * w_stride, ab, a_stride, nc, y + r,
                                           y_stride);
  }
}

}  // namespace

void fill_kernel_table_i8mm_k23x(KernelTable& t) {
  t.gemm[static_cast<int>(Type::Q2_K)] = gemm_mmla<Q2KPair>;
  t.gemm[static_cast<int>(Type::Q3_K)] = gemm_mmla<Q3KPair>;
  t.gemm[static_cast<int>(Type::IQ4_XS)] = gemm_mmla<IQ4XSPair>;
}

}  // namespace les
