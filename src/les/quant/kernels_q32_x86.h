// The 32-element block types (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL) on ymm registers: vec_dot and
// gemm (tiles of 4 weight rows x 1 activation row; 1 x 4 for batches, whose activation operands are
// prepared once per block of 16 activation rows: PreActs), written once for an integer
// dot policy Dp and instantiated by kernels_avx2.cpp (vpmaddubsw + vpmaddwd) and
// kernels_avxvnni.cpp (vpdpbusd). Both form the same exact int32 lane sums, so the two ISAs give
// the same results. Also the AVX2 helpers these and kernels_avx2.cpp share. Include only from a
// file compiled with at least the AVX2 flags; everything here has internal linkage.
//
// Dp provides:
//   kVnni                  whether dpbusd is native (then OffsetAct keeps its offsets in int32)
//   pairs(u, s)            int32 lane i = sum of u[j] * s[j] over bytes 4i..4i+3 (u unsigned,
//                          s signed; exact for the u each caller passes)
//   dpbusd(acc, u, s)      acc + pairs(u, s) (needed with kVnni)
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "les/quant/blocks.h"
#include "les/quant/kernels_internal.h"

namespace les {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

inline __m256i loadu(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline __m128i loadu128(const uint8_t* p) { return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)); }

inline float load_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, sizeof f);
  return f;
}
inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, sizeof h);
  return _cvtsh_ss(h);  // exact, subnormals included
}
inline uint32_t load_u32(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, sizeof u);
  return u;
}

// Hides a value from the optimizer so that a multiply feeding it is not fused into an FMA.
inline __m256 opaque(__m256 v) {
  __asm__("" : "+x"(v));
  return v;
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_unpackhi_epi64(s, s));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// 32 bits -> 32 bytes, byte j = 0xFF if bit j is set.
inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i shuf = _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101, 0x0202020202020202,
                                          0x0303030303030303);
  const __m256i sel = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  const __m256i b = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), shuf), sel);
  return _mm256_cmpeq_epi8(b, sel);
}

