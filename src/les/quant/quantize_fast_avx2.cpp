// The fast weight quantizer with AVX2 lanes: two ymm registers per 16 lanes. Compiled with the
// avx2 flags and -ffp-contract=off (CMakeLists.txt); reached only through the kernel table after
// the dispatcher has checked the CPU. Bit-identical to quantize_fast.cpp's portable lanes.

#include <immintrin.h>

#include "les/quant/kernels_internal.h"
#include "les/quant/quantize_fast.h"

namespace les {
namespace {

struct LanesAvx2 {
  struct F {
    __m256 a, b;  // lanes 0..7, 8..15
  };
  using M = F;  // all-ones / all-zero lanes

  template <class Op>
  static F map(F x, F y, Op op) {
    return {op(x.a, y.a), op(x.b, y.b)};
  }

  static F load(const float* p) { return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)}; }
  static void store(float* p, F x) {
    _mm256_storeu_ps(p, x.a);
    _mm256_storeu_ps(p + 8, x.b);
  }
  static F set1(float s) { return {_mm256_set1_ps(s), _mm256_set1_ps(s)}; }
  static F add(F x, F y) { return map(x, y, [](__m256 p, __m256 q) { return _mm256_add_ps(p, q); }); }
  static F sub(F x, F y) { return map(x, y, [](__m256 p, __m256 q) { return _mm256_sub_ps(p, q); }); }
  static F mul(F x, F y) { return map(x, y, [](__m256 p, __m256 q) { return _mm256_mul_ps(p, q); }); }
  static F div(F x, F y) { return map(x, y, [](__m256 p, __m256 q) { return _mm256_div_ps(p, q); }); }
  static F min(F x, F y) { return map(x, y, [](__m256 p, __m256 q) { return _mm256_min_ps(p, q); }); }
  static F max(F x, F y) { return map(x, y, [](__m256 p, __m256 q) { return _mm256_max_ps(p, q); }); }
  static F fma(F x, F y, F z) { return {_mm256_fmadd_ps(x.a, y.a, z.a), _mm256_fmadd_ps(x.b, y.b, z.b)}; }
  static F fms(F x, F y, F z) { return {_mm256_fmsub_ps(x.a, y.a, z.a), _mm256_fmsub_ps(x.b, y.b, z.b)}; }
  static F abs(F x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    return {_mm256_andnot_ps(sign, x.a), _mm256_andnot_ps(sign, x.b)};
  }
  static F sqrt(F x) { return {_mm256_sqrt_ps(x.a), _mm256_sqrt_ps(x.b)}; }
  static F round(F x) {
    constexpr int kMode = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    return {_mm256_round_ps(x.a, kMode), _mm256_round_ps(x.b, kMode)};
  }
  static F round_clamp(F x, F lo, F hi) { return min(max(round(x), lo), hi); }
  static M gt(F x, F y) { return {_mm256_cmp_ps(x.a, y.a, _CMP_GT_OQ), _mm256_cmp_ps(x.b, y.b, _CMP_GT_OQ)}; }
  static M lt(F x, F y) { return {_mm256_cmp_ps(x.a, y.a, _CMP_LT_OQ), _mm256_cmp_ps(x.b, y.b, _CMP_LT_OQ)}; }
  static M eq(F x, F y) { return {_mm256_cmp_ps(x.a, y.a, _CMP_EQ_OQ), _mm256_cmp_ps(x.b, y.b, _CMP_EQ_OQ)}; }
  static M none() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static M and_(M x, M y) { return {_mm256_and_ps(x.a, y.a), _mm256_and_ps(x.b, y.b)}; }
  static M or_(M x, M y) { return {_mm256_or_ps(x.a, y.a), _mm256_or_ps(x.b, y.b)}; }
  static M not_(M x) {
    const __m256 ones = _mm256_castsi256_ps(_mm256_set1_epi32(-1));
    return {_mm256_xor_ps(x.a, ones), _mm256_xor_ps(x.b, ones)};
  }
  // m ? y : x
  static F select(M m, F x, F y) { return {_mm256_blendv_ps(x.a, y.a, m.a), _mm256_blendv_ps(x.b, y.b, m.b)}; }
  static F lookup16(const float* table, F idx) {
    const __m256 lo = _mm256_loadu_ps(table), hi = _mm256_loadu_ps(table + 8);
    auto one = [&](__m256 v) {
      const __m256i i = _mm256_cvttps_epi32(v);
      const __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(i, _mm256_set1_epi32(7)));
      return _mm256_blendv_ps(_mm256_permutevar8x32_ps(lo, i), _mm256_permutevar8x32_ps(hi, i), upper);
    };
    return {one(idx.a), one(idx.b)};
  }
  static F lookup32(const float* table, F idx) {
    const __m256 t0 = _mm256_loadu_ps(table), t1 = _mm256_loadu_ps(table + 8);
    const __m256 t2 = _mm256_loadu_ps(table + 16), t3 = _mm256_loadu_ps(table + 24);
    auto one = [&](__m256 v) {
      const __m256i i = _mm256_cvttps_epi32(v);
      const __m256 bit3 = _mm256_castsi256_ps(_mm256_slli_epi32(i, 28));  // sign bit = bit 3 of i
      const __m256 bit4 = _mm256_castsi256_ps(_mm256_slli_epi32(i, 27));  // sign bit = bit 4 of i
      const __m256 lo = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t0, i), _mm256_permutevar8x32_ps(t1, i), bit3);
      const __m256 hi = _mm256_blendv_ps(_mm256_permutevar8x32_ps(t2, i), _mm256_permutevar8x32_ps(t3, i), bit3);
      return _mm256_blendv_ps(lo, hi, bit4);
    };
    return {one(idx.a), one(idx.b)};
  }

  // 8 x 8 transpose: out[i] = column i of the rows r[0..7].
  static void transpose8(const __m256* r, __m256* out) {
    __m256 t[8], s[8];
    for (int k = 0; k < 4; ++k) {
      t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
      t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 2; ++k) {  // rows 4k .. 4k+3
      s[4 * k + 0] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0x44);
      s[4 * k + 1] = _mm256_shuffle_ps(t[4 * k], t[4 * k + 2], 0xee);
      s[4 * k + 2] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0x44);
      s[4 * k + 3] = _mm256_shuffle_ps(t[4 * k + 1], t[4 * k + 3], 0xee);
    }
    for (int c = 0; c < 4; ++c) {
      out[c] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x20);
      out[c + 4] = _mm256_permute2f128_ps(s[c], s[4 + c], 0x31);
    }
  }
  static void load_transposed(const float* src, int stride, F* out) {
    for (int ch = 0; ch < 2; ++ch) {    // columns 8ch .. 8ch+7 -> out[8ch ..]
      for (int rh = 0; rh < 2; ++rh) {  // rows 8rh .. 8rh+7 -> lanes a (rh 0) or b (rh 1)
        __m256 r[8], t[8];
        for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + (8 * rh + j) * stride + 8 * ch);
        transpose8(r, t);
        for (int i = 0; i < 8; ++i) (rh ? out[8 * ch + i].b : out[8 * ch + i].a) = t[i];
      }
    }
  }
  static void store_transposed(const F* in, float* dst, int stride) {
    for (int ch = 0; ch < 2; ++ch) {
      for (int rh = 0; rh < 2; ++rh) {
        __m256 c[8], t[8];
        for (int i = 0; i < 8; ++i) c[i] = rh ? in[8 * ch + i].b : in[8 * ch + i].a;
        transpose8(c, t);
        for (int j = 0; j < 8; ++j) _mm256_storeu_ps(dst + (8 * rh + j) * stride + 8 * ch, t[j]);
      }
    }
  }
};

}  // namespace
}  // namespace les

#include "les/quant/quantize_fast_impl.h"

namespace les {

void fill_fast_quantizers_avx2(KernelTable& t) { fastq::FastQuantizers<LanesAvx2>::fill(t); }

}  // namespace les
