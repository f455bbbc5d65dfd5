// AVX-512 kernels of IQ3_XXS and IQ3_S against Q8_K (F/BW/VL + VNNI; BMI2 for the IQ3_XXS signs).
// Compiled with the flags CMake gives *_avx512.cpp; reached only through the kernel table after
// the dispatcher has checked the CPU (kernels_internal.h).
//
// A weight block is decoded whole, without memory lookups: its 64 codebook indices (9 bits for
// IQ3_S) look up words of 4 nibbles in the codebook held in zmm registers (vpermt2w over pairs of
// registers, 64 words each, and a tree of masked moves on the high index bits; a gather would
// cost more than the rest of the kernel), the nibbles widen to bytes, and the 64 signs of a chunk
// (sub-blocks 2p, 2p+1) become a mask register (IQ3_S stores them as
// bits; IQ3_XXS's 7-bit codes get their parity bit by pdep and a byte-wise xor fold). Products
// with the activations q go through vpdpbusd, which multiplies unsigned by signed bytes, in one of
// two exact ways:
//   one token:   |q| (unsigned, 128 included) times the magnitude negated where the weight's and
//                q's signs differ (mask xor);
//   many tokens: q + 128 times the signed weight, minus 128 * (sum of the signed weights), the
//                latter once per weight chunk and shared by every token.
// Both give the same int32 lanes P (lane i: elements 4i..4i+3 of the chunk, |P| <= 31744), which
// vpdpwssd multiplies by the sub-block scale 2 ls + 1 (low halves; P fits in 16 bits) into a
// block sum per lane. Per block: acc += (d_w * d_a) * float(lanes); at the end the 16 lanes are
// added (_mm512_reduce_add_ps) and IQ3_XXS's sum times 0.25. vec_dot is the 1 x 1 tile of the
// gemm, so the gemm's results are its results bit for bit.

// GCC 12's AVX-512 intrinsics fill "undefined" pass-through operands with a self-initialised
// variable, which -Wuninitialized reports once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <algorithm>
#include <type_traits>
#include <utility>

#include "les/quant/blocks.h"
#include "les/quant/iq3_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/util/fp16.h"

namespace les {
namespace {
namespace iq3_avx512 {

// Sign bytes of one IQ3_XXS sub-block: the four 7-bit codes of aux spread to bytes, each with its
// parity as bit 7 (iq2_signs, four at a time).
inline uint32_t xxs_sign_bytes(uint32_t aux) {
  const uint32_t s = _pdep_u32(aux, 0x7f7f7f7fu);
  uint32_t p = s ^ (s >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return s | ((p & 0x01010101u) << 7);
}

// Two sub-blocks' scales 2 ls + 1 as int32 lanes: lanes 0..7 `lo`, 8..15 `hi`.
inline __m512i scale_lanes(int lo, int hi) {
  return _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(lo), _mm512_set1_epi32(hi));
}

// The codebook as register-resident words: entry i packs its 4 elements as nibbles (element k at
// bits 4k): IQ3_S the magnitudes 1..15 themselves, IQ3_XXS the levels 0..7 (magnitudes 4, 12,
// ..., 52, 62 by a byte shuffle). 64 words per pair of zmm, looked up by vpermt2w.
template <int kEntries>
struct WordGrid {
  alignas(64) uint16_t w[kEntries];
};

template <int kEntries>
WordGrid<kEntries> make_word_grid(const uint32_t* grid, int value_shift) {
  WordGrid<kEntries> g{};
  for (int i = 0; i < kEntries; ++i) {
    uint16_t v = 0;
    for (int k = 0; k < 4; ++k) v = static_cast<uint16_t>(v | ((((grid[i] >> (8 * k)) & 0xff) >> value_shift) << (4 * k)));
    g.w[i] = v;
  }
  return g;
}

// Built on first use (from a kernel, after the dispatcher's CPU check; thread-safe).
const WordGrid<256>& xxs_words() {
  static const WordGrid<256> g = make_word_grid<256>(kIq3xxsGrid, 3);
  return g;
}
const WordGrid<512>& s_words() {
  static const WordGrid<512> g = make_word_grid<512>(kIq3sGrid, 0);
  return g;
}

// Words of 32 9-bit (kPairs = 8) or 8-bit (kPairs = 4) indices: bits 0..5 pick within a pair of
// table registers, bits 6.. pick the pair (a tree of masked moves).
template <int kPairs>
inline __m512i lookup_words(const __m512i* t, __m512i idx) {
  __m512i p[kPairs];
  for (int k = 0; k < kPairs; ++k) p[k] = _mm512_permutex2var_epi16(t[2 * k], idx, t[2 * k + 1]);
  const __mmask32 b6 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(64));
  const __mmask32 b7 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(128));
  const __m512i q0 = _mm512_mask_mov_epi16(p[0], b6, p[1]);
  const __m512i q1 = _mm512_mask_mov_epi16(p[2], b6, p[3]);
  const __m512i r0 = _mm512_mask_mov_epi16(q0, b7, q1);
  if constexpr (kPairs == 4) {
    return r0;
  } else {
    const __mmask32 b8 = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(256));
    const __m512i q2 = _mm512_mask_mov_epi16(p[4], b6, p[5]);
    const __m512i q3 = _mm512_mask_mov_epi16(p[6], b6, p[7]);
    const __m512i r1 = _mm512_mask_mov_epi16(q2, b7, q3);
    return _mm512_mask_mov_epi16(r0, b8, r1);
  }
}