// 16 bytes of nibbles -> 32 bytes: low nibbles first (elements 0..15), then high (16..31). The
// bytes are loaded into both lanes (vbroadcasti128: a load, no shuffle) and the upper lane takes
// the shifted copy by vpblendd, which leaves port 5 (the only port of vinserti128 on Intel cores,
// and the one llvm-mca finds saturated in the 32-element tiles) free.
inline __m256i nibbles_32(const uint8_t* p) {
  const __m256i q = _mm256_broadcastsi128_si256(loadu128(p));
  const __m256i both = _mm256_blend_epi32(q, _mm256_srli_epi16(q, 4), 0xF0);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

// ---------------------------------------------------------------------------------------------
// 32-element block types
//
// Each type is given in three parts (the *Ops structs): its weight block decoded (Wv), its
// activation block prepared (Av), and their integer dot as int32x8 partial sums. A tile of R
// weight rows x C activation rows (tile_q8_0 / tile_q8_1) computes each of its R*C products with
// exactly the instructions and float order of the 1 x 1 tile, which is the vec_dot, so the gemm
// equals vec_dot bit for bit. What a tile shares: the decoding of a weight block (across its
// activation rows), an activation block's loads and offset terms and its scale (across its rows).
// Matrix-vector products use 4 x 1 tiles, batches 1 x 4 (group4_columns: one activation row's
// products at a time). The gemm is registered where the tiles beat vec_dot per output
// (bench_kernels, docs/kernels.md): Q4_0, Q4_1, Q5_0, Q5_1 and IQ4_NL everywhere, Q8_0 on AMD
// CPUs (fill_kernel_table_avx2); elsewhere a product is vec_dot, the 1 x 1 tile, either way.
//
// Blocks go in groups of four: the four blocks' int32x8 partial sums are folded by three vphaddd
// into one vector [b0 b1 b2 b3 | b0 b1 b2 b3] (each lane half of one block's sum), converted once
// and multiplied by the four blocks' scales, which are converted together by one vcvtph2ps.

constexpr size_t kQ80_d = offsetof(block_q8_0, d);
constexpr size_t kQ80_qs = offsetof(block_q8_0, qs);
constexpr size_t kQ81_d = offsetof(block_q8_1, d);
constexpr size_t kQ81_s = offsetof(block_q8_1, s);
constexpr size_t kQ81_qs = offsetof(block_q8_1, qs);
static_assert(offsetof(block_q4_1, m) == offsetof(block_q4_1, d) + 2 && offsetof(block_q5_1, m) == offsetof(block_q5_1, d) + 2 &&
              kQ81_s == kQ81_d + 2, "d and m (s) are read as one pair");

inline uint64_t load_u16_wide(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

inline bool has_minus128(__m256i v) {
  return _mm256_movemask_epi8(_mm256_cmpeq_epi8(v, _mm256_set1_epi8(static_cast<char>(-128)))) != 0;
}

// The halves at p, p+stride, p+2*stride, p+3*stride as 4 floats.
inline __m128 load4_f16(const uint8_t* p, size_t stride) {
  const uint64_t v = load_u16_wide(p) | (load_u16_wide(p + stride) << 16) | (load_u16_wide(p + 2 * stride) << 32) |
                     (load_u16_wide(p + 3 * stride) << 48);
  return _mm_cvtph_ps(_mm_cvtsi64_si128(static_cast<long long>(v)));
}
// The half pairs (32 bits) at p, p+stride, ... as 8 floats [p0.lo p0.hi p1.lo p1.hi ...].
inline __m256 load4_f16x2(const uint8_t* p, size_t stride) {
  return _mm256_cvtph_ps(_mm_setr_epi32(static_cast<int>(load_u32(p)), static_cast<int>(load_u32(p + stride)),
                                        static_cast<int>(load_u32(p + 2 * stride)),
                                        static_cast<int>(load_u32(p + 3 * stride))));
}

inline __m256i sum_pairs(__m256i p16) { return _mm256_madd_epi16(p16, _mm256_set1_epi16(1)); }

// IQ4_NL against Q8_0: the codes' values come from the codebook by one vpshufb, then as Q8_0.
inline __m256i iq4_codebook() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
}

// Products v*y of 32 int8 pairs, summed in adjacent pairs (int16x16), for |v| <= 127 and any y:
// |y| (128 for -128, as unsigned) times v with y's sign; each pair sum is within +-2*128*127.
inline __m256i mul_pairs_i8(__m256i v, __m256i y) {
  return _mm256_maddubs_epi16(_mm256_abs_epi8(y), _mm256_sign_epi8(v, y));
}

// The 32 codebook values of the 32 codes in 16 bytes at p, in element order.
inline __m256i iq4_values_32(const uint8_t* p, __m256i book) { return _mm256_shuffle_epi8(book, nibbles_32(p)); }

// Q4_0 / Q5_0 (u = q + Off unsigned): sum (u - Off) * y = sum u*y - Off * sum y; in int16 pairs
// (vpmaddubsw), or with VNNI from -Off * sum y in int32 lanes (vpdpbusd): the same lane sums.
template <class Dp, int Off>
struct OffsetAct {
  __m256i qy, off;  // off: Off * y in int16 pairs, or with VNNI -Off * y in int32 lanes of 4
  static OffsetAct prep(const uint8_t* y) {
    const __m256i qy = loadu(y + kQ80_qs);
    if constexpr (Dp::kVnni) {
      return {qy, _mm256_sub_epi32(_mm256_setzero_si256(), Dp::pairs(_mm256_set1_epi8(Off), qy))};
    } else {
      return {qy, _mm256_maddubs_epi16(_mm256_set1_epi8(Off), qy)};
    }
  }
  __m256i dot(__m256i u) const {
    if constexpr (Dp::kVnni) {
      return Dp::dpbusd(off, u, qy);
    } else {
      return sum_pairs(_mm256_sub_epi16(_mm256_maddubs_epi16(u, qy), off));
    }
  }
};

// Against Q8_0: WB-byte blocks with the fp16 scale at WD; kProbe: the product is exact unless an
// activation is -128 (a group holding one is redone by exact()).
template <class Dp>
struct Q4_0Ops {
  static constexpr bool kQ81 = false;
  static constexpr size_t WB = sizeof(block_q4_0), WD = offsetof(block_q4_0, d);
  static constexpr bool kProbe = false;
  using Wv = __m256i;
  using Av = OffsetAct<Dp, 8>;
  static Wv decode(const uint8_t* x) { return nibbles_32(x + offsetof(block_q4_0, qs)); }
  static __m256i dot(Wv u, const Av& a) { return a.dot(u); }
};
template <class Dp>
struct Q5_0Ops {
  static constexpr bool kQ81 = false;
  static constexpr size_t WB = sizeof(block_q5_0), WD = offsetof(block_q5_0, d);
  static constexpr bool kProbe = false;
  using Wv = __m256i;
  using Av = OffsetAct<Dp, 16>;
  static Wv decode(const uint8_t* x) {
    const __m256i hb = _mm256_and_si256(bits_to_bytes(load_u32(x + offsetof(block_q5_0, qh))), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles_32(x + offsetof(block_q5_0, qs)), hb);
  }
  static __m256i dot(Wv u, const Av& a) { return a.dot(u); }
};
// Q8_0 x Q8_0: |w| in the unsigned operand of vpmaddubsw and the weight's sign moved onto the
// activation. Exact for any weight (-128 included: |-128| = 128 unsigned) and any activation but
// -128, whose negation wraps; a group holding a -128 activation (our quantizer never produces
// one: it clamps to [-127, 127]) is redone in 16-bit arithmetic.
template <class Dp>
struct Q8_0Ops {
  static constexpr bool kQ81 = false;
  static constexpr size_t WB = sizeof(block_q8_0), WD = kQ80_d;
  static constexpr bool kProbe = true;
  struct Wv {
    __m256i abs, q;
  };
  struct Av {
    __m256i qy;
    static Av prep(const uint8_t* y) { return {loadu(y + kQ80_qs)}; }
  };
  static Wv decode(const uint8_t* x) {
    const __m256i q = loadu(x + kQ80_qs);
    return {_mm256_abs_epi8(q), q};
  }
  static __m256i dot(const Wv& w, const Av& a) { return Dp::pairs(w.abs, _mm256_sign_epi8(a.qy, w.q)); }
  static __m256i exact(const uint8_t* x, const uint8_t* y) {
    const __m256i x0 = _mm256_cvtepi8_epi16(loadu128(x + kQ80_qs));
    const __m256i x1 = _mm256_cvtepi8_epi16(loadu128(x + kQ80_qs + 16));
    const __m256i y0 = _mm256_cvtepi8_epi16(loadu128(y + kQ80_qs));
    const __m256i y1 = _mm256_cvtepi8_epi16(loadu128(y + kQ80_qs + 16));
    return _mm256_add_epi32(_mm256_madd_epi16(x0, y0), _mm256_madd_epi16(x1, y1));
  }
};
template <class Dp>
struct IQ4_NLOps {
  static constexpr bool kQ81 = false;
  static constexpr size_t WB = sizeof(block_iq4_nl), WD = offsetof(block_iq4_nl, d);
  static constexpr bool kProbe = false;
  using Wv = __m256i;
  struct Av {
    __m256i ay, qy;  // |y|, y
    static Av prep(const uint8_t* y) {
      const __m256i qy = loadu(y + kQ80_qs);
      return {_mm256_abs_epi8(qy), qy};
    }
  };
  static Wv decode(const uint8_t* x) { return iq4_values_32(x + offsetof(block_iq4_nl, qs), iq4_codebook()); }
  static __m256i dot(Wv v, const Av& a) { return Dp::pairs(a.ay, _mm256_sign_epi8(v, a.qy)); }
};

// Row r of a tile at w + r * ws, activation row c at a + c * as; block offsets wo / ao.
template <int R, int C>
struct TilePtrs {
  const uint8_t* w[R];
  const uint8_t* a[C];
  TilePtrs(const uint8_t* wb, size_t ws, const uint8_t* ab, size_t as) {
    for (int r = 0; r < R; ++r) w[r] = wb + static_cast<size_t>(r) * ws;
    for (int c = 0; c < C; ++c) a[c] = ab + static_cast<size_t>(c) * as;
  }
};

// Activation operands made once per block of activation rows for the batched tiles (gemm_q32):
// row c's K::Av of every block, and its blocks' scales as floats (against Q8_0: d per block;
// Q8_1: d, s per block). The tiles would make the same values from the rows, once per weight row;
// taken from here they give the same results.
template <class K, int C>
struct PreActs {
  const typename K::Av* av[C];
  const float* d[C];
};

// The partial sums of one block k (from block offsets wo / ao) of every product of the tile.
// exact[c]: activation row c's products by K::exact (kProbe only).
template <class K, size_t AB, int R, int C>
inline void block_sums(const TilePtrs<R, C>& t, size_t wo, size_t ao, int k, const bool (&exact)[C], __m256i (&p)[R][C]) {
  typename K::Av av[C];
  for (int c = 0; c < C; ++c) av[c] = K::Av::prep(t.a[c] + ao + k * AB);
  for (int r = 0; r < R; ++r) {
    const typename K::Wv wv = K::decode(t.w[r] + wo + k * K::WB);
    for (int c = 0; c < C; ++c) p[r][c] = K::dot(wv, av[c]);
  }
  if constexpr (K::kProbe) {
    for (int c = 0; c < C; ++c) {
      if (exact[c]) [[unlikely]] {
        for (int r = 0; r < R; ++r) p[r][c] = K::exact(t.w[r] + wo + k * K::WB, t.a[c] + ao + k * AB);
      }
    }
  }
}

// group4 for one weight row and several activation rows, one activation row at a time: the 4
// weight blocks decoded once, then each activation row's 4 products folded before the next row's
// (block by block for every row at once kept 3 x C partial sums and C prepared activations live:
// with C = 4, more than the 16 ymm registers). The same vphaddd tree, so the same integers.
// With Pre, the activations' operands come from pre (block index ib).
template <class K, size_t AB, int C, bool Pre>
inline void group4_columns(const TilePtrs<1, C>& t, size_t wo, size_t ao, const bool (&exact)[C],
                           __m256i (&s)[1][C], const PreActs<K, C>* pre, int64_t ib) {
  typename K::Wv wv[4];
  for (int k = 0; k < 4; ++k) wv[k] = K::decode(t.w[0] + wo + k * K::WB);
  for (int c = 0; c < C; ++c) {
    __m256i p[4];
    for (int k = 0; k < 4; ++k) {
      if constexpr (Pre) {
        p[k] = K::dot(wv[k], pre->av[c][ib + k]);
      } else {
        p[k] = K::dot(wv[k], K::Av::prep(t.a[c] + ao + k * AB));
      }
      if constexpr (K::kProbe) {
        if (exact[c]) [[unlikely]] p[k] = K::exact(t.w[0] + wo + k * K::WB, t.a[c] + ao + k * AB);
      }
    }
    s[0][c] = _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
    asm("" : "+x"(s[0][c]));  // this row's sums are done before the next row's products start
  }
}

// s[r][c] = the folded partial sums of the 4 blocks from block offsets wo / ao, by the vphaddd
// tree of the vec_dot: (b0, b1), (b2, b3), then the two.
// Pre (only for R == 1, C > 1): the activations' operands from pre, block index ib.
template <class K, size_t AB, int R, int C, bool Pre = false>
inline void group4(const TilePtrs<R, C>& t, size_t wo, size_t ao, const bool (&exact)[C], __m256i (&s)[R][C],
                   const PreActs<K, C>* pre = nullptr, int64_t ib = 0) {
  static_assert(!Pre || (R == 1 && C > 1));
  if constexpr (R == 1 && C > 1) {
    group4_columns<K, AB, C, Pre>(t, wo, ao, exact, s, pre, ib);
    return;
  }
  __m256i p0[R][C], p1[R][C], h01[R][C];
  block_sums<K, AB>(t, wo, ao, 0, exact, p0);
  block_sums<K, AB>(t, wo, ao, 1, exact, p1);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) h01[r][c] = _mm256_hadd_epi32(p0[r][c], p1[r][c]);
  }
  block_sums<K, AB>(t, wo, ao, 2, exact, p0);
  block_sums<K, AB>(t, wo, ao, 3, exact, p1);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) s[r][c] = _mm256_hadd_epi32(h01[r][c], _mm256_hadd_epi32(p0[r][c], p1[r][c]));
  }
}

