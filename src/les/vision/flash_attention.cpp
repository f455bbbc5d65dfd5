#include "les/vision/flash_attention.h"

#include <cmath>
#include <vector>

#include "les/quant/kernels.h"
#include "les/util/fp16.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace les::vision {

bool llamacpp_fa_tiled(int64_t head_dim, int64_t n_queries) {
  constexpr int64_t kTileQ = 64;  // GGML_FA_TILE_Q
  if (n_queries < kTileQ) return false;
  int64_t lanes = 1;  // no SIMD: the tiled kernel takes any width
  switch (kernels().isa) {
    case Isa::avx512: lanes = 16; break;
    case Isa::avx2:
    case Isa::avx_vnni: lanes = 8; break;
    case Isa::neon:
    case Isa::dotprod:
    case Isa::i8mm: lanes = 4; break;
    case Isa::scalar: lanes = 1; break;
  }
  return head_dim % lanes == 0;
}

namespace {

// acc = half(acc * s)
void scale_f16_scalar(uint16_t* acc, int64_t d, float s) {
  for (int64_t i = 0; i < d; ++i) acc[i] = f32_to_fp16(fp16_to_f32(acc[i]) * s);
}
// acc = half(acc + v * s), fused
void mad_f16_scalar(uint16_t* acc, const uint16_t* v, int64_t d, float s) {
  for (int64_t i = 0; i < d; ++i) acc[i] = f32_to_fp16(std::fma(fp16_to_f32(v[i]), s, fp16_to_f32(acc[i])));
}

#if defined(__x86_64__)
__attribute__((target("avx2,f16c,fma"))) void scale_f16_avx2(uint16_t* acc, int64_t d, float s) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + i), _mm256_cvtps_ph(_mm256_mul_ps(a, sv), _MM_FROUND_TO_NEAREST_INT));
  }
  scale_f16_scalar(acc + i, d - i, s);
}
__attribute__((target("avx2,f16c,fma"))) void mad_f16_avx2(uint16_t* acc, const uint16_t* v, int64_t d, float s) {
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= d; i += 8) {
    const __m256 a = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(acc + i)));
    const __m256 x = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(v + i)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(acc + i),
                     _mm256_cvtps_ph(_mm256_fmadd_ps(x, sv, a), _MM_FROUND_TO_NEAREST_INT));
  }
  mad_f16_scalar(acc + i, v + i, d - i, s);
}
#endif

bool use_avx2() {
#if defined(__x86_64__)
  static const bool yes = isa_supported(Isa::avx2);
  return yes;
#else
  return false;
#endif
}

}  // namespace

void fa_query_f16acc(const float* dots, int64_t n_keys, const uint16_t* v16, size_t v_stride, int64_t d, float scale,
                     float* out) {
  thread_local std::vector<uint16_t> acc;
  acc.assign(static_cast<size_t>(d), 0);
  const bool simd = use_avx2();
  float m = -INFINITY, sum = 0.0f;
  for (int64_t t = 0; t < n_keys; ++t) {
    const float s = dots[t] * scale;
    float ms = 1.0f, vs = 1.0f;
    if (s > m) {
      const float m_old = m;
      m = s;
      ms = std::exp(m_old - m);
#if defined(__x86_64__)
      if (simd) scale_f16_avx2(acc.data(), d, ms);
      else
#endif
        scale_f16_scalar(acc.data(), d, ms);
    } else {
      vs = std::exp(s - m);
    }
    const uint16_t* v = v16 + static_cast<size_t>(t) * v_stride;
#if defined(__x86_64__)
    if (simd) mad_f16_avx2(acc.data(), v, d, vs);
    else
#endif
      mad_f16_scalar(acc.data(), v, d, vs);
    sum = sum * ms + vs;
  }
  const float inv = sum == 0.0f ? 0.0f : 1.0f / sum;
  for (int64_t i = 0; i < d; ++i) out[i] = fp16_to_f32(acc[static_cast<size_t>(i)]) * inv;
}

}  // namespace les::vision
