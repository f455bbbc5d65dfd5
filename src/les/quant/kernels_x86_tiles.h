// Tiled integer dot products of quantized weights against 8-bit activation blocks (Q8_K, Q8_0,
// Q8_1), written once for a "VNNI vector policy" P and instantiated by the ISA files that include
// this header (kernels_avx512.cpp: one zmm per vector; kernels_avxvnni.cpp: a pair of ymm).
// Include only from a *_avx512.cpp / *_avxvnni.cpp file (it needs AVX2 and the file's own
// flags); everything here has internal linkage, so each ISA file gets its own copy.
//
// Model: a vector VI holds 64 bytes = 16 int32 lanes; 128-bit lane q is int32 lanes 4q..4q+3.
// A "group" is 64 consecutive elements of a row (a quarter of a 256-block, or two 32-blocks).
// The weights of a group become 64 unsigned bytes u (each type's values shifted to be >= 0);
// vpdpbusd (u x int8 activation) gives 16 lanes of 4-product sums, exact. Offsets (Q6_K's -32,
// Q3_K's -4, Q4_0's -8, the +128 of Q8_0/IQ4 codes) come off through the activation block sums.
// Sub-block scales multiply pairs of products (vpmaddubsw, exact for u <= 63: K-quants; IQ4_XS
// puts |y| into the unsigned operand instead) by vpdpwssd. Every integer step is exact, so
// the integer results equal the scalar reference's; only the float accumulation order differs
// from it, and that order is fixed by the code below for every tile shape: a product computed
// in any tile of rows x activation rows equals the same product computed alone (vec_dot is
// the 1 x 1 tile).
//
// The policy P provides (all static):
//   VI, VF; R, C (the largest tile, rows x activation rows; sized to the register file)
//   izero, set1_8, load64, bcast32, load32x2, load32_lo, load16x2_dup, load16_dup_lo,
//   and_, or_, xor_, add32, sub32, srl32<S>, sll32<S>, srl_halves<S0, S1> (32-bit lanes of the
//   lower / upper 256 bits by S0 / S1), srl_odd_lanes<S> (128-bit lanes 1 and 3 by S),
//   shuffle8 (vpshufb within 128-bit lanes), bcast128, dpbusd, dpwssd, abs8, sign8 (v negated where
//   y < 0),
//   zext (256 -> VI, upper zero), fold_set_high (lower 8 lanes: lower + upper halves' lanes;
//   upper 8 lanes: the given 256-bit vector), or_bits (bytes j with bit j set get v | byte),
//   or_bit_if<S0, S1, B>(v, h) (bit B, clear in v, set in the bytes whose bit S0 (lower 256 bits) /
//   S1 (upper) of h is set; not needed with or_bit_rot), maddubs (vpmaddubsw), scales_32<G>, scales_16<G> (a sub-block scale in both int16 halves of
//   each int32 lane, see below), fzero, fset1,
//   fset_f16pair (the fp16 pair in 32 bits: low half in lanes 0-7, high half in 8-15),
//   fset1_neg_high (x in lanes 0-7, -x in 8-15), fsplat_pair(v4, g)
//   (floats 2g, 2g+1 of v4 in lanes 0-7, 8-15), cvt, fmadd, fmul, hsum; optionally hsum4 (four
//   hsums at once, bit-identical to hsum), f16_words<S, Pair> (see block_f16), spread16 /
//   spread32 / pick<G> (group_scales), or_bit_rot<S, B> (high_bits_apply) and
//   gf_field_halves<S0, S1, M> (field_halves): each replaces a generic sequence with the same
//   values.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "les/quant/blocks.h"

namespace les {
namespace {
namespace tiles {

// ---------------------------------------------------------------------------------------------
// Scalar loads

inline float ld_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}
inline float ld_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);  // exact, subnormals included
}
inline uint32_t ld_u32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}
inline uint16_t ld_u16(const uint8_t* p) {
  uint16_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}
inline __m128i ld128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }
inline __m256i ld256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

constexpr size_t kQ8K_d = offsetof(block_q8_K, d);
constexpr size_t kQ8K_qs = offsetof(block_q8_K, qs);
constexpr size_t kQ8K_bsums = offsetof(block_q8_K, bsums);

// ---------------------------------------------------------------------------------------------
// Scale unpacking (SSE/AVX2, shared by every policy)

// Q4_K/Q5_K: 12 bytes of 6-bit scales and mins (16 bytes are read; the block goes on) -> int16
// [sc0..sc7 | m0..m7]. As dwords D0 D1 D2: sc0-3 = D0 & 0x3f, sc4-7 = (D2 & 0x0f) | (D0 >> 6 & 3) << 4,
// m0-3 = D1 & 0x3f, m4-7 = (D2 >> 4 & 0x0f) | (D1 >> 6 & 3) << 4.
inline __m256i scales_mins_k4(const uint8_t* p) {
  const __m128i v = ld128(p);
  const __m128i x = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // D0 D2 D1 D2
  const __m128i y = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // D0 D0 D1 D1
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(x, _mm_setr_epi32(0, 0, 0, 4)),
                                   _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi32(y, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm256_cvtepu8_epi16(_mm_or_si128(lo, hi));
}

// int16 [m0 m0 m1 m1 .. m7 m7] from [.. | m0..m7]: the multipliers of the 16 Q8_K bsums (bsums
// 2j and 2j+1 belong to 32-element sub-block j).
inline __m256i dup_pairs_high(__m256i s16) {
  const __m128i m = _mm256_extracti128_si256(s16, 1);
  return _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}
// Same from the low half [s0..s7 | ..].
inline __m256i dup_pairs_low(__m256i s16) {
  const __m128i m = _mm256_castsi256_si128(s16);
  return _mm256_set_m128i(_mm_unpackhi_epi16(m, m), _mm_unpacklo_epi16(m, m));
}

// Q3_K: the 16 6-bit scales minus 32, as int16. 12 bytes as dwords D0 D1 D2:
//   s0-3 = D0 & 0xf | (D2 & 3) << 4          s4-7   = D1 & 0xf | (D2 >> 2 & 3) << 4
//   s8-11 = D0 >> 4 & 0xf | (D2 >> 4 & 3) << 4  s12-15 = D1 >> 4 & 0xf | (D2 >> 6 & 3) << 4
// The 16 bytes ending with the scales are read (the qs before them): the block may end the row.
static_assert(offsetof(block_q3_K, scales) >= 4);
inline __m256i scales_q3k(const uint8_t* scales) {
  const __m128i v = ld128(scales - 4);  // scale byte k at v[4 + k]
  const __m128i x = _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i y = _mm_shuffle_epi8(v, _mm_setr_epi8(12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15));
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(x, _mm_setr_epi32(0, 0, 4, 4)), _mm_set1_epi8(0x0f));
  const __m128i hi = _mm_and_si128(_mm_slli_epi32(_mm_srlv_epi32(y, _mm_setr_epi32(0, 2, 4, 6)), 4), _mm_set1_epi8(0x30));
  return _mm256_cvtepi8_epi16(_mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32)));
}

