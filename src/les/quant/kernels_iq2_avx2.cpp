// AVX2 kernels of IQ2_XXS, IQ2_XS, IQ2_S against Q8_K activations: vec_dot and gemm.
//
// A weight block is decoded into 8 vectors of 32 signed bytes (grid values {8, 25, 43} from the
// codebook, signs from the sign tables below) and 8 vectors of int16 sub-block multipliers
// 2 ls + 1. The products are exact for every int8 activation, -128 included: vpmaddubsw takes |a|
// as its unsigned operand and the weight with the sign of a (|a| * |w| <= 128 * 43, pair sums
// fit int16). Per super-block an exact integer sum, then llama.cpp's generic float order
// (sumf += (d_w * d_a) * bsum, 0.125 * sumf): results are bit-identical to the scalar table's,
// and gemm (weights decoded once per block, reused for every activation row) to vec_dot.

#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/iq2_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"

namespace les {
namespace {
namespace iq2_avx2 {

// Byte k of entry c: -1 where bit k of the sign byte is set, else +1 (for vpsignb).
constexpr uint64_t sign_pattern(uint8_t s) {
  uint64_t v = 0;
  for (int k = 0; k < 8; ++k) v |= static_cast<uint64_t>((s >> k) & 1 ? 0xff : 0x01) << (8 * k);
  return v;
}
// Indexed by a 7-bit sign code (IQ2_XXS, IQ2_XS: the eighth sign is the parity).
constexpr std::array<uint64_t, 128> kCodeSigns = [] {
  std::array<uint64_t, 128> t{};
  for (int c = 0; c < 128; ++c) t[c] = sign_pattern(iq2_signs(c));
  return t;
}();
// Indexed by an explicit sign byte (IQ2_S).
constexpr std::array<uint64_t, 256> kByteSigns = [] {
  std::array<uint64_t, 256> t{};
  for (int c = 0; c < 256; ++c) t[c] = sign_pattern(static_cast<uint8_t>(c));
  return t;
}();

inline __m256i quad(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return _mm256_set_epi64x(static_cast<long long>(d), static_cast<long long>(c), static_cast<long long>(b),
                           static_cast<long long>(a));
}
inline int16_t mult(int ls) { return static_cast<int16_t>(2 * ls + 1); }

inline float ld_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline float ld_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// a * b rounded once: never fused with a following addition (the scalar reference's order).
inline float mul_unfused(float a, float b) {
  float p = a * b;
  __asm__("" : "+x"(p));
  return p;
}

// One decoded weight block: 32 signed weights and the pairs' multipliers per vector.
struct Decoded {
  __m256i w[8];
  __m256i mul[8];
};

inline void decode_xxs(const uint8_t* blk, Decoded& o) {
  const uint8_t* qs = blk + offsetof(block_iq2_xxs, qs);
  for (int j = 0; j < 8; ++j) {
    uint32_t aux[2];
    std::memcpy(aux, qs + 8 * j, 8);
    const __m256i grid = quad(kIq2xxsGrid[aux[0] & 0xff], kIq2xxsGrid[(aux[0] >> 8) & 0xff],
                              kIq2xxsGrid[(aux[0] >> 16) & 0xff], kIq2xxsGrid[aux[0] >> 24]);
    const __m256i sign = quad(kCodeSigns[aux[1] & 127], kCodeSigns[(aux[1] >> 7) & 127], kCodeSigns[(aux[1] >> 14) & 127],
                              kCodeSigns[(aux[1] >> 21) & 127]);
    o.w[j] = _mm256_sign_epi8(grid, sign);
    o.mul[j] = _mm256_set1_epi16(mult(static_cast<int>(aux[1] >> 28)));
  }
}

inline void decode_xs(const uint8_t* blk, Decoded& o) {
  const uint8_t* qs = blk + offsetof(block_iq2_xs, qs);
  const uint8_t* sc = blk + offsetof(block_iq2_xs, scales);
  for (int j = 0; j < 8; ++j) {
    uint16_t q[4];
    std::memcpy(q, qs + 8 * j, 8);
    const __m256i grid = quad(kIq2xsGrid[q[0] & 511], kIq2xsGrid[q[1] & 511], kIq2xsGrid[q[2] & 511], kIq2xsGrid[q[3] & 511]);
    const __m256i sign = quad(kCodeSigns[q[0] >> 9], kCodeSigns[q[1] >> 9], kCodeSigns[q[2] >> 9], kCodeSigns[q[3] >> 9]);
    o.w[j] = _mm256_sign_epi8(grid, sign);
    o.mul[j] = _mm256_set_m128i(_mm_set1_epi16(mult(sc[j] >> 4)), _mm_set1_epi16(mult(sc[j] & 0x0f)));
  }
}

inline void decode_s(const uint8_t* blk, Decoded& o) {
  const uint8_t* qs = blk + offsetof(block_iq2_s, qs);
  const uint8_t* qh = blk + offsetof(block_iq2_s, qh);
  const uint8_t* sc = blk + offsetof(block_iq2_s, scales);
  for (int j = 0; j < 8; ++j) {
    const uint8_t* sg = qs + QK_K / 8 + 4 * j;
    const __m256i grid = quad(kIq2sGrid[iq2s_grid_index(qs, qh, 4 * j)], kIq2sGrid[iq2s_grid_index(qs, qh, 4 * j + 1)],
                              kIq2sGrid[iq2s_grid_index(qs, qh, 4 * j + 2)], kIq2sGrid[iq2s_grid_index(qs, qh, 4 * j + 3)]);
    const __m256i sign = quad(kByteSigns[sg[0]], kByteSigns[sg[1]], kByteSigns[sg[2]], kByteSigns[sg[3]]);
    o.w[j] = _mm256_sign_epi8(grid, sign);
    o.mul[j] = _mm256_set_m128i(_mm_set1_epi16(mult(sc[j] >> 4)), _mm_set1_epi16(mult(sc[j] & 0x0f)));
  }
}

// The exact integer sum of a decoded block against the 256 int8 activations q8.
inline int block_sum(const Decoded& b, const uint8_t* q8) {
  __m256i acc = _mm256_setzero_si256();
  for (int j = 0; j < 8; ++j) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * j));
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(b.w[j], a));
    acc = _mm256_add_epi32(acc, _mm256_madd_epi16(p, b.mul[j]));
  }
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(acc), _mm256_extracti128_si256(acc, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 1));
  return _mm_cvtsi128_si32(s);
}