// Prefetch of `bytes` at p in each of R rows ws apart: the same columns of the next tile's rows,
// so that they arrive while this tile computes.
template <int R>
inline void prefetch_rows(const uint8_t* p, size_t ws, size_t bytes) {
  for (int r = 0; r < R; ++r) {
    for (size_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + r * ws + o), _MM_HINT_T0);
  }
}

// Weights against Q8_0: y[c * ys + r] = sum over blocks of d_w*d_a*dot(w_r, a_c). pf: the next
// tile's rows (prefetched) or nullptr; a single-row tile without one prefetches its own stream
// kMatVecPrefetchAhead ahead.
// Pre (1 x C tiles, C > 1): the activations' operands and scales from pre (gemm_q32's batches).
template <class K, int R, int C, bool Pre = false>
void tile_q8_0(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
               const uint8_t* pf, const PreActs<K, C>* pre = nullptr) {
  constexpr size_t WB = K::WB, AB = sizeof(block_q8_0);
  const int64_t nb = n / QK8_0;
  const TilePtrs<R, C> t(w, ws, a, as);
  __m256 acc0[R][C], acc1[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = _mm256_setzero_ps();
  }
  bool exact[C] = {};
  auto accumulate = [&](__m256 (&acc)[R][C], const __m256i (&s)[R][C], size_t wo, size_t ao, int64_t ib) {
    __m128 dw[R];
    for (int r = 0; r < R; ++r) dw[r] = load4_f16(t.w[r] + wo + K::WD, WB);
    for (int c = 0; c < C; ++c) {
      __m128 da;
      if constexpr (Pre) {
        da = _mm_loadu_ps(pre->d[c] + ib);
      } else {
        da = load4_f16(t.a[c] + ao + kQ80_d, AB);
      }
      for (int r = 0; r < R; ++r) {
        const __m128 d = _mm_mul_ps(dw[r], da);
        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][c]), _mm256_set_m128(d, d), acc[r][c]);
      }
    }
  };
  int64_t i = 0;
  for (; i + 8 <= nb; i += 8) {
    const size_t wo = static_cast<size_t>(i) * WB, ao = static_cast<size_t>(i) * AB;
    if (pf) {
      prefetch_rows<R>(pf + wo, ws, 8 * WB);
    } else if constexpr (R == 1) {
      prefetch_rows<1>(t.w[0] + wo + kMatVecPrefetchAhead, 0, 8 * WB);
    }
    if constexpr (K::kProbe) {
      for (int c = 0; c < C; ++c) {
        __m256i m = loadu(t.a[c] + ao + kQ80_qs);
        for (int k = 1; k < 8; ++k) m = _mm256_min_epi8(m, loadu(t.a[c] + ao + k * AB + kQ80_qs));
        exact[c] = has_minus128(m);
      }
    }
    __m256i s[R][C];
    group4<K, AB, R, C, Pre>(t, wo, ao, exact, s, pre, i);
    accumulate(acc0, s, wo, ao, i);
    group4<K, AB, R, C, Pre>(t, wo + 4 * WB, ao + 4 * AB, exact, s, pre, i + 4);
    accumulate(acc1, s, wo + 4 * WB, ao + 4 * AB, i + 4);
  }
  for (; i < nb; ++i) {
    const size_t wo = static_cast<size_t>(i) * WB, ao = static_cast<size_t>(i) * AB;
    for (int c = 0; c < C; ++c) {
      const typename K::Av av = K::Av::prep(t.a[c] + ao);
      const float da = load_f16(t.a[c] + ao + kQ80_d);
      for (int r = 0; r < R; ++r) {
        __m256i s = K::dot(K::decode(t.w[r] + wo), av);
        if constexpr (K::kProbe) {
          if (has_minus128(av.qy)) s = K::exact(t.w[r] + wo, t.a[c] + ao);
        }
        const float d = load_f16(t.w[r] + wo + K::WD) * da;
        acc0[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d), acc0[r][c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) y[c * ys + r] = hsum(_mm256_add_ps(acc0[r][c], acc1[r][c]));
  }
}

// Q4_1 / Q5_1 against Q8_1: sum d_w*d_a*sum(u*y) + m_w*s_a. (d, m) and (d, s) are adjacent half
// pairs, converted 4 blocks at a time; their product holds d_w*d_a in even lanes, m_w*s_a in odd.
template <class Dp, bool Five>
struct QX_1Ops {
  static constexpr bool kQ81 = true;
  using Block = std::conditional_t<Five, block_q5_1, block_q4_1>;
  static constexpr size_t WB = sizeof(Block), WD = offsetof(Block, d);
  static constexpr bool kProbe = false;
  using Wv = __m256i;
  struct Av {
    __m256i qy;
    static Av prep(const uint8_t* y) { return {loadu(y + kQ81_qs)}; }
  };
  static Wv decode(const uint8_t* x) {
    __m256i u = nibbles_32(x + offsetof(Block, qs));
    if constexpr (Five) {
      u = _mm256_or_si256(u, _mm256_and_si256(bits_to_bytes(load_u32(x + offsetof(block_q5_1, qh))), _mm256_set1_epi8(0x10)));
    }
    return u;
  }
  static __m256i dot(Wv u, const Av& a) { return Dp::pairs(u, a.qy); }
  static __m256i exact(const uint8_t*, const uint8_t*) { return _mm256_setzero_si256(); }  // never (kProbe false)
};

template <class K, int R, int C, bool Pre = false>
void tile_q8_1(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
               const uint8_t* pf, const PreActs<K, C>* pre = nullptr) {
  constexpr size_t WB = K::WB, AB = sizeof(block_q8_1);
  const int64_t nb = n / QK4_1;
  const TilePtrs<R, C> t(w, ws, a, as);
  __m256 acc[R][C], acc_dm[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc[r][c] = acc_dm[r][c] = _mm256_setzero_ps();
  }
  const __m256i even = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const bool never[C] = {};
  int64_t i = 0;
  for (; i + 4 <= nb; i += 4) {
    const size_t wo = static_cast<size_t>(i) * WB, ao = static_cast<size_t>(i) * AB;
    if (pf) {
      prefetch_rows<R>(pf + wo, ws, 4 * WB);
    } else if constexpr (R == 1) {
      prefetch_rows<1>(t.w[0] + wo + kMatVecPrefetchAhead, 0, 4 * WB);
    }
    __m256i s[R][C];
    group4<K, AB, R, C, Pre>(t, wo, ao, never, s, pre, i);
    __m256 dmw[R];
    for (int r = 0; r < R; ++r) dmw[r] = load4_f16x2(t.w[r] + wo + K::WD, WB);
    for (int c = 0; c < C; ++c) {
      __m256 dma;
      if constexpr (Pre) {
        dma = _mm256_loadu_ps(pre->d[c] + 2 * i);
      } else {
        dma = load4_f16x2(t.a[c] + ao + kQ81_d, AB);
      }
      for (int r = 0; r < R; ++r) {
        const __m256 dm = _mm256_mul_ps(dmw[r], dma);
        acc[r][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[r][c]), _mm256_permutevar8x32_ps(dm, even), acc[r][c]);
        acc_dm[r][c] = _mm256_add_ps(acc_dm[r][c], dm);
      }
    }
  }
  float tail[R][C] = {};
  for (; i < nb; ++i) {
    const size_t wo = static_cast<size_t>(i) * WB, ao = static_cast<size_t>(i) * AB;
    for (int c = 0; c < C; ++c) {
      const typename K::Av av = K::Av::prep(t.a[c] + ao);
      for (int r = 0; r < R; ++r) {
        const float d = load_f16(t.w[r] + wo + K::WD) * load_f16(t.a[c] + ao + kQ81_d);
        tail[r][c] += d * static_cast<float>(hsum_i32(K::dot(K::decode(t.w[r] + wo), av))) +
                      load_f16(t.w[r] + wo + K::WD + 2) * load_f16(t.a[c] + ao + kQ81_s);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) {
      const __m256 ms = _mm256_blend_ps(_mm256_setzero_ps(), acc_dm[r][c], 0xAA);  // odd lanes: m*s
      y[c * ys + r] = hsum(_mm256_add_ps(acc[r][c], ms)) + tail[r][c];
    }
  }
}

// The tiles of one type: Tile<K, R, C>::run is tile_q8_0 or tile_q8_1 by K's activation type.
template <class K, int R, int C>
void run_tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
              const uint8_t* pf) {
  if constexpr (K::kQ81) {
    tile_q8_1<K, R, C>(n, w, ws, a, as, y, ys, pf);
  } else {
    tile_q8_0<K, R, C>(n, w, ws, a, as, y, ys, pf);
  }
}