// IQ4_XS: the 8 sub-block scales ls - 32 as int16 in the low half (the high half zero):
// ls_j = (scales_l >> 4j & 15) | (scales_h >> 2j & 3) << 4.
inline __m256i scales_iq4xs(const uint8_t* blk) {
  const __m256i sh = _mm256_set1_epi32(ld_u16(blk + offsetof(block_iq4_xs, scales_h)));
  const __m256i sl = _mm256_set1_epi32(static_cast<int>(ld_u32(blk + offsetof(block_iq4_xs, scales_l))));
  const __m256i lo = _mm256_and_si256(_mm256_srlv_epi32(sl, _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28)),
                                      _mm256_set1_epi32(15));
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(sh, _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                      _mm256_set1_epi32(3));
  const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(lo, _mm256_slli_epi32(hi, 4)), _mm256_set1_epi32(32));
  const __m128i s8 = _mm_packs_epi32(_mm256_castsi256_si128(ls), _mm256_extracti128_si256(ls, 1));
  return _mm256_zextsi128_si256(s8);
}

// The IQ4_NL / IQ4_XS codebook shifted by +128 (as unsigned bytes, 1..241).
inline __m128i iq4_book_u8() {
  alignas(16) uint8_t b[16];
  for (int i = 0; i < 16; ++i) b[i] = static_cast<uint8_t>(kIq4nlValues[i] + 128);
  return _mm_load_si128(reinterpret_cast<const __m128i*>(b));
}

// ---------------------------------------------------------------------------------------------
// Tile loops. The row pointers of a tile: row r at w + r * ws, activation row c at a + c * as.

template <int R>
struct RowPtrs {
  const uint8_t* p[R];
  RowPtrs(const uint8_t* base, size_t stride) {
    for (int r = 0; r < R; ++r) p[r] = base + static_cast<size_t>(r) * stride;
  }
};

// Prefetch of `bytes` at p in each of R rows ws apart (the same columns of the next tile's rows,
// so that they arrive while this tile computes: R short streams are more than the hardware
// prefetchers follow well).
template <int R>
inline void prefetch_rows(const uint8_t* p, size_t ws, size_t bytes) {
  for (int r = 0; r < R; ++r) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + r * ws + o), _MM_HINT_T0);
  }
}

// P::kAhead1, where the policy has it: the bytes ahead of a one-row, one-activation-row tile
// (matrix-vector products) that it prefetches in its own stream, block by block (rows are
// contiguous, so the stream runs on into the next rows). 0: none.
template <class P>
constexpr size_t ahead_1() {
  if constexpr (requires { P::kAhead1; }) {
    return P::kAhead1;
  } else {
    return 0;
  }
}

// y[c * ys + r] = P::hsum(acc[r][c]); four rows at a time where the policy has hsum4 (the same
// additions, in the same pairs, as hsum: bit-identical).
template <class P, int R, int C>
inline void store_sums(const typename P::VF (&acc)[R][C], float* y, int64_t ys) {
  for (int c = 0; c < C; ++c) {
    int r = 0;
    if constexpr (requires { P::hsum4(acc[0][0], acc[0][0], acc[0][0], acc[0][0], y); }) {
      for (; r + 4 <= R; r += 4) P::hsum4(acc[r][c], acc[r + 1][c], acc[r + 2][c], acc[r + 3][c], y + c * ys + r);
    }
    for (; r < R; ++r) y[c * ys + r] = P::hsum(acc[r][c]);
  }
}

