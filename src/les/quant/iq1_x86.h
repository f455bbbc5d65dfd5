// x86 kernels of IQ1_S and IQ1_M over 256-bit vectors, shared by kernels_iq1_avx2.cpp,
// kernels_iq1_avxvnni.cpp and kernels_iq1_avx512.cpp (each instantiates them with its own ISA
// flags; everything here has internal linkage, so each file keeps its own copy).
//
// Per block, each group of 8 weights is one entry of the signed grid (iq1_common.h): the bytes
// 8 * (grid + delta) in {-9, -7, -1, 1, 7, 9}, picked by the group's 11-bit index and delta sign.
// A sub-block's dot with the activations, times its scale 2 ls + 1, summed over the block, is
// the exact integer 8 * sumi + sumi1 of the scalar reference (iq1_ref.cpp), so
//   sumf += (d_w * d_a) * (float(total) * 1/8)
// gives the scalar's float bit for bit (float(total) / 8 equals its sumi + sumi1 / 8: every
// value involved is below 2^24). The products: |a| * (w with a's sign), exact for every int8
// activation, -128 included (|-128| = 128 is a valid unsigned byte, |w| <= 9 never wraps).
// - Dp16 (AVX2): vpmaddubsw into int16 pairs (at most 2 * 128 * 9), vpmaddwd by the scales.
// - DpVnni (AVX-VNNI, AVX-512 VNNI on ymm): vpdpbusd into int32 quads (|quad| <= 4608, so the
//   low 16 bits hold it, sign-extended), vpdpwssd by (scale, 0) pairs.
// vec_dot decodes each sub-block as it multiplies it (nothing stored); gemm takes one weight row
// at a time and decodes each block once for up to kTokens activation rows (one row: vec_dot per
// row); per output the same block sequence and float operations as vec_dot.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "les/quant/blocks.h"
#include "les/quant/iq1_common.h"
#include "les/quant/types.h"

namespace les {
namespace {
namespace iq1_x86 {

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// The 4 signed-grid entries whose 12-bit indices are the 16-bit fields of idx.
inline __m256i grid4(const uint64_t* sg, uint64_t idx) {
  return _mm256_setr_epi64x(static_cast<long long>(sg[idx & 0xffff]), static_cast<long long>(sg[(idx >> 16) & 0xffff]),
                            static_cast<long long>(sg[(idx >> 32) & 0xffff]), static_cast<long long>(sg[idx >> 48]));
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// The integer dots. pick(p): the vpshufb control that spreads word p of each 128-bit lane of a
// scale vector into the layout dot() multiplies by.
struct Dp16 {
  static __m256i pick(int p) { return _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * p)); }
  // acc + s * (sum of w a over pairs), as int32 lanes.
  static __m256i dot(__m256i acc, __m256i w, __m256i a, __m256i s) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(a), _mm256_sign_epi8(w, a));
    return _mm256_add_epi32(acc, _mm256_madd_epi16(p, s));
  }
};

#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define LES_IQ1_VNNI_DPBUSD _mm256_dpbusd_epi32
#define LES_IQ1_VNNI_DPWSSD _mm256_dpwssd_epi32
#elif defined(__AVXVNNI__)
#define LES_IQ1_VNNI_DPBUSD _mm256_dpbusd_avx_epi32
#define LES_IQ1_VNNI_DPWSSD _mm256_dpwssd_avx_epi32
#endif

#ifdef LES_IQ1_VNNI_DPBUSD
struct DpVnni {
  // (scale, 0) word pairs: vpdpwssd then multiplies the low word of each quad sum.
  static __m256i pick(int p) { return _mm256_set1_epi32(static_cast<int>(0x80800100u + 0x0202u * static_cast<unsigned>(p))); }
  static __m256i dot(__m256i acc, __m256i w, __m256i a, __m256i s) {
    const __m256i q = LES_IQ1_VNNI_DPBUSD(_mm256_setzero_si256(), _mm256_abs_epi8(a), _mm256_sign_epi8(w, a));
    return LES_IQ1_VNNI_DPWSSD(acc, q, s);
  }
};
#endif

