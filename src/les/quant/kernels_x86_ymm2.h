// The vector policy of kernels_x86_tiles.h on pairs of ymm registers (a 64-byte vector as two
// 256-bit halves), shared by the AVX-VNNI kernels (kernels_avxvnni.cpp: vpdpbusd / vpdpwssd) and
// the AVX2 tiles (kernels_tiles_avx2.cpp: the same products emulated exactly by vpmaddubsw /
// vpmaddwd). Include only from a file compiled with at least the AVX2 flags; everything here has
// internal linkage.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "les/quant/kernels_x86_tiles.h"

namespace les {
namespace {
namespace tiles {

struct VI2 {
  __m256i lo, hi;  // int32 lanes 0-7, 8-15
};
struct VF2 {
  __m256 lo, hi;
};

// The vector policy of kernels_x86_tiles.h on pairs of ymm registers, with the 4-byte and
// 2-word dot products dpbusd / dpwssd taken from Dp (on 256-bit halves):
//   Dp::dpbusd(acc, u, s), Dp::dpwssd(acc, x, y): as vpdpbusd / vpdpwssd, exact;
//   optionally Dp::dpbusd_u7(acc, u, s): the same for u <= 127 only (a cheaper path).
// R x C is the largest tile (16 ymm registers: 1 x 2); R1 the rows of a tile when there is one
// activation row, which prefetch the next rows if PF1.
// Ahead1: bytes ahead that a 1 x 1 tile prefetches in its own stream (kernels_x86_tiles.h, ahead_1).
template <class Dp, int R_, int C_, int R1_ = R_, bool PF1 = true, size_t Ahead1 = 0>
struct PYmm2 {
  using VI = VI2;
  using VF = VF2;
  static constexpr int R = R_;
  static constexpr int C = C_;
  static constexpr int R1 = R1_;
  static constexpr bool kPrefetch1 = PF1;
  static constexpr size_t kAhead1 = Ahead1;

  static __m256i bc128(const uint8_t* p) { return _mm256_broadcastsi128_si256(tiles::ld128(p)); }