// K-quant-like kernels (256-element blocks against Q8_K). Each type provides, for one weight
// block:
//   prep(blk)                  -> per-row block state S (scales, float multipliers)
//   group<G>(blk, S)           -> VI u of group G (0..3)
//   scale<G>(S)                -> VI multipliers of group G (pairs or int32, per kMul)
//   corr(S, bsums)             -> 256-bit int32x8: the integer offset correction (subtracted)
//                                 or the mins sum (folded, kFoldMins)
//   fscale(blk)                -> VF multiplier of the folded lanes (times d of the activations);
//                                 read when the block is finished, so that it does not hold a
//                                 register through the groups
template <class P, class W, int R, int C>
inline void tile_k(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                   const uint8_t* pf) {
  using VI = typename P::VI;
  using VF = typename P::VF;
  using S = typename W::template State<P>;
  const int64_t nb = n / QK_K;
  VF acc[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = P::fzero();
  }
  const RowPtrs<R> wr(w, ws);
  const RowPtrs<C> ar(a, as);
  for (int64_t i = 0; i < nb; ++i) {
    const size_t wo = static_cast<size_t>(i) * sizeof(typename W::Block);
    const size_t ao = static_cast<size_t>(i) * sizeof(block_q8_K);
    if (pf) prefetch_rows<R>(pf + wo, ws, sizeof(typename W::Block));
    if constexpr (R == 1 && C == 1 && ahead_1<P>() > 0) {
      prefetch_rows<1>(wr.p[0] + wo + ahead_1<P>(), 0, sizeof(typename W::Block));
    }
    S st[R];
    if constexpr (R == 4 && requires { W::template prep4<P>(wr.p, wo, st); }) {
      W::template prep4<P>(wr.p, wo, st);  // four rows' scales unpacked in one vector
    } else {
      for (int r = 0; r < R; ++r) st[r] = W::template prep<P>(wr.p[r] + wo);
    }
    VI isum[R][C];
    for (int c = 0; c < C; ++c) {
      const __m256i bsums = ld256(ar.p[c] + ao + kQ8K_bsums);
      for (int r = 0; r < R; ++r) isum[r][c] = W::template init<P>(st[r], bsums);
    }
    auto do_group = [&]<int G>() {
      VI u[R], sv[R];
      for (int r = 0; r < R; ++r) {
        u[r] = W::template group<P, G>(wr.p[r] + wo, st[r]);
        sv[r] = W::template scale<P, G>(st[r]);
      }
      for (int c = 0; c < C; ++c) {
        const VI yv = P::load64(ar.p[c] + ao + kQ8K_qs + 64 * G);
        for (int r = 0; r < R; ++r) isum[r][c] = W::template accumulate<P>(isum[r][c], u[r], yv, sv[r]);
      }
    };
    do_group.template operator()<0>();
    do_group.template operator()<1>();
    do_group.template operator()<2>();
    do_group.template operator()<3>();
    VF fs[R];
    for (int r = 0; r < R; ++r) fs[r] = W::template fscale<P>(wr.p[r] + wo);
    for (int c = 0; c < C; ++c) {
      // Types that fold their mins into the upper lanes keep the mins' sum positive there and
      // take -d of the activations in those lanes (x * -y == -x * y exactly; an accumulator that
      // starts at +0 never becomes -0, so +0 and -0 products add alike): one negation per block
      // and activation row instead of one per weight row.
      const float da = ld_f32(ar.p[c] + ao + kQ8K_d);
      VF dy;
      if constexpr (requires { W::kNegHighLanes; }) {
        dy = P::fset1_neg_high(da);
      } else {
        dy = P::fset1(da);
      }
      const __m256i bsums = ld256(ar.p[c] + ao + kQ8K_bsums);
      for (int r = 0; r < R; ++r) {
        const VI folded = W::template finish<P>(isum[r][c], st[r], bsums);
        acc[r][c] = P::fmadd(P::cvt(folded), P::fmul(fs[r], dy), acc[r][c]);
      }
    }
  }
  store_sums<P, R, C>(acc, y, ys);
}

// Group scales from a block's int16 sub-block scales s16. Where the policy has a spread form
// (spread16 / spread32: one permute per block, then pick<G>: an in-lane dword shuffle by an
// immediate), per group a cheap shuffle and no index register; else scales_16<G> / scales_32<G>
// per group. Both give the same vector.
template <class P>
constexpr bool kSpreadScales = requires(__m256i v, typename P::VI x) {
  P::spread16(v);
  P::spread32(v);
  P::template pick<0>(x);
};
template <class P, bool Sub16>
inline typename P::VI spread_scales(__m256i s16) {
  if constexpr (kSpreadScales<P>) {
    return Sub16 ? P::spread16(s16) : P::spread32(s16);
  } else {
    return P::izero();
  }
}
template <class P, bool Sub16, int G>
inline typename P::VI group_scales(__m256i s16, typename P::VI spread) {
  if constexpr (kSpreadScales<P>) {
    return P::template pick<G>(spread);
  } else if constexpr (Sub16) {
    return P::template scales_16<G>(s16);
  } else {
    return P::template scales_32<G>(s16);
  }
}

// Per byte x of the lower 256 bits of v: (x >> S0) & M; of the upper: (x >> S1) & M (M = 2^w - 1,
// w <= 8 - S: the field stays within its byte). The policy's gf_field_halves where it has one
// (one GF2P8AFFINEQB), else a dword shift and a mask.
template <class P, int S0, int S1, int M>
inline typename P::VI field_halves(typename P::VI v) {
  if constexpr (requires { P::template gf_field_halves<S0, S1, M>(v); }) {
    return P::template gf_field_halves<S0, S1, M>(v);
  } else {
    return P::and_(P::template srl_halves<S0, S1>(v), P::set1_8(static_cast<char>(M)));
  }
}

// High bits from a 32-byte bitmask h (Q3_K's hmask, Q5_K's qh), bit S of its bytes for the lower
// 256 bits of a group and bit S + 1 for the upper (S even, < 7). Where the policy rotates by an
// immediate, prepare(h) shifts the upper half's dwords right by 1 once per block, so that both
// halves take bit S, and apply<S, B> is one rotate and one vpternlogd; else or_bit_if.
template <class P>
constexpr bool kRotBits = requires(typename P::VI x) { P::template or_bit_rot<0, 2>(x, x); };
template <class P>
inline typename P::VI high_bits_prepare(typename P::VI h) {
  if constexpr (kRotBits<P>) {
    return P::template srl_halves<0, 1>(h);
  } else {
    return h;
  }
}
template <class P, int S, int B>
inline typename P::VI high_bits_apply(typename P::VI v, typename P::VI prepared) {
  if constexpr (kRotBits<P>) {
    return P::template or_bit_rot<S, B>(v, prepared);
  } else {
    return P::template or_bit_if<S, S + 1, B>(v, prepared);
  }
}

// Multiply-accumulate of a group's weights with its sub-block scales: vpmaddubsw (pairs of
// products, exact for u <= 63: |sum| <= 2 * 63 * 128) then vpdpwssd with the scale in both int16
// halves of each lane (s, s): acc += s * (p0 + p1).
struct MulPairs {
  template <class P>
  static typename P::VI accumulate(typename P::VI acc, typename P::VI u, typename P::VI y, typename P::VI sv) {
    return P::dpwssd(acc, P::maddubs(u, y), sv);
  }
};