// A 1 x C tile (C > 1) of a batch, its activations' operands from pre.
template <class K, int C>
void run_tile_pre(int64_t n, const uint8_t* w, const uint8_t* a, size_t as, float* y, int64_t ys, const PreActs<K, C>& pre) {
  if constexpr (K::kQ81) {
    tile_q8_1<K, 1, C, true>(n, w, 0, a, as, y, ys, nullptr, &pre);
  } else {
    tile_q8_0<K, 1, C, true>(n, w, 0, a, as, y, ys, nullptr, &pre);
  }
}

// The operands of activation rows [c0, c1) (row c at a + c * as) for PreActs: K::Av of every block
// into av (nb per row) and the blocks' fp16 scales as floats into d (against Q8_0: d; Q8_1: d, s).
template <class K>
void prepare_acts(int64_t nb, const uint8_t* a, size_t as, int64_t c0, int64_t c1, typename K::Av* av, float* d) {
  constexpr size_t AB = K::kQ81 ? sizeof(block_q8_1) : sizeof(block_q8_0);
  constexpr int per = K::kQ81 ? 2 : 1;  // floats per block
  for (int64_t c = c0; c < c1; ++c) {
    const uint8_t* row = a + static_cast<size_t>(c) * as;
    typename K::Av* avc = av + (c - c0) * nb;
    float* dc = d + (c - c0) * nb * per;
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* blk = row + static_cast<size_t>(b) * AB;
      avc[b] = K::Av::prep(blk);
      if constexpr (K::kQ81) {
        dc[2 * b] = load_f16(blk + kQ81_d);
        dc[2 * b + 1] = load_f16(blk + kQ81_s);
      } else {
        dc[b] = load_f16(blk + kQ80_d);
      }
    }
  }
}