// One block of weights: its super-scale, its scale multipliers 2 ls + 1 as int16 words, and its
// sub-blocks of 32 signed weights (decoded on demand).
// IQ1_S: 2 bytes d, qs[32], qh[8] (uint16: 3 index bits per group, ls at 12, sign at 15); the
// 8 multipliers sit in words 0..7 of both 128-bit lanes.
struct BlockS {
  static constexpr size_t kBytes = sizeof(block_iq1_s);
  const uint8_t* qs;
  const uint8_t* qh;
  float d;
  __m256i scales;
  explicit BlockS(const uint8_t* b) : qs(b + offsetof(block_iq1_s, qs)), qh(b + offsetof(block_iq1_s, qh)) {
    d = _cvtsh_ss(load_u16(b));
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qh));
    // 2 ((h >> 12) & 7) + 1 = ((h >> 11) & 14) + 1
    const __m128i m = _mm_add_epi16(_mm_and_si128(_mm_srli_epi16(h, 11), _mm_set1_epi16(14)), _mm_set1_epi16(1));
    scales = _mm256_broadcastsi128_si256(m);
  }
  static int word(int ib) { return ib; }
  __m256i weights(int ib, const uint64_t* sg) const {
    const uint16_t h = load_u16(qh + 2 * ib);
    const uint64_t idx = _pdep_u64(load_u32(qs + 4 * ib), 0x00ff00ff00ff00ffull) | _pdep_u64(h, 0x0700070007000700ull) |
                         static_cast<uint64_t>(h >> 15) * 0x0800080008000800ull;
    return grid4(sg, idx);
  }
};

// IQ1_M: qs[32], qh[16] (a nibble per group: 3 index bits and the sign), scales[8] (four
// uint16: 3-bit scales per 16 elements, the fp16 d in their top nibbles). The 64-bit lanes of the
// multiplier vector are the scale words shifted by 0, 6 (low 128 bits: halves h = 4k, 4k + 2 at
// words k, 4 + k) and 3, 9 (high: h = 4k + 1, 4k + 3): sub-block ib's halves 2 ib and 2 ib + 1
// are word 4 (ib % 2) + ib / 2 of the low and of the high lane.
struct BlockM {
  static constexpr size_t kBytes = sizeof(block_iq1_m);
  const uint8_t* qs;
  const uint8_t* qh;
  float d;
  __m256i scales;
  explicit BlockM(const uint8_t* b) : qs(b + offsetof(block_iq1_m, qs)), qh(b + offsetof(block_iq1_m, qh)) {
    uint64_t sc64;
    std::memcpy(&sc64, b + offsetof(block_iq1_m, scales), 8);
    const auto dbits = static_cast<uint16_t>(((sc64 >> 12) & 0x000f) | ((sc64 >> 24) & 0x00f0) | ((sc64 >> 36) & 0x0f00) |
                                             ((sc64 >> 48) & 0xf000));
    d = _cvtsh_ss(dbits);
    const __m256i raw = _mm256_srlv_epi64(_mm256_set1_epi64x(static_cast<long long>(sc64)), _mm256_setr_epi64x(0, 6, 3, 9));
    scales = _mm256_add_epi16(_mm256_slli_epi16(_mm256_and_si256(raw, _mm256_set1_epi16(7)), 1), _mm256_set1_epi16(1));
  }
  static int word(int ib) { return 4 * (ib % 2) + ib / 2; }
  __m256i weights(int ib, const uint64_t* sg) const {
    const uint64_t idx = _pdep_u64(load_u32(qs + 4 * ib), 0x00ff00ff00ff00ffull) | _pdep_u64(load_u16(qh + 2 * ib), 0x0f000f000f000f00ull);
    return grid4(sg, idx);
  }
};

template <Type T>
using Block = std::conditional_t<T == Type::IQ1_S, BlockS, BlockM>;