// Q4_K / Q5_K: x = d * sc * q - dmin * m; q = u in [0, 15] (Q5_K: [0, 31], the 5th bit from qh).
// Group G = 64 elements: the low nibbles of qs[32G..32G+31] (sub-block 2G), then their high
// nibbles (sub-block 2G+1); Q5_K's 5th bit of sub-block j is bit j of qh[l].
// Fold: lanes 0-7 = d * sum(sc * q * y) times d of the activations, lanes 8-15 = dmin *
// sum(m * bsums) times -d of the activations (kNegHighLanes).
template <bool Five>
struct KQ45 : MulPairs {
  using Block = std::conditional_t<Five, block_q5_K, block_q4_K>;
  static constexpr bool kNegHighLanes = true;  // see tile_k
  template <class P>
  struct State {
    __m256i s16;   // sc0..7 | m0..7
    __m256i mdup;  // m0 m0 m1 m1 .. m7 m7
    typename P::VI sp;  // spread_scales
    typename P::VI hh;  // Q5_K: high_bits_prepare(qh)
  };
  template <class P>
  static void prep_rest(const uint8_t* b, State<P>& s) {
    s.mdup = mins_dup<P>(s.s16);
    s.sp = spread_scales<P, false>(s.s16);
    if constexpr (Five) s.hh = high_bits_prepare<P>(P::bcast32(b + offsetof(block_q5_K, qh)));
  }
  template <class P>
  static __m256i mins_dup(__m256i s16) {
    if constexpr (requires { P::dup_pairs_high(s16); }) {
      return P::dup_pairs_high(s16);
    } else {
      return dup_pairs_high(s16);
    }
  }
  template <class P>
  static State<P> prep(const uint8_t* b) {
    State<P> s;
    s.s16 = scales_mins_k4(b + offsetof(Block, scales));
    prep_rest<P>(b, s);
    return s;
  }
  template <class P>
  static typename P::VF fscale(const uint8_t* b) {
    return P::fset_f16pair(ld_u32(b + offsetof(Block, d)));
  }
  // prep() of four rows' blocks at offset o, where the policy unpacks four rows' scales at once
  // (the same values).
  template <class P>
    requires requires(const uint8_t* q, __m256i (&v)[4]) { P::scales_mins_k4_x4(q, q, q, q, v); }
  static void prep4(const uint8_t* const (&p)[4], size_t o, State<P> (&s)[4]) {
    constexpr size_t k = offsetof(Block, scales);
    __m256i s16[4];
    P::scales_mins_k4_x4(p[0] + o + k, p[1] + o + k, p[2] + o + k, p[3] + o + k, s16);
    for (int r = 0; r < 4; ++r) {
      s[r].s16 = s16[r];
      prep_rest<P>(p[r] + o, s[r]);
    }
  }
  template <class P>
  static typename P::VI init(const State<P>&, __m256i) {
    return P::izero();
  }
  template <class P, int G>
  static typename P::VI group(const uint8_t* b, const State<P>& s) {
    const typename P::VI v = P::bcast32(b + offsetof(Block, qs) + 32 * G);
    typename P::VI u = field_halves<P, 0, 4, 0x0f>(v);
    if constexpr (Five) u = high_bits_apply<P, 2 * G, 4>(u, s.hh);
    return u;
  }
  template <class P, int G>
  static typename P::VI scale(const State<P>& s) {
    return group_scales<P, false, G>(s.s16, s.sp);
  }
  template <class P>
  static typename P::VI finish(typename P::VI isum, const State<P>& s, __m256i bsums) {
    return P::fold_set_high(isum, _mm256_madd_epi16(bsums, s.mdup));
  }
};

// Q6_K: x = d * sc * (u - 32), u in [0, 63]: 4 bits from ql, 2 from qh. Element 128h + 32k + l:
// ql[64h + 32(k & 1) + l], low nibble for k < 2, high for k >= 2; qh[32h + l] bits 2k, 2k+1.
// Group G (h = G / 2, k = 2(G % 2), 2(G % 2) + 1): the 64 bytes ql[64h..] (low nibbles for even
// G, high for odd), qh[32h..] shifted by 2k. Sub-blocks of 16 with int8 scales.
struct KQ6 : MulPairs {
  using Block = block_q6_K;
  template <class P>
  struct State {
    __m256i s16;
  };
  template <class P>
  static State<P> prep(const uint8_t* b) {
    State<P> s;
    s.s16 = _mm256_cvtepi8_epi16(ld128(b + offsetof(block_q6_K, scales)));
    return s;
  }
  template <class P>
  static typename P::VF fscale(const uint8_t* b) {
    return P::fset1(ld_f16(b + offsetof(block_q6_K, d)));
  }
  // sum sc * (u - 32) * y = sum sc * u * y - 32 * sum(sc * bsum)
  template <class P>
  static typename P::VI init(const State<P>& s, __m256i bsums) {
    return P::zext(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(bsums, s.s16), 5)));
  }
  template <class P, int G>
  static typename P::VI group(const uint8_t* b, const State<P>&) {
    constexpr int H = G / 2, K = 2 * (G % 2);
    const typename P::VI l = P::load64(b + offsetof(block_q6_K, ql) + 64 * H);
    const typename P::VI nib = P::and_(G % 2 ? P::template srl32<4>(l) : l, P::set1_8(0x0f));
    const typename P::VI h = P::bcast32(b + offsetof(block_q6_K, qh) + 32 * H);
    return P::or_(nib, P::template sll32<4>(P::and_(P::template srl_halves<2 * K, 2 * K + 2>(h), P::set1_8(3))));
  }
  template <class P, int G>
  static typename P::VI scale(const State<P>& s) {
    return P::template scales_16<G>(s.s16);  // (the spread form measured 2% slower here)
  }
  template <class P>
  static typename P::VI finish(typename P::VI isum, const State<P>&, __m256i) {
    return isum;
  }
};