template <class K>
float vec_dot_q32(int64_t n, const void* vw, const void* va) {
  float y;
  run_tile<K, 1, 1>(n, static_cast<const uint8_t*>(vw), 0, static_cast<const uint8_t*>(va), 0, &y, 1, nullptr);
  return y;
}

// Matrix-vector products: tiles of 4 rows, each prefetching the next tile's rows. Batches: 1 x 4
// tiles (a weight block decoded once for 4 activation rows) over blocks of 16 activation rows
// (kept in cache while every row passes over them), whose operands are prepared once per block
// (PreActs: not once per weight row).
template <class K>
void gemm_q32(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y,
              int64_t ys) {
  using Fn = void (*)(int64_t, const uint8_t*, size_t, const uint8_t*, size_t, float*, int64_t, const uint8_t*);
  static constexpr Fn kRows1[4] = {run_tile<K, 1, 1>, run_tile<K, 2, 1>, run_tile<K, 3, 1>, run_tile<K, 4, 1>};
  static constexpr Fn kCols[4] = {run_tile<K, 1, 1>, run_tile<K, 1, 2>, run_tile<K, 1, 3>, run_tile<K, 1, 4>};
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  if (nc == 1) {
    for (int64_t r0 = 0; r0 < nr; r0 += 4) {
      const int64_t rr = nr - r0 < 4 ? nr - r0 : 4;
      const uint8_t* next = r0 + 4 < nr ? w + static_cast<size_t>(r0 + 4) * ws : nullptr;
      kRows1[rr - 1](n, w + static_cast<size_t>(r0) * ws, ws, a, as, y + r0, ys, next);
    }
    return;
  }
  constexpr int64_t kActBlock = 16;
  const int64_t nb = n / 32;
  if (nb < 4) {  // no four-block group: nothing to share
    for (int64_t r = 0; r < nr; ++r) {
      for (int64_t c0 = 0; c0 < nc; c0 += 4) {
        const int64_t cc = nc - c0 < 4 ? nc - c0 : 4;
        kCols[cc - 1](n, w + static_cast<size_t>(r) * ws, ws, a + static_cast<size_t>(c0) * as, as, y + c0 * ys + r, ys,
                      nullptr);
      }
    }
    return;
  }
  constexpr int per = K::kQ81 ? 2 : 1;
  thread_local std::vector<typename K::Av> av_buf;
  thread_local std::vector<float> d_buf;
  const size_t need = static_cast<size_t>(kActBlock * nb);
  if (av_buf.size() < need) av_buf.resize(need);
  if (d_buf.size() < need * per) d_buf.resize(need * per);
  for (int64_t cb = 0; cb < nc; cb += kActBlock) {
    const int64_t ce = cb + kActBlock < nc ? cb + kActBlock : nc;
    prepare_acts<K>(nb, a, as, cb, ce, av_buf.data(), d_buf.data());
    for (int64_t r = 0; r < nr; ++r) {
      for (int64_t c0 = cb; c0 < ce; c0 += 4) {
        const int64_t cc = ce - c0 < 4 ? ce - c0 : 4;
        const uint8_t* wr = w + static_cast<size_t>(r) * ws;
        const uint8_t* ac = a + static_cast<size_t>(c0) * as;
        float* yc = y + c0 * ys + r;
        auto pre = [&]<int C>() {
          PreActs<K, C> p;
          for (int c = 0; c < C; ++c) {
            p.av[c] = av_buf.data() + (c0 - cb + c) * nb;
            p.d[c] = d_buf.data() + (c0 - cb + c) * nb * per;
          }
          run_tile_pre<K, C>(n, wr, ac, as, yc, ys, p);
        };
        switch (cc) {
          case 1: kCols[0](n, wr, ws, ac, as, yc, ys, nullptr); break;
          case 2: pre.template operator()<2>(); break;
          case 3: pre.template operator()<3>(); break;
          default: pre.template operator()<4>(); break;
        }
      }
    }
  }
}

}  // namespace
}  // namespace les
