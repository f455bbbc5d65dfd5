// The fast weight quantizer with AVX-512 lanes: one zmm register per 16 lanes. Compiled with the
// avx512 flags and -ffp-contract=off (CMakeLists.txt); reached only through the kernel table after
// the dispatcher has checked the CPU. Bit-identical to quantize_fast.cpp's portable lanes.

// GCC 12 reports the deliberately undefined pass-through operand of the unmasked AVX-512
// shuffle intrinsics as "maybe uninitialized" once they are inlined (a false positive).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include "les/quant/kernels_internal.h"
#include "les/quant/quantize_fast.h"

namespace les {
namespace {

struct LanesAvx512 {
  using F = __m512;
  using M = __mmask16;

  static F load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, F a) { _mm512_storeu_ps(p, a); }
  static F set1(float s) { return _mm512_set1_ps(s); }
  static F add(F a, F b) { return _mm512_add_ps(a, b); }
  static F sub(F a, F b) { return _mm512_sub_ps(a, b); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F div(F a, F b) { return _mm512_div_ps(a, b); }
  static F min(F a, F b) { return _mm512_min_ps(a, b); }
  static F max(F a, F b) { return _mm512_max_ps(a, b); }
  static F fma(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static F fms(F a, F b, F c) { return _mm512_fmsub_ps(a, b, c); }
  static F abs(F a) { return _mm512_abs_ps(a); }
  static F sqrt(F a) { return _mm512_sqrt_ps(a); }
  static F round(F a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static F round_clamp(F a, F lo, F hi) { return min(max(round(a), lo), hi); }
  static M gt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_GT_OQ); }
  static M lt(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_LT_OQ); }
  static M eq(F a, F b) { return _mm512_cmp_ps_mask(a, b, _CMP_EQ_OQ); }
  static M none() { return 0; }
  static M and_(M a, M b) { return static_cast<M>(a & b); }
  static M or_(M a, M b) { return static_cast<M>(a | b); }
  static M not_(M a) { return static_cast<M>(~a); }
  static F select(M m, F a, F b) { return _mm512_mask_blend_ps(m, a, b); }
  static F lookup16(const float* table, F idx) {
    return _mm512_permutexvar_ps(_mm512_cvttps_epi32(idx), _mm512_loadu_ps(table));
  }
  static F lookup32(const float* table, F idx) {
    return _mm512_permutex2var_ps(_mm512_loadu_ps(table), _mm512_cvttps_epi32(idx), _mm512_loadu_ps(table + 16));
  }

  // 16 x 16 transpose of registers r (row j = r[j]) into out (out[i] = column i).
  static void transpose(const F* r, F* out) {
    F t[16], u[16];
    for (int k = 0; k < 8; ++k) {
      t[2 * k] = _mm512_unpacklo_ps(r[2 * k], r[2 * k + 1]);
      t[2 * k + 1] = _mm512_unpackhi_ps(r[2 * k], r[2 * k + 1]);
    }
    for (int k = 0; k < 4; ++k) {
      const __m512d a = _mm512_castps_pd(t[4 * k]), b = _mm512_castps_pd(t[4 * k + 1]);
      const __m512d c = _mm512_castps_pd(t[4 * k + 2]), d = _mm512_castps_pd(t[4 * k + 3]);
      u[4 * k + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      u[4 * k + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      u[4 * k + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      u[4 * k + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    // u[4k + c], 128-bit lane q: column 4q + c of rows 4k .. 4k+3.
    for (int c = 0; c < 4; ++c) {
      const F v0 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0x44);
      const F v1 = _mm512_shuffle_f32x4(u[c], u[4 + c], 0xee);
      const F w0 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0x44);
      const F w1 = _mm512_shuffle_f32x4(u[8 + c], u[12 + c], 0xee);
      out[c + 0] = _mm512_shuffle_f32x4(v0, w0, 0x88);
      out[c + 4] = _mm512_shuffle_f32x4(v0, w0, 0xdd);
      out[c + 8] = _mm512_shuffle_f32x4(v1, w1, 0x88);
      out[c + 12] = _mm512_shuffle_f32x4(v1, w1, 0xdd);
    }
  }
  static void load_transposed(const float* src, int stride, F* out) {
    F r[16];
    for (int j = 0; j < 16; ++j) r[j] = _mm512_loadu_ps(src + j * stride);
    transpose(r, out);
  }
  static void store_transposed(const F* in, float* dst, int stride) {
    F r[16];
    transpose(in, r);
    for (int j = 0; j < 16; ++j) _mm512_storeu_ps(dst + j * stride, r[j]);
  }
};

}  // namespace
}  // namespace les

#include "les/quant/quantize_fast_impl.h"

namespace les {

void fill_fast_quantizers_avx512(KernelTable& t) { fastq::FastQuantizers<LanesAvx512>::fill(t); }

}  // namespace les