// Q3_K: x = d * (sc - 32) * (u - 4), u = low 2 bits | high bit << 2 in [0, 7]. Element
// 128h + 32k + l: (qs[32h + l] >> 2k) & 3, high bit: bit 4h + k of hmask[l].
struct KQ3 : MulPairs {
  using Block = block_q3_K;
  template <class P>
  struct State {
    __m256i s16;
    typename P::VI sp;  // spread_scales
    typename P::VI hh;  // high_bits_prepare(hmask)
  };
  template <class P>
  static void prep_rest(const uint8_t* b, State<P>& s) {
    s.sp = spread_scales<P, true>(s.s16);
    s.hh = high_bits_prepare<P>(P::bcast32(b + offsetof(block_q3_K, hmask)));
  }
  template <class P>
  static State<P> prep(const uint8_t* b) {
    State<P> s;
    s.s16 = scales_q3k(b + offsetof(block_q3_K, scales));
    prep_rest<P>(b, s);
    return s;
  }
  template <class P>
  static typename P::VF fscale(const uint8_t* b) {
    return P::fset1(ld_f16(b + offsetof(block_q3_K, d)));
  }
  template <class P>
    requires requires(const uint8_t* q, __m256i (&v)[4]) { P::scales_q3k_x4(q, q, q, q, v); }
  static void prep4(const uint8_t* const (&p)[4], size_t o, State<P> (&s)[4]) {
    constexpr size_t k = offsetof(block_q3_K, scales);
    __m256i s16[4];
    P::scales_q3k_x4(p[0] + o + k, p[1] + o + k, p[2] + o + k, p[3] + o + k, s16);
    for (int r = 0; r < 4; ++r) {
      s[r].s16 = s16[r];
      prep_rest<P>(p[r] + o, s[r]);
    }
  }
  // -4 * sum(sc * bsums) as sum(sc * (-4 bsums)): |4 bsums| <= 8192 fits int16, and -4 bsums is
  // the same for every weight row of a tile (computed once).
  template <class P>
  static typename P::VI init(const State<P>& s, __m256i bsums) {
    return P::zext(_mm256_madd_epi16(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(bsums, 2)), s.s16));
  }
  template <class P, int G>
  static typename P::VI group(const uint8_t* b, const State<P>& s) {
    constexpr int H = G / 2, K = 2 * (G % 2);
    const typename P::VI v = P::bcast32(b + offsetof(block_q3_K, qs) + 32 * H);
    const typename P::VI lo = field_halves<P, 2 * K, 2 * K + 2, 3>(v);
    return high_bits_apply<P, 4 * H + K, 2>(lo, s.hh);
  }
  template <class P, int G>
  static typename P::VI scale(const State<P>& s) {
    return group_scales<P, true, G>(s.s16, s.sp);
  }
  template <class P>
  static typename P::VI finish(typename P::VI isum, const State<P>&, __m256i) {
    return isum;
  }
};

// Q2_K: x = d * (sc & 15) * u - dmin * (sc >> 4), u in [0, 3]: element 128h + 32k + l is
// (qs[32h + l] >> 2k) & 3; sub-blocks of 16.
struct KQ2 : MulPairs {
  using Block = block_q2_K;
  static constexpr bool kNegHighLanes = true;  // see tile_k
  template <class P>
  struct State {
    __m256i s16, m16;  // scales; mins
    typename P::VI sp;  // spread_scales
  };
  template <class P>
  static State<P> prep(const uint8_t* b) {
    State<P> s;
    const __m256i w = _mm256_cvtepu8_epi16(ld128(b + offsetof(block_q2_K, scales)));
    s.s16 = _mm256_and_si256(w, _mm256_set1_epi16(0x0f));
    s.m16 = _mm256_srli_epi16(w, 4);
    s.sp = spread_scales<P, true>(s.s16);
    return s;
  }
  template <class P>
  static typename P::VF fscale(const uint8_t* b) {
    return P::fset_f16pair(ld_u32(b + offsetof(block_q2_K, d)));
  }
  template <class P>
  static typename P::VI init(const State<P>&, __m256i) {
    return P::izero();
  }
  template <class P, int G>
  static typename P::VI group(const uint8_t* b, const State<P>&) {
    constexpr int H = G / 2, K = 2 * (G % 2);
    const typename P::VI v = P::bcast32(b + offsetof(block_q2_K, qs) + 32 * H);
    return field_halves<P, 2 * K, 2 * K + 2, 3>(v);
  }
  template <class P, int G>
  static typename P::VI scale(const State<P>& s) {
    return group_scales<P, true, G>(s.s16, s.sp);
  }
  template <class P>
  static typename P::VI finish(typename P::VI isum, const State<P>& s, __m256i bsums) {
    return P::fold_set_high(isum, _mm256_madd_epi16(bsums, s.m16));
  }
};

// IQ4_XS: x = d * (ls - 32) * v, v = book[code] in [-127, 113] (signed: too large for the
// unsigned operand of vpmaddubsw once shifted to be >= 0). |y| goes into the unsigned operand
// and y's sign onto v (|-128| = 128 fits; |pairs| <= 2 * 128 * 127 < 2^15: exact), then the
// sub-block scales as for the K-quants. Sub-block j's codes in qs[16j..16j+15] (low nibbles:
// elements 0-15, high: 16-31); group G = sub-blocks 2G, 2G+1.
struct KIQ4XS {
  using Block = block_iq4_xs;
  template <class P>
  struct State {
    __m256i s16;
  };
  template <class P>
  static State<P> prep(const uint8_t* b) {
    State<P> s;
    s.s16 = scales_iq4xs(b);
    return s;
  }
  template <class P>
  static typename P::VF fscale(const uint8_t* b) {
    return P::fset1(ld_f16(b + offsetof(block_iq4_xs, d)));
  }
  template <class P>
  static typename P::VI init(const State<P>&, __m256i) {
    return P::izero();
  }
  template <class P, int G>
  static typename P::VI group(const uint8_t* b, const State<P>&) {
    const uint8_t* q = b + offsetof(block_iq4_xs, qs) + 32 * G;
    const typename P::VI idx = P::and_(P::template srl_odd_lanes<4>(P::load16x2_dup(q, q + 16)), P::set1_8(0x0f));
    return P::shuffle8(P::bcast128(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues))), idx);
  }
  template <class P, int G>
  static typename P::VI scale(const State<P>& s) {
    return P::template scales_32<G>(s.s16);  // (the spread form measured slower here: register pressure)
  }
  template <class P>
  static typename P::VI accumulate(typename P::VI acc, typename P::VI v, typename P::VI y, typename P::VI sv) {
    return P::dpwssd(acc, P::maddubs(P::abs8(y), P::sign8(v, y)), sv);
  }
  template <class P>
  static typename P::VI finish(typename P::VI isum, const State<P>&, __m256i) {
    return isum;
  }
};

