// AVX2 dequantization of the types models are converted from (Q4_K: the Qwen3-30B-A3B-shaped
// source of `les quantize`, where the scalar loop was 13% of the conversion's profile).
// Bit-identical to quant_ref.cpp's dequantizers: the same float products in the same order, never
// fused (`opaque` keeps GCC from contracting a product into the subtraction that follows it).
// Compiled with the avx2 flags; reached only through the kernel table.

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/quant/kernels_internal.h"

namespace les {
namespace {

inline __m256 opaque(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

// fp16 -> float with F16C: exact for every finite value and infinity; a NaN scale makes every
// value of its block NaN either way.
inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);
}

// 8 unsigned bytes -> 8 floats.
inline __m256 bytes_to_float(__m128i b8) { return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b8)); }

// Q4_K: y = (d * sc) * q - (dmin * mn) per sub-block of 32; chunk c of 64 elements uses
// qs[32c .. 32c+31], low nibbles for sub-block 2c, high nibbles for 2c+1.
void dequant_q4_K_avx2(const void* vx, float* y, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(vx);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  for (int64_t i = 0; i < n / QK_K; ++i, p += sizeof(block_q4_K)) {
    const float d = half_at(p + offsetof(block_q4_K, d));
    const float dmin = half_at(p + offsetof(block_q4_K, dmin));
    const uint8_t* s = p + offsetof(block_q4_K, scales);
    const uint8_t* qs = p + offsetof(block_q4_K, qs);
    for (int c = 0; c < 4; ++c) {
      for (int half = 0; half < 2; ++half) {
        const int j = 2 * c + half;  // sub-block
        int sc, mn;
        if (j < 4) {
          sc = s[j] & 63;
          mn = s[j + 4] & 63;
        } else {
          sc = (s[j + 4] & 0x0f) | ((s[j - 4] >> 6) << 4);
          mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
        }
        const __m256 vd = _mm256_set1_ps(d * static_cast<float>(sc));
        const __m256 vm = _mm256_set1_ps(dmin * static_cast<float>(mn));
        for (int k = 0; k < 32; k += 16) {
          __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs + 32 * c + k));
          b = half ? _mm_and_si128(_mm_srli_epi16(b, 4), low4) : _mm_and_si128(b, low4);
          const __m256 q0 = bytes_to_float(b);
          const __m256 q1 = bytes_to_float(_mm_srli_si128(b, 8));
          _mm256_storeu_ps(y + k, _mm256_sub_ps(opaque(_mm256_mul_ps(vd, q0)), vm));
          _mm256_storeu_ps(y + k + 8, _mm256_sub_ps(opaque(_mm256_mul_ps(vd, q1)), vm));
        }
        y += 32;
      }
    }
  }
}

}  // namespace

void fill_dequantizers_avx2(KernelTable& t) { t.dequantize[static_cast<int>(Type::Q4_K)] = dequant_q4_K_avx2; }

}  // namespace les