constexpr size_t kQ8Bytes = sizeof(block_q8_K);
constexpr size_t kQ8d = offsetof(block_q8_K, d);
constexpr size_t kQ8qs = offsetof(block_q8_K, qs);

template <void (*Decode)(const uint8_t*, Decoded&), size_t BlockBytes>
float vec_dot(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  float sumf = 0;
  Decoded b;
  for (int64_t i = 0; i < n / QK_K; ++i, w += BlockBytes, a += kQ8Bytes) {
    Decode(w, b);
    const float d = ld_f16(w) * ld_f32(a + kQ8d);
    sumf += mul_unfused(d, static_cast<float>(block_sum(b, a + kQ8qs)));
  }
  return 0.125f * sumf;
}

// Each weight row is decoded once per block and its products with every activation row taken
// from the decoded form (a row of decoded blocks is kept per thread); vec_dot's integer sums and
// float order for every output.
template <void (*Decode)(const uint8_t*, Decoded&), size_t BlockBytes>
void gemm(int64_t n, const void* vw, size_t w_stride, int64_t nr, const void* va, size_t a_stride, int64_t nc,
          float* y, int64_t y_stride) {
  const int64_t nb = n / QK_K;
  const auto* a = static_cast<const uint8_t*>(va);
  if (nc == 1) {
    for (int64_t r = 0; r < nr; ++r) {
      y[r] = vec_dot<Decode, BlockBytes>(n, static_cast<const uint8_t*>(vw) + static_cast<size_t>(r) * w_stride, va);
    }
    return;
  }
  thread_local std::vector<Decoded> row;
  if (row.size() < static_cast<size_t>(nb)) row.resize(static_cast<size_t>(nb));
  std::vector<float> dw(static_cast<size_t>(nb));
  for (int64_t r = 0; r < nr; ++r) {
    const uint8_t* w = static_cast<const uint8_t*>(vw) + static_cast<size_t>(r) * w_stride;
    for (int64_t i = 0; i < nb; ++i) {
      Decode(w + i * BlockBytes, row[static_cast<size_t>(i)]);
      dw[static_cast<size_t>(i)] = ld_f16(w + i * BlockBytes);
    }
    for (int64_t c = 0; c < nc; ++c) {
      const uint8_t* ac = a + static_cast<size_t>(c) * a_stride;
      float sumf = 0;
      for (int64_t i = 0; i < nb; ++i, ac += kQ8Bytes) {
        const float d = dw[static_cast<size_t>(i)] * ld_f32(ac + kQ8d);
        sumf += mul_unfused(d, static_cast<float>(block_sum(row[static_cast<size_t>(i)], ac + kQ8qs)));
      }
      y[c * y_stride + r] = 0.125f * sumf;
    }
  }
}

}  // namespace iq2_avx2
}  // namespace

void fill_kernel_table_avx2_iq2(KernelTable& t) {
  using namespace iq2_avx2;
  t.vec_dot[static_cast<int>(Type::IQ2_XXS)] = vec_dot<decode_xxs, sizeof(block_iq2_xxs)>;
  t.vec_dot[static_cast<int>(Type::IQ2_XS)] = vec_dot<decode_xs, sizeof(block_iq2_xs)>;
  t.vec_dot[static_cast<int>(Type::IQ2_S)] = vec_dot<decode_s, sizeof(block_iq2_s)>;
  t.gemm[static_cast<int>(Type::IQ2_XXS)] = gemm<decode_xxs, sizeof(block_iq2_xxs)>;
  t.gemm[static_cast<int>(Type::IQ2_XS)] = gemm<decode_xs, sizeof(block_iq2_xs)>;
  t.gemm[static_cast<int>(Type::IQ2_S)] = gemm<decode_s, sizeof(block_iq2_s)>;
}

}  // namespace les