// ---------------------------------------------------------------------------------------------
// 32-element blocks against Q8_0 / Q8_1: a group is two blocks (block 2j in the lower 256 bits,
// 2j+1 in the upper); an odd last block is a group with an empty upper half.
// Per group: isum = dpbusd(-off * sum(y), u, y) (lanes of 4), then
// acc += cvt(isum) * (d_w * d_a, per half); Q4_1/Q5_1 also sum m_w * s_a (4 blocks in an xmm).
// Blocks go four at a time (their fp16 scales converted together).

constexpr size_t kQ80_d = offsetof(block_q8_0, d);
constexpr size_t kQ80_qs = offsetof(block_q8_0, qs);
constexpr size_t kQ81_d = offsetof(block_q8_1, d);
constexpr size_t kQ81_s = offsetof(block_q8_1, s);
constexpr size_t kQ81_qs = offsetof(block_q8_1, qs);

// dpbusd for unsigned bytes u <= MaxU: the policy's cheaper dpbusd_u7 where it has one and
// MaxU <= 127 (the same exact sums).
template <class P, int MaxU>
inline typename P::VI dpbusd_max(typename P::VI acc, typename P::VI u, typename P::VI y) {
  if constexpr (MaxU <= 127 && requires { P::dpbusd_u7(acc, u, y); }) {
    return P::dpbusd_u7(acc, u, y);
  } else {
    return P::dpbusd(acc, u, y);
  }
}

// The 32 codes (nibbles) of two 16-byte halves at p0, p1 as [lo(p0) hi(p0) lo(p1) hi(p1)]
// (p1 == nullptr: upper half zero).
template <class P>
inline typename P::VI nibbles2(const uint8_t* p0, const uint8_t* p1) {
  const typename P::VI v = p1 ? P::load16x2_dup(p0, p1) : P::load16_dup_lo(p0);
  return P::and_(P::template srl_odd_lanes<4>(v), P::set1_8(0x0f));
}

struct KQ4_0 {
  using Block = block_q4_0;
  static constexpr int kOffset = 8;
  static constexpr int kMaxU = 15;
  static constexpr bool kMin = false;
  template <class P>
  static typename P::VI decode(const uint8_t* b0, const uint8_t* b1) {
    return nibbles2<P>(b0 + offsetof(block_q4_0, qs), b1 ? b1 + offsetof(block_q4_0, qs) : nullptr);
  }
};
struct KIQ4NL {
  using Block = block_iq4_nl;
  static constexpr int kOffset = 128;
  static constexpr int kMaxU = 255;
  static constexpr bool kMin = false;
  template <class P>
  static typename P::VI decode(const uint8_t* b0, const uint8_t* b1) {
    const typename P::VI idx = nibbles2<P>(b0 + offsetof(block_iq4_nl, qs), b1 ? b1 + offsetof(block_iq4_nl, qs) : nullptr);
    return P::shuffle8(P::bcast128(iq4_book_u8()), idx);
  }
};
template <bool One>
struct KQ5 {
  using Block = std::conditional_t<One, block_q5_1, block_q5_0>;
  static constexpr int kOffset = One ? 0 : 16;
  static constexpr int kMaxU = 31;
  static constexpr bool kMin = One;
  template <class P>
  static typename P::VI decode(const uint8_t* b0, const uint8_t* b1) {
    const typename P::VI u = nibbles2<P>(b0 + offsetof(Block, qs), b1 ? b1 + offsetof(Block, qs) : nullptr);
    const uint64_t bits = ld_u32(b0 + offsetof(Block, qh)) | (b1 ? uint64_t{ld_u32(b1 + offsetof(Block, qh))} << 32 : 0);
    return P::or_bits(u, bits, 0x10);
  }
};
struct KQ4_1 {
  using Block = block_q4_1;
  static constexpr int kOffset = 0;
  static constexpr int kMaxU = 15;
  static constexpr bool kMin = true;
  template <class P>
  static typename P::VI decode(const uint8_t* b0, const uint8_t* b1) {
    return nibbles2<P>(b0 + offsetof(block_q4_1, qs), b1 ? b1 + offsetof(block_q4_1, qs) : nullptr);
  }
};
// Q8_0: u = q + 128 (the sign bit flipped), exact for every pair of int8 (-128 included).
struct KQ8_0 {
  using Block = block_q8_0;
  static constexpr int kOffset = 128;
  static constexpr int kMaxU = 255;
  static constexpr bool kMin = false;
  template <class P>
  static typename P::VI decode(const uint8_t* b0, const uint8_t* b1) {
    const typename P::VI q = b1 ? P::load32x2(b0 + kQ80_qs, b1 + kQ80_qs) : P::load32_lo(b0 + kQ80_qs);
    // an empty upper half becomes 128s, against activations that are 0 there
    return P::xor_(q, P::set1_8(static_cast<char>(0x80)));
  }
};

static_assert(offsetof(block_q4_1, m) == 2 && offsetof(block_q5_1, m) == 2);  // step_32 reads d, m as a pair

// The fp16 values at p, p + stride, .. (nb <= 4 of them; the rest 0) as 4 floats.
inline __m128 f16x4(const uint8_t* p, size_t stride, int nb) {
  uint64_t v = 0;
  for (int k = 0; k < nb; ++k) v |= uint64_t{ld_u16(p + static_cast<size_t>(k) * stride)} << (16 * k);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}