// The float step of the scalar reference for one block, rounded before the caller adds it (the
// ISA files may contract a product into a following add; the empty asm keeps it apart).
inline float block_term(float dw, const uint8_t* yb, int total) {
  float da;
  std::memcpy(&da, yb + offsetof(block_q8_K, d), 4);
  float t = dw * da * (static_cast<float>(total) * 0.125f);
  __asm__("" : "+x"(t));
  return t;
}

// The exact block total 8 * sumi + sumi1 of a weight block against the Q8_K quants q8.
template <class D, class B>
inline int block_total(const B& x, const uint64_t* sg, const uint8_t* q8) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ib += 2) {
    acc0 = D::dot(acc0, x.weights(ib, sg), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * ib)),
                  _mm256_shuffle_epi8(x.scales, D::pick(B::word(ib))));
    acc1 = D::dot(acc1, x.weights(ib + 1, sg), _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * ib + 32)),
                  _mm256_shuffle_epi8(x.scales, D::pick(B::word(ib + 1))));
  }
  return hsum_i32(_mm256_add_epi32(acc0, acc1));
}

// A block decoded once for several activation rows (gemm).
struct Decoded {
  __m256i w[8];
  __m256i s[8];
  float d;
};

template <class D, class B>
inline void decode(const B& x, const uint64_t* sg, Decoded& out) {
  out.d = x.d;
  for (int ib = 0; ib < 8; ++ib) {
    out.w[ib] = x.weights(ib, sg);
    out.s[ib] = _mm256_shuffle_epi8(x.scales, D::pick(B::word(ib)));
  }
}

template <class D>
inline int decoded_total(const Decoded& x, const uint8_t* q8) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ib += 2) {
    acc0 = D::dot(acc0, x.w[ib], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * ib)), x.s[ib]);
    acc1 = D::dot(acc1, x.w[ib + 1], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * ib + 32)), x.s[ib + 1]);
  }
  return hsum_i32(_mm256_add_epi32(acc0, acc1));
}

template <class D, Type T>
float vec_dot(int64_t n, const void* vw, const void* va) {
  using B = Block<T>;
  const uint64_t* sg = iq1_signed_grid();
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  float sumf = 0;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* yb = a + i * sizeof(block_q8_K);
    const B x(w + i * B::kBytes);
    sumf += block_term(x.d, yb, block_total<D>(x, sg, yb + offsetof(block_q8_K, qs)));
  }
  return sumf;
}

constexpr int64_t kTokens = 16;  // activation rows per pass over a weight row

template <class D, Type T>
void gemm(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y, int64_t ys) {
  using B = Block<T>;
  if (nc == 1) {
    for (int64_t r = 0; r < nr; ++r) y[r] = vec_dot<D, T>(n, static_cast<const uint8_t*>(vw) + static_cast<size_t>(r) * ws, va);
    return;
  }
  const uint64_t* sg = iq1_signed_grid();
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  Decoded x;
  for (int64_t c0 = 0; c0 < nc; c0 += kTokens) {
    const int64_t cc = nc - c0 < kTokens ? nc - c0 : kTokens;
    for (int64_t r = 0; r < nr; ++r) {
      const uint8_t* wr = w + static_cast<size_t>(r) * ws;
      float sumf[kTokens] = {};
      for (int64_t i = 0; i < n / QK_K; ++i) {
        decode<D>(B(wr + i * B::kBytes), sg, x);
        for (int64_t c = 0; c < cc; ++c) {
          const uint8_t* yb = a + static_cast<size_t>(c0 + c) * as + i * sizeof(block_q8_K);
          sumf[c] += block_term(x.d, yb, decoded_total<D>(x, yb + offsetof(block_q8_K, qs)));
        }
      }
      for (int64_t c = 0; c < cc; ++c) y[(c0 + c) * ys + r] = sumf[c];
    }
  }
}

}  // namespace iq1_x86
}  // namespace
}  // namespace les