// 16 words (groups 16p..16p+15) -> 64 nibbles as bytes, element 4g + k from nibble k of word g:
// each byte b of the words widened to 16 bits, then (b | b << 4) & 0x0f0f puts its low nibble in
// the low byte and its high nibble in the high one.
inline __m512i expand_nibbles(__m256i words) {
  const __m512i b = _mm512_cvtepu8_epi16(words);
  return _mm512_ternarylogic_epi32(b, _mm512_slli_epi16(b, 4), _mm512_set1_epi8(0x0f), 0xa8);  // (A | B) & C
}

// A decoded weight block: per chunk p (sub-blocks 2p, 2p+1) the 64 magnitudes, the negative
// elements and the scales 2 ls + 1 (int32 lanes 0..7 and 8..15).
struct Decoded {
  __m512i mag[4];
  __mmask64 neg[4];
  __m512i scale[4];
};

template <int kPairs>
struct Tables {
  __m512i t[2 * kPairs];
  explicit Tables(const uint16_t* w) {
    for (int k = 0; k < 2 * kPairs; ++k) t[k] = _mm512_load_si512(w + 32 * k);
  }
};

struct Xxs {
  using Block = block_iq3_xxs;
  using Tab = Tables<4>;
  static constexpr float kFinal = 0.25f;
  static Tab tables() { return Tab(xxs_words().w); }
  static void decode(const Tab& tab, const uint8_t* blk, Decoded& out) {
    const uint8_t* qs = blk + offsetof(block_iq3_xxs, qs);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_setr_epi8(4, 12, 20, 28, 36, 44, 52, 62, 0, 0, 0, 0, 0, 0, 0, 0));
    for (int h = 0; h < 2; ++h) {
      const __m512i idx = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h)));
      const __m512i words = lookup_words<4>(tab.t, idx);
      out.mag[2 * h] = _mm512_shuffle_epi8(lut, expand_nibbles(_mm512_castsi512_si256(words)));
      out.mag[2 * h + 1] = _mm512_shuffle_epi8(lut, expand_nibbles(_mm512_extracti64x4_epi64(words, 1)));
    }
    for (int p = 0; p < 4; ++p) {
      const uint32_t a0 = iq3xxs_signs_scale(qs, 2 * p), a1 = iq3xxs_signs_scale(qs, 2 * p + 1);
      out.neg[p] = static_cast<__mmask64>(xxs_sign_bytes(a0)) | (static_cast<__mmask64>(xxs_sign_bytes(a1)) << 32);
      out.scale[p] = scale_lanes(static_cast<int>(2 * (a0 >> 28) + 1), static_cast<int>(2 * (a1 >> 28) + 1));
    }
  }
};