// The fp16 scales of NB consecutive blocks of S bytes at p: those at p + k S in `first` (k < NB,
// the rest 0); with Pair also those at p + 2 + k S in `second`. Four blocks go through the
// policy's f16_words<S, Pair> where it has one (only the 8 or 16 bytes named are read: no
// access past the last block), else through scalar loads. The conversions are exact either way.
template <class P, size_t S, int NB, bool Pair>
inline void block_f16(const uint8_t* p, __m128& first, __m128& second) {
  if constexpr (NB == 4 && requires { P::template f16_words<S, Pair>(p); }) {
    const __m128i h = P::template f16_words<S, Pair>(p);
    if constexpr (Pair) {
      const __m256 v = _mm256_cvtph_ps(h);
      first = _mm256_castps256_ps128(v);
      second = _mm256_extractf128_ps(v, 1);
    } else {
      first = _mm_cvtph_ps(h);
    }
  } else {
    first = f16x4(p, S, NB);
    if constexpr (Pair) second = f16x4(p + 2, S, NB);
  }
}

// NB (1, 2 or 4) consecutive blocks from block offset wo / ao of every row of the tile.
// acc_ms: Q4_1/Q5_1's sum of m_w * s_a, 4 blocks in 4 lanes.
template <class P, class W, int R, int C, int NB>
inline void step_32(const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t wo, size_t ao, typename P::VF (&acc)[R][C],
                    __m128 (&acc_ms)[R][C]) {
  using VI = typename P::VI;
  constexpr size_t WB = sizeof(typename W::Block);
  constexpr size_t AB = W::kMin ? sizeof(block_q8_1) : sizeof(block_q8_0);
  constexpr size_t a_qs = W::kMin ? kQ81_qs : kQ80_qs;
  constexpr size_t a_d = W::kMin ? kQ81_d : kQ80_d;
  constexpr int NG = (NB + 1) / 2;  // groups (pairs of blocks)
  static_assert(offsetof(typename W::Block, d) == 0);  // and m at 2 where kMin (below)
  // The scale of a product is d_w * d_a per block: the 4 blocks' products are formed in an xmm per
  // weight row and activation row, then splat per group. (Splatting the weights' scales once per
  // row and multiplying per group gives the same floats, but held 2 R more vectors: with 4 x 4
  // tiles the accumulators spilled, and batched Q4_0 / Q4_1 / IQ4_NL ran 7-19% slower.)
  VI u[R][NG];
  __m128 dw4[R];
  __m128 mw[R];
  for (int r = 0; r < R; ++r) {
    const uint8_t* b = wr.p[r] + wo;
    for (int g = 0; g < NG; ++g) u[r][g] = W::template decode<P>(b + 2 * g * WB, 2 * g + 1 < NB ? b + (2 * g + 1) * WB : nullptr);
    block_f16<P, WB, NB, W::kMin>(b, dw4[r], mw[r]);
  }
  for (int c = 0; c < C; ++c) {
    const uint8_t* y = ar.p[c] + ao;
    static_assert(kQ81_s == kQ81_d + 2);
    __m128 d4, s4;
    block_f16<P, AB, NB, W::kMin>(y + a_d, d4, s4);
    if constexpr (W::kMin) {
      for (int r = 0; r < R; ++r) acc_ms[r][c] = _mm_fmadd_ps(mw[r], s4, acc_ms[r][c]);
    }
    __m128 dd4[R];
    for (int r = 0; r < R; ++r) dd4[r] = _mm_mul_ps(dw4[r], d4);
    for (int g = 0; g < NG; ++g) {
      const uint8_t* y0 = y + 2 * g * AB;
      const VI yv = 2 * g + 1 < NB ? P::load32x2(y0 + a_qs, y0 + AB + a_qs) : P::load32_lo(y0 + a_qs);
      VI base = P::izero();
      if constexpr (W::kOffset != 0) {
        base = P::sub32(P::izero(), dpbusd_max<P, W::kOffset>(P::izero(), P::set1_8(static_cast<char>(W::kOffset)), yv));
      }
      for (int r = 0; r < R; ++r) {
        const VI isum = dpbusd_max<P, W::kMaxU>(base, u[r][g], yv);
        acc[r][c] = P::fmadd(P::cvt(isum), P::fsplat_pair(dd4[r], g), acc[r][c]);
      }
    }
  }
}

