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
// gemm: one weight row at a time, each block decoded once for up to kTokens activation rows;
// per output the same block sequence and float operations as vec_dot.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

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

// A decoded block: 8 sub-blocks of 32 signed weights and their scales as 16 int16 (low 128 bits
// the scale of elements 0-15, high 128 bits that of elements 16-31), and the fp16 super-scale.
struct Decoded {
  __m256i w[8];
  __m256i s[8];
  float d;
};

// IQ1_S block: 2 bytes d, qs[32], qh[8] (uint16: 3 index bits per group, ls at 12, sign at 15).
inline void decode_iq1_s(const uint8_t* b, const uint64_t* sg, Decoded& out) {
  out.d = _cvtsh_ss(load_u16(b));
  const uint8_t* qs = b + offsetof(block_iq1_s, qs);
  const uint8_t* qh = b + offsetof(block_iq1_s, qh);
  for (int ib = 0; ib < 8; ++ib) {
    const uint16_t h = load_u16(qh + 2 * ib);
    const uint64_t idx = _pdep_u64(load_u32(qs + 4 * ib), 0x00ff00ff00ff00ffull) | _pdep_u64(h, 0x0700070007000700ull) |
                         static_cast<uint64_t>(h >> 15) * 0x0800080008000800ull;
    out.w[ib] = grid4(sg, idx);
    out.s[ib] = _mm256_set1_epi16(static_cast<short>(iq1s_scale(h)));
  }
}

// IQ1_M block: qs[32], qh[16] (a nibble per group: 3 index bits and the sign), scales[8] (four
// uint16: 3-bit scales per 16 elements, the fp16 d in their top nibbles).
inline void decode_iq1_m(const uint8_t* b, const uint64_t* sg, Decoded& out) {
  const uint8_t* qs = b + offsetof(block_iq1_m, qs);
  const uint8_t* qh = b + offsetof(block_iq1_m, qh);
  uint64_t sc64;
  std::memcpy(&sc64, b + offsetof(block_iq1_m, scales), 8);
  const uint16_t dbits = static_cast<uint16_t>(((sc64 >> 12) & 0x000f) | ((sc64 >> 24) & 0x00f0) | ((sc64 >> 36) & 0x0f00) |
                                               ((sc64 >> 48) & 0xf000));
  out.d = _cvtsh_ss(dbits);
  // 2 ls + 1 for the 16 halves h: 64-bit lanes shifted by 0, 6 (low 128: h = 4k, 4k + 2) and
  // 3, 9 (high 128: h = 4k + 1, 4k + 3), so word k of lane j holds the scale of h = 4k + ...
  const __m256i raw = _mm256_srlv_epi64(_mm256_set1_epi64x(static_cast<long long>(sc64)), _mm256_setr_epi64x(0, 6, 3, 9));
  const __m256i scales = _mm256_add_epi16(_mm256_slli_epi16(_mm256_and_si256(raw, _mm256_set1_epi16(7)), 1), _mm256_set1_epi16(1));
  for (int ib = 0; ib < 8; ++ib) {
    const uint64_t idx = _pdep_u64(load_u32(qs + 4 * ib), 0x00ff00ff00ff00ffull) | _pdep_u64(load_u16(qh + 2 * ib), 0x0f000f000f000f00ull);
    out.w[ib] = grid4(sg, idx);
    // Sub-block ib's halves are h = 2 ib (low 128) and 2 ib + 1 (high 128), both at word
    // p = 4 (ib % 2) + ib / 2 of their 128-bit lane.
    const int p = 4 * (ib % 2) + ib / 2;
    out.s[ib] = _mm256_shuffle_epi8(scales, _mm256_set1_epi16(static_cast<short>(0x0100 + 0x0202 * p)));
  }
}

inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

struct Dp16 {
  static __m256i scale(__m256i s16) { return s16; }
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
  static __m256i scale(__m256i s16) { return _mm256_and_si256(s16, _mm256_set1_epi32(0xffff)); }
  static __m256i dot(__m256i acc, __m256i w, __m256i a, __m256i s) {
    const __m256i q = LES_IQ1_VNNI_DPBUSD(_mm256_setzero_si256(), _mm256_abs_epi8(a), _mm256_sign_epi8(w, a));
    return LES_IQ1_VNNI_DPWSSD(acc, q, s);
  }
};
#endif

template <Type T>
inline void decode(const uint8_t* b, const uint64_t* sg, Decoded& out) {
  if constexpr (T == Type::IQ1_S) {
    decode_iq1_s(b, sg, out);
  } else {
    decode_iq1_m(b, sg, out);
  }
}

template <Type T>
constexpr size_t block_bytes() {
  return T == Type::IQ1_S ? sizeof(block_iq1_s) : sizeof(block_iq1_m);
}

// The exact block total 8 * sumi + sumi1 of a decoded block (scales already in D's layout)
// against one Q8_K block.
template <class D>
inline int block_total(const Decoded& x, const uint8_t* q8) {
  __m256i acc0 = _mm256_setzero_si256(), acc1 = _mm256_setzero_si256();
  for (int ib = 0; ib < 8; ib += 2) {
    acc0 = D::dot(acc0, x.w[ib], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * ib)), x.s[ib]);
    acc1 = D::dot(acc1, x.w[ib + 1], _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q8 + 32 * ib + 32)), x.s[ib + 1]);
  }
  return hsum_i32(_mm256_add_epi32(acc0, acc1));
}

template <class D, Type T>
inline void decode_for(const uint8_t* b, const uint64_t* sg, Decoded& x) {
  decode<T>(b, sg, x);
  for (auto& s : x.s) s = D::scale(s);
}

// The float step of the scalar reference for one block, rounded before the caller adds it (the
// ISA files may contract a product into a following add; the empty asm keeps it apart).
inline float block_term(float dw, const uint8_t* yb, int total) {
  float da;
  std::memcpy(&da, yb + offsetof(block_q8_K, d), 4);
  float t = dw * da * (static_cast<float>(total) * 0.125f);
  __asm__("" : "+x"(t));
  return t;
}

template <class D, Type T>
float vec_dot(int64_t n, const void* vw, const void* va) {
  const uint64_t* sg = iq1_signed_grid();
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  float sumf = 0;
  Decoded x;
  for (int64_t i = 0; i < n / QK_K; ++i) {
    const uint8_t* yb = a + i * sizeof(block_q8_K);
    decode_for<D, T>(w + i * block_bytes<T>(), sg, x);
    sumf += block_term(x.d, yb, block_total<D>(x, yb + offsetof(block_q8_K, qs)));
  }
  return sumf;
}

constexpr int64_t kTokens = 16;  // activation rows per pass over a weight row

template <class D, Type T>
void gemm(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y, int64_t ys) {
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
        decode_for<D, T>(wr + i * block_bytes<T>(), sg, x);
        for (int64_t c = 0; c < cc; ++c) {
          const uint8_t* yb = a + static_cast<size_t>(c0 + c) * as + i * sizeof(block_q8_K);
          sumf[c] += block_term(x.d, yb, block_total<D>(x, yb + offsetof(block_q8_K, qs)));
        }
      }
      for (int64_t c = 0; c < cc; ++c) y[(c0 + c) * ys + r] = sumf[c];
    }
  }
}

}  // namespace iq1_x86
}  // namespace
}  // namespace les