struct S {
  using Block = block_iq3_s;
  using Tab = Tables<8>;
  static constexpr float kFinal = 1.0f;
  static Tab tables() { return Tab(s_words().w); }
  static void decode(const Tab& tab, const uint8_t* blk, Decoded& out) {
    const uint8_t* qs = blk + offsetof(block_iq3_s, qs);
    uint64_t high;  // bit G: the 9th index bit of group G (bit g of qh[G / 8])
    std::memcpy(&high, blk + offsetof(block_iq3_s, qh), 8);
    for (int h = 0; h < 2; ++h) {
      __m512i idx = _mm512_cvtepu8_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * h)));
      idx = _mm512_mask_add_epi16(idx, static_cast<__mmask32>(high >> (32 * h)), idx, _mm512_set1_epi16(256));
      const __m512i words = lookup_words<8>(tab.t, idx);
      out.mag[2 * h] = expand_nibbles(_mm512_castsi512_si256(words));
      out.mag[2 * h + 1] = expand_nibbles(_mm512_extracti64x4_epi64(words, 1));
    }
    const uint8_t* sc = blk + offsetof(block_iq3_s, scales);
    for (int p = 0; p < 4; ++p) {
      uint64_t signs;
      std::memcpy(&signs, blk + offsetof(block_iq3_s, signs) + 8 * p, 8);
      out.neg[p] = signs;
      out.scale[p] = scale_lanes(2 * (sc[p] & 15) + 1, 2 * (sc[p] >> 4) + 1);
    }
  }
};

inline float h2f(const uint8_t* p) {
  half_bits h;
  std::memcpy(&h, p, 2);
  return fp16_to_f32(h);
}
inline float act_d(const uint8_t* p) {
  float d;
  std::memcpy(&d, p, 4);
  return d;
}

constexpr size_t kQsOff = offsetof(block_q8_K, qs);