// Steps of 4 blocks, then of 2, then 1: the same sequence for every tile shape.
template <class P, class W, int R, int C>
inline void tile_32(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                    const uint8_t* pf) {
  using VF = typename P::VF;
  constexpr size_t WB = sizeof(typename W::Block);
  constexpr size_t AB = W::kMin ? sizeof(block_q8_1) : sizeof(block_q8_0);
  const int64_t nb = n / 32;
  VF acc[R][C];
  __m128 acc_ms[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      acc[r][c] = P::fzero();
      acc_ms[r][c] = _mm_setzero_ps();
    }
  }
  const RowPtrs<R> wr(w, ws);
  const RowPtrs<C> ar(a, as);
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    if (pf) prefetch_rows<R>(pf + static_cast<size_t>(i) * WB, ws, 4 * WB);
    if constexpr (R == 1 && C == 1 && ahead_1<P>() > 0) {
      prefetch_rows<1>(wr.p[0] + static_cast<size_t>(i) * WB + ahead_1<P>(), 0, 4 * WB);
    }
    step_32<P, W, R, C, 4>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc, acc_ms);
  }
  if (i + 2 <= nb) {
    step_32<P, W, R, C, 2>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc, acc_ms);
    i += 2;
  }
  if (i < nb) step_32<P, W, R, C, 1>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc, acc_ms);
  store_sums<P, R, C>(acc, y, ys);
  if constexpr (W::kMin) {
    for (int c = 0; c < C; ++c) {
      for (int r = 0; r < R; ++r) {
        __m128 m = acc_ms[r][c];
        m = _mm_add_ps(m, _mm_movehl_ps(m, m));
        m = _mm_add_ss(m, _mm_movehdup_ps(m));
        y[c * ys + r] += _mm_cvtss_f32(m);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Drivers: a GemmFn over tiles of at most P::R rows x P::C activation rows, and the vec_dot
// (the 1 x 1 tile).

// pf: the rows to prefetch while this tile runs (the next tile's), or nullptr.
using TileFn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, int64_t, const uint8_t*);

template <class P, class W, int R, int C>
void tile_entry(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                const uint8_t* pf) {
  if constexpr (requires { W::kOffset; }) {
    tile_32<P, W, R, C>(n, w, ws, a, as, y, ys, pf);
  } else {
    tile_k<P, W, R, C>(n, w, ws, a, as, y, ys, pf);
  }
}

// fn[r - 1][c - 1]: the tile of r rows x c activation rows of kernel K (K::tile<r, c>).
template <class K, int MR, int MC>
struct TileTable {
  TileFn fn[MR][MC];
  constexpr TileTable() : fn{} { fill(std::make_integer_sequence<int, MR * MC>{}); }
  template <int... I>
  constexpr void fill(std::integer_sequence<int, I...>) {
    ((fn[I / MC][I % MC] = &K::template tile<I / MC + 1, I % MC + 1>), ...);
  }
};

// Activation rows are taken in blocks of about kActBlock (a multiple of the tile width) so that
// a block of them stays in L1/L2 while every row tile of the weights passes over it.
constexpr int64_t kActBlock = 16;

// Row-strided tiles (gemm_tiles, one activation row) prefetch each of their streams
// kStreamPrefetchBytes ahead.
constexpr int64_t kStreamPrefetchBytes = 2048;

// The product over tiles of at most MR rows x MC activation rows (MR1 rows when there is one
// activation row); the first pass of each row tile over the activations prefetches the next row
// tile (with one activation row only if PF1).
template <class K, int MR, int MC, int MR1 = MR, bool PF1 = true>
void gemm_tiles(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y,
                int64_t ys) {
  static constexpr TileTable<K, (MR1 > MR ? MR1 : MR), MC> table;
  if (nc == 1 && (MR1 != MR || !PF1)) {
    for (int64_t r0 = 0; r0 < nr; r0 += MR1) {
      const int64_t rr = nr - r0 < MR1 ? nr - r0 : MR1;
      const uint8_t* next =
          PF1 && r0 + MR1 < nr ? static_cast<const uint8_t*>(vw) + static_cast<size_t>(r0 + MR1) * ws : nullptr;
      table.fn[rr - 1][0](n, static_cast<const uint8_t*>(vw) + static_cast<size_t>(r0) * ws, ws,
                          static_cast<const uint8_t*>(va), as, y + r0, ys, next);
    }
    return;
  }
  constexpr int64_t act_block = (kActBlock + MC - 1) / MC * MC;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  if (nc == 1 && nr >= 2 * MR) {
    // Matrix-vector products: tile i takes rows i, i + S, i + 2S, i + 3S (S = nr / MR), so that
    // the tiles read MR long sequential streams (which the hardware prefetchers follow) instead
    // of one region through MR interleaved pointers; each stream prefetches its rows
    // kStreamPrefetchBytes ahead. The rows past MR * S go as ordinary tiles. Every output is the
    // same tile's value for its row, so the results do not change.
    const int64_t S = nr / MR;
    const int64_t ahead = (kStreamPrefetchBytes + static_cast<int64_t>(ws) - 1) / static_cast<int64_t>(ws);
    for (int64_t i = 0; i < S; ++i) {
      float t[MR];
      const uint8_t* next = i + ahead < S ? w + static_cast<size_t>(i + ahead) * ws : nullptr;
      table.fn[MR - 1][0](n, w + static_cast<size_t>(i) * ws, static_cast<size_t>(S) * ws, a, as, t, ys, next);
      for (int k = 0; k < MR; ++k) y[i + k * S] = t[k];
    }
    for (int64_t r0 = MR * S; r0 < nr; r0 += MR) {
      const int64_t rr = nr - r0 < MR ? nr - r0 : MR;
      table.fn[rr - 1][0](n, w + static_cast<size_t>(r0) * ws, ws, a, as, y + r0, ys, nullptr);
    }
    return;
  }
  for (int64_t cb = 0; cb < nc; cb += act_block) {
    const int64_t ce = cb + act_block < nc ? cb + act_block : nc;
    for (int64_t r0 = 0; r0 < nr; r0 += MR) {
      const int64_t rr = nr - r0 < MR ? nr - r0 : MR;
      const uint8_t* next = cb == 0 && r0 + MR < nr ? w + static_cast<size_t>(r0 + MR) * ws : nullptr;
      for (int64_t c0 = cb; c0 < ce; c0 += MC) {
        const int64_t cc = ce - c0 < MC ? ce - c0 : MC;
        table.fn[rr - 1][cc - 1](n, w + static_cast<size_t>(r0) * ws, ws, a + static_cast<size_t>(c0) * as, as,
                                 y + c0 * ys + r0, ys, c0 == cb ? next : nullptr);
      }
    }
  }
}

template <class P, class W>
struct IntKernel {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                   const uint8_t* pf) {
    tile_entry<P, W, R, C>(n, w, ws, a, as, y, ys, pf);
  }
};

// P::R1, where the policy has it: the rows of a tile when there is one activation row; P::kPrefetch1:
// whether those tiles prefetch the next rows (default true).
template <class P>
constexpr int rows_1() {
  if constexpr (requires { P::R1; }) {
    return P::R1;
  } else {
    return P::R;
  }
}
template <class P>
constexpr bool prefetch_1() {
  if constexpr (requires { P::kPrefetch1; }) {
    return P::kPrefetch1;
  } else {
    return true;
  }
}

template <class P, class W>
void gemm(int64_t n, const void* w, size_t ws, int64_t nr, const void* a, size_t as, int64_t nc, float* y, int64_t ys) {
  gemm_tiles<IntKernel<P, W>, P::R, P::C, rows_1<P>(), prefetch_1<P>()>(n, w, ws, nr, a, as, nc, y, ys);
}

template <class P, class W>
float vec_dot(int64_t n, const void* w, const void* a) {
  float y;
  tile_entry<P, W, 1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0, &y, 0, nullptr);
  return y;
}

}  // namespace tiles
}  // namespace
}  // namespace les
