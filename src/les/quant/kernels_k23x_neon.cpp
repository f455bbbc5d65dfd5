// NEON (Armv8.0, no SDOT) kernels of the k23x family: Q2_K, Q3_K and IQ4_XS weights against Q8_K.
//
// The same structure as the dotprod kernels (kernels_k23x_arm.h): per block the exact integer
// sums of the scalar reference, then one fixed float update. Products are formed with widening
// multiplies into int16 lanes (vmull/vmlal: at most 4 products of |w| <= 45 for Q2_K, 2 of
// |w| <= 127 for IQ4_XS, 8 of w <= 7 for Q3_K, each against |a| <= 128, so no int16 lane
// overflows) and pairwise-widened into int32. gemm: 1 weight row x up to 4 activation rows, each
// weight block decoded once; bit-identical to vec_dot (same integers, same float sequence).
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_k23x_arm.h"

namespace les {
namespace {

struct WideningInts {
  // Sum of w[j] * a[j] over 16 bytes, in int16 lanes (on top of p).
  [[gnu::always_inline]] static int16x8_t mul16(int8x16_t w, int8x16_t a) {
    return vmlal_high_s8(vmull_s8(vget_low_s8(w), vget_low_s8(a)), w, a);
  }
  [[gnu::always_inline]] static int16x8_t mla16(int16x8_t p, int8x16_t w, int8x16_t a) {
    return vmlal_high_s8(vmlal_s8(p, vget_low_s8(w), vget_low_s8(a)), w, a);
  }

  [[gnu::always_inline]] static Q2K::Sums sums(const Q2K::Weights& w, const block_q8_K_u& a) {
    int32x4_t acc = vdupq_n_s32(0);
    static_for<8>([&](auto p) LES_K23X_INLINE {
      const int16x8_t pair = mla16(mul16(w.q[2 * p], load_s8(a.qs + 32 * p)), w.q[2 * p + 1], load_s8(a.qs + 32 * p + 16));
      acc = vpadalq_s16(acc, pair);
    });
    return {vaddvq_s32(acc), vaddvq_s32(Q2K::min_products(w, a))};
  }

  [[gnu::always_inline]] static Q3K::Sums sums(const Q3K::Weights& w, const block_q8_K_u& a) {
    int32x4_t t = Q3K::offset(w, a);
    static_for<4>([&](auto q) LES_K23X_INLINE {
      int16x8_t d[4];
      static_for<4>([&](auto j) LES_K23X_INLINE { d[j] = mul16(w.u[4 * q + j], load_s8(a.qs + 64 * q + 16 * j)); });
      // lanes: sub-block 4q + j in lanes 2j, 2j + 1 (|sum| <= 8 * 7 * 128)
      const int16x8_t s = vpaddq_s16(vpaddq_s16(d[0], d[1]), vpaddq_s16(d[2], d[3]));
      t = vmlaq_s32(t, vpaddlq_s16(s), w.scales[q]);
    });
    return vaddvq_s32(t);
  }

  [[gnu::always_inline]] static IQ4XS::Sums sums(const IQ4XS::Weights& w, const block_q8_K_u& a) {
    int32x4_t t = vdupq_n_s32(0);
    static_for<2>([&](auto q) LES_K23X_INLINE {
      int32x4_t d[4];
      static_for<4>([&](auto j) LES_K23X_INLINE {
        constexpr int ib = 4 * decltype(q)::value + decltype(j)::value;
        d[j] = vpadalq_s16(vpaddlq_s16(mul16(w.q[2 * ib], load_s8(a.qs + 32 * ib))),
                           mul16(w.q[2 * ib + 1], load_s8(a.qs + 32 * ib + 16)));
      });
      t = vmlaq_s32(t, vpaddq_s32(vpaddq_s32(d[0], d[1]), vpaddq_s32(d[2], d[3])), w.scales[q]);
    });
    return vaddvq_s32(t);
  }
};

}  // namespace

void fill_kernel_table_neon_k23x(KernelTable& t) {
  t.vec_dot[static_cast<int>(Type::Q2_K)] = vec_dot_rows<Q2K, WideningInts>;
  t.vec_dot[static_cast<int>(Type::Q3_K)] = vec_dot_rows<Q3K, WideningInts>;
  t.vec_dot[static_cast<int>(Type::IQ4_XS)] = vec_dot_rows<IQ4XS, WideningInts>;
  t.gemm[static_cast<int>(Type::Q2_K)] = gemm_rows_tiled<Q2K, WideningInts>;
  t.gemm[static_cast<int>(Type::Q3_K)] = gemm_rows_tiled<Q3K, WideningInts>;
  t.gemm[static_cast<int>(Type::IQ4_XS)] = gemm_rows_tiled<IQ4XS, WideningInts>;
}

}  // namespace les