// An R x C tile: y[c * ys + r] = dot(row r, activation row c). pf: where the next tile's rows
// start (prefetched block by block), or nullptr.
template <class W, int R, int C>
void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
          const uint8_t* pf) {
  constexpr size_t kW = sizeof(typename W::Block);
  const int64_t nb = n / QK_K;
  __m512 accf[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) accf[r][c] = _mm512_setzero_ps();
  }
  const __m512i zero = _mm512_setzero_si512();
  const typename W::Tab tab = W::tables();
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* wb[R];
    const uint8_t* ab[C];
    for (int r = 0; r < R; ++r) wb[r] = w + r * ws + static_cast<size_t>(i) * kW;
    for (int c = 0; c < C; ++c) ab[c] = a + c * as + static_cast<size_t>(i) * sizeof(block_q8_K);
    if (pf) {
      for (int r = 0; r < R; ++r) {
        for (size_t o = 0; o < kW; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + r * ws + i * kW + o), _MM_HINT_T0);
      }
    }
    __m512i acc[R][C];
    if constexpr (C == 1) {
      __m512i u[4];
      __mmask64 qneg[4];
      for (int p = 0; p < 4; ++p) {
        const __m512i q = _mm512_loadu_si512(ab[0] + kQsOff + 64 * p);
        u[p] = _mm512_abs_epi8(q);
        qneg[p] = _mm512_movepi8_mask(q);
      }
      for (int r = 0; r < R; ++r) {
        Decoded dec;
        W::decode(tab, wb[r], dec);
        acc[r][0] = zero;
        for (int p = 0; p < 4; ++p) {
          const __m512i s = _mm512_mask_sub_epi8(dec.mag[p], dec.neg[p] ^ qneg[p], zero, dec.mag[p]);
          acc[r][0] = _mm512_dpwssd_epi32(acc[r][0], _mm512_dpbusd_epi32(zero, u[p], s), dec.scale[p]);
        }
      }
    } else {
      const __m512i bias = _mm512_set1_epi8(static_cast<char>(0x80));
      for (int r = 0; r < R; ++r) {
        Decoded dec;
        W::decode(tab, wb[r], dec);
        for (int c = 0; c < C; ++c) acc[r][c] = zero;
        for (int p = 0; p < 4; ++p) {
          const __m512i s = _mm512_mask_sub_epi8(dec.mag[p], dec.neg[p], zero, dec.mag[p]);
          const __m512i minus_corr = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, bias, s));
          for (int c = 0; c < C; ++c) {
            const __m512i u = _mm512_xor_si512(_mm512_loadu_si512(ab[c] + kQsOff + 64 * p), bias);
            acc[r][c] = _mm512_dpwssd_epi32(acc[r][c], _mm512_dpbusd_epi32(minus_corr, u, s), dec.scale[p]);
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dw = h2f(wb[r]);
      for (int c = 0; c < C; ++c) {
        accf[r][c] = _mm512_fmadd_ps(_mm512_set1_ps(dw * act_d(ab[c])), _mm512_cvtepi32_ps(acc[r][c]), accf[r][c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) y[c * ys + r] = W::kFinal * _mm512_reduce_add_ps(accf[r][c]);
  }
}

template <class W>
float vec_dot(int64_t n, const void* w, const void* a) {
  float y;
  tile<W, 1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0, &y, 1, nullptr);
  return y;
}

// Calls f(std::integral_constant<int, k>{}) for a run-time k in 1..kMax.
template <int kMax, class F>
inline void with_count(int64_t k, F&& f) {
  [&]<int... I>(std::integer_sequence<int, I...>) {
    ((k == I + 1 ? (f(std::integral_constant<int, I + 1>{}), 0) : 0), ...);
  }(std::make_integer_sequence<int, kMax>{});
}

// One token: tiles of kRowsMv rows (each row's blocks decoded once, the activations' |q| and
// signs shared). Several tokens: tiles of kRows rows x kCols tokens (each weight block decoded once
// per tile; one row x 8 tokens measured best on Zen 5: 69 GMAC/s against 46 for 4 x 4, whose
// accumulators do not fit the registers). Edges by smaller tiles of the same code.
constexpr int kRowsMv = 4, kRows = 1, kCols = 8;

template <class W>
void gemm(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y,
          int64_t ys) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  if (nc == 1) {
    int64_t r = 0;
    for (; r + kRowsMv <= nr; r += kRowsMv) {
      const uint8_t* pf = r + 2 * kRowsMv <= nr ? w + (r + kRowsMv) * ws : nullptr;
      tile<W, kRowsMv, 1>(n, w + r * ws, ws, a, as, y + r, ys, pf);
    }
    with_count<kRowsMv - 1>(nr - r, [&](auto R) { tile<W, R(), 1>(n, w + r * ws, ws, a, as, y + r, ys, nullptr); });
    return;
  }
  for (int64_t r = 0; r < nr; r += kRows) {
    const int64_t rows = std::min<int64_t>(kRows, nr - r);
    with_count<kRows>(rows, [&](auto R) {
      int64_t c = 0;
      for (; c + kCols <= nc; c += kCols) tile<W, R(), kCols>(n, w + r * ws, ws, a + c * as, as, y + c * ys + r, ys, nullptr);
      with_count<kCols - 1>(nc - c, [&](auto C) {
        tile<W, R(), C()>(n, w + r * ws, ws, a + c * as, as, y + c * ys + r, ys, nullptr);
      });
    });
  }
}

}  // namespace iq3_avx512
}  // namespace

void fill_kernel_table_avx512_iq3(KernelTable& t) {
  namespace k = iq3_avx512;
  t.vec_dot[static_cast<int>(Type::IQ3_XXS)] = k::vec_dot<k::Xxs>;
  t.vec_dot[static_cast<int>(Type::IQ3_S)] = k::vec_dot<k::S>;
  t.gemm[static_cast<int>(Type::IQ3_XXS)] = k::gemm<k::Xxs>;
  t.gemm[static_cast<int>(Type::IQ3_S)] = k::gemm<k::S>;
}

}  // namespace les