  static VI izero() { return {_mm256_setzero_si256(), _mm256_setzero_si256()}; }
  static VI set1_8(char v) { return {_mm256_set1_epi8(v), _mm256_set1_epi8(v)}; }
  static VI load64(const uint8_t* p) { return {tiles::ld256(p), tiles::ld256(p + 32)}; }
  static VI bcast32(const uint8_t* p) {
    const __m256i v = tiles::ld256(p);
    return {v, v};
  }
  static VI load32x2(const uint8_t* p0, const uint8_t* p1) { return {tiles::ld256(p0), tiles::ld256(p1)}; }
  static VI load32_lo(const uint8_t* p) { return {tiles::ld256(p), _mm256_setzero_si256()}; }
  static VI load16x2_dup(const uint8_t* p0, const uint8_t* p1) { return {bc128(p0), bc128(p1)}; }
  static VI load16_dup_lo(const uint8_t* p) { return {bc128(p), _mm256_setzero_si256()}; }
  static VI and_(VI x, VI y) { return {_mm256_and_si256(x.lo, y.lo), _mm256_and_si256(x.hi, y.hi)}; }
  static VI or_(VI x, VI y) { return {_mm256_or_si256(x.lo, y.lo), _mm256_or_si256(x.hi, y.hi)}; }
  static VI xor_(VI x, VI y) { return {_mm256_xor_si256(x.lo, y.lo), _mm256_xor_si256(x.hi, y.hi)}; }
  static VI add32(VI x, VI y) { return {_mm256_add_epi32(x.lo, y.lo), _mm256_add_epi32(x.hi, y.hi)}; }
  static VI sub32(VI x, VI y) { return {_mm256_sub_epi32(x.lo, y.lo), _mm256_sub_epi32(x.hi, y.hi)}; }
  template <int S>
  static VI srl32(VI v) {
    return {_mm256_srli_epi32(v.lo, S), _mm256_srli_epi32(v.hi, S)};
  }
  template <int S>
  static VI sll32(VI v) {
    return {_mm256_slli_epi32(v.lo, S), _mm256_slli_epi32(v.hi, S)};
  }
  template <int S0, int S1>
  static VI srl_halves(VI v) {
    return {_mm256_srli_epi32(v.lo, S0), _mm256_srli_epi32(v.hi, S1)};
  }
  template <int S>
  static VI srl_odd_lanes(VI v) {
    const __m256i s = _mm256_setr_epi32(0, 0, 0, 0, S, S, S, S);
    return {_mm256_srlv_epi32(v.lo, s), _mm256_srlv_epi32(v.hi, s)};
  }
  static VI shuffle8(VI t, VI idx) { return {_mm256_shuffle_epi8(t.lo, idx.lo), _mm256_shuffle_epi8(t.hi, idx.hi)}; }
  static VI bcast128(__m128i x) {
    const __m256i v = _mm256_broadcastsi128_si256(x);
    return {v, v};
  }
  static VI dpbusd(VI acc, VI u, VI s) { return {Dp::dpbusd(acc.lo, u.lo, s.lo), Dp::dpbusd(acc.hi, u.hi, s.hi)}; }
  static VI dpbusd_u7(VI acc, VI u, VI s)
    requires requires(__m256i v) { Dp::dpbusd_u7(v, v, v); }
  {
    return {Dp::dpbusd_u7(acc.lo, u.lo, s.lo), Dp::dpbusd_u7(acc.hi, u.hi, s.hi)};
  }
  static VI dpwssd(VI acc, VI x, VI y) { return {Dp::dpwssd(acc.lo, x.lo, y.lo), Dp::dpwssd(acc.hi, x.hi, y.hi)}; }
  static VI abs8(VI y) { return {_mm256_abs_epi8(y.lo), _mm256_abs_epi8(y.hi)}; }
  static VI sign8(VI v, VI y) { return {_mm256_sign_epi8(v.lo, y.lo), _mm256_sign_epi8(v.hi, y.hi)}; }
  static VI zext(__m256i x) { return {x, _mm256_setzero_si256()}; }
  static VI fold_set_high(VI v, __m256i hi) { return {_mm256_add_epi32(v.lo, v.hi), hi}; }
  // 32 bits -> 32 bytes, byte j = 0xFF if bit j is set.
  static __m256i bits_to_bytes(uint32_t bits) {
    const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                            0x0303030303030303);
    const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
    const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf), sel);
    return _mm256_cmpeq_epi8(b, sel);
  }
  static VI or_bits(VI v, uint64_t bits, char byte) {
    const __m256i b = _mm256_set1_epi8(byte);
    return {_mm256_or_si256(v.lo, _mm256_and_si256(bits_to_bytes(static_cast<uint32_t>(bits)), b)),
            _mm256_or_si256(v.hi, _mm256_and_si256(bits_to_bytes(static_cast<uint32_t>(bits >> 32)), b))};
  }
  // Bytes of v whose bit S0 (lower half) / S1 (upper half) of h is set get bit B (clear in v):
  // the bit masked in place and moved to B within its byte by one 32-bit shift (three
  // instructions per half instead of four).
  template <int S, int B>
  static __m256i bit_to(__m256i h) {
    const __m256i m = _mm256_and_si256(h, _mm256_set1_epi8(static_cast<char>(1 << S)));
    if constexpr (S > B) {
      return _mm256_srli_epi32(m, S - B);
    } else if constexpr (S < B) {
      return _mm256_slli_epi32(m, B - S);
    } else {
      return m;
    }
  }
  template <int S0, int S1, int B>
  static VI or_bit_if(VI v, VI h) {
    return {_mm256_or_si256(v.lo, bit_to<S0, B>(h.lo)), _mm256_or_si256(v.hi, bit_to<S1, B>(h.hi))};
  }
  static VI maddubs(VI u, VI y) { return {_mm256_maddubs_epi16(u.lo, y.lo), _mm256_maddubs_epi16(u.hi, y.hi)}; }
  // pshufb index putting int16 element k of a 128-bit lane into both halves of every dword.
  static constexpr int pair_index(int k) {
    return static_cast<int>(0x01010101u * static_cast<unsigned>(2 * k) + 0x01000100u);
  }
  template <int G>
  static VI scales_32(__m256i s16) {
    const __m256i lo = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(s16));
    return {_mm256_shuffle_epi8(lo, _mm256_set1_epi32(pair_index(2 * G))),
            _mm256_shuffle_epi8(lo, _mm256_set1_epi32(pair_index(2 * G + 1)))};
  }
  template <int G>
  static VI scales_16(__m256i s16) {
    const __m128i half = G < 2 ? _mm256_castsi256_si128(s16) : _mm256_extracti128_si256(s16, 1);
    const __m256i src = _mm256_broadcastsi128_si256(half);
    constexpr int k = 4 * (G % 2);
    const __m256i ia = _mm256_setr_epi32(pair_index(k), pair_index(k), pair_index(k), pair_index(k), pair_index(k + 1),
                                         pair_index(k + 1), pair_index(k + 1), pair_index(k + 1));
    const __m256i ib = _mm256_setr_epi32(pair_index(k + 2), pair_index(k + 2), pair_index(k + 2), pair_index(k + 2),
                                         pair_index(k + 3), pair_index(k + 3), pair_index(k + 3), pair_index(k + 3));
    return {_mm256_shuffle_epi8(src, ia), _mm256_shuffle_epi8(src, ib)};
  }

  static VF fzero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  static VF fset1(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
  static VF fset1_neg_high(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(-x)}; }
  static VF fset_f16pair(uint32_t bits) {
    const __m128 v = _mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(bits)));
    return {_mm256_broadcastss_ps(v), _mm256_broadcastss_ps(_mm_movehdup_ps(v))};
  }
  static VF fsplat_pair(__m128 v4, int g) {
    const __m256 v = _mm256_castps128_ps256(v4);
    return {_mm256_permutevar8x32_ps(v, _mm256_set1_epi32(2 * g)), _mm256_permutevar8x32_ps(v, _mm256_set1_epi32(2 * g + 1))};
  }
  static VF cvt(VI v) { return {_mm256_cvtepi32_ps(v.lo), _mm256_cvtepi32_ps(v.hi)}; }
  static VF fmadd(VF x, VF y, VF z) { return {_mm256_fmadd_ps(x.lo, y.lo, z.lo), _mm256_fmadd_ps(x.hi, y.hi, z.hi)}; }
  static VF fmul(VF x, VF y) { return {_mm256_mul_ps(x.lo, y.lo), _mm256_mul_ps(x.hi, y.hi)}; }
  static float hsum(VF v) {
    const __m256 s8 = _mm256_add_ps(v.lo, v.hi);
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

}  // namespace tiles
}  // namespace
}  // namespace les
