// AVX2 kernels of IQ3_XXS and IQ3_S against Q8_K (AVX2 + FMA + BMI2). Compiled with the flags
// CMake gives *_avx2.cpp; reached only through the kernel table after the dispatcher has checked
// the CPU (kernels_internal.h).
//
// A weight block is decoded one sub-block of 32 at a time: its 8 codebook points (4 magnitudes
// each, as bytes) by scalar loads (on Zen 5 twice as fast as a vpgatherdd; IQ3_S's 9-bit indices
// made by vector first), its 32 signs as a byte mask (0xff: negative). The
// products with the activations q go through vpmaddubsw (unsigned x signed bytes, pairs to int16)
// in one of two exact ways:
//   one token:   |q| times the magnitude with the sign of (weight sign) * (sign of q) (vpsignb by
//                (q ^ mask) | 1, which is never 0 and has the sign of the product);
//   many tokens: q + 128 times the signed weight, minus 128 * (pair sums of the signed weight),
//                the latter once per weight sub-block and shared by every token.
// Both give the same int16 pair sums (|.| <= 2 * 128 * 62, never saturating), which vpmaddwd
// multiplies by the sub-block scale 2 ls + 1 into int32 lanes (lane i: elements 4i..4i+3), added
// over the block. Per block: acc += (d_w * d_a) * float(lanes); at the end the 8 lanes are added in
// a fixed order and IQ3_XXS's sum times 0.25. vec_dot is the 1 x 1 tile of the gemm, so the gemm's
// results are its results bit for bit.

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/quant/iq3_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/util/fp16.h"

namespace les {
namespace {
namespace iq3_avx2 {

// Sign bytes of one IQ3_XXS sub-block: the four 7-bit codes of aux spread to bytes, each with its
// parity as bit 7 (iq2_signs, four at a time).
inline uint32_t xxs_sign_bytes(uint32_t aux) {
  const uint32_t s = _pdep_u32(aux, 0x7f7f7f7fu);
  uint32_t p = s ^ (s >> 4);
  p ^= p >> 2;
  p ^= p >> 1;
  return s | ((p & 0x01010101u) << 7);
}

// 32 sign bits -> 32 bytes, 0xff where the bit is set.
inline __m256i sign_mask(uint32_t bits) {
  const __m256i spread = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3,
                                          3, 3, 3, 3, 3, 3, 3);
  const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
  const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(bits)), spread), bit);
  return _mm256_cmpeq_epi8(v, bit);
}

// One sub-block of a weight block: magnitudes, negative elements (0xff bytes), scale 2 ls + 1 in
// every int16.
struct Chunk {
  __m256i mag;
  __m256i neg;
  __m256i scale;
};

struct Xxs {
  using Block = block_iq3_xxs;
  static constexpr float kFinal = 0.25f;
  static Chunk chunk(const uint8_t* blk, int ib) {
    const uint8_t* qs = blk + offsetof(block_iq3_xxs, qs);
    const uint8_t* q = qs + 8 * ib;
    const uint32_t aux = iq3xxs_signs_scale(qs, ib);
    const uint32_t* g = kIq3xxsGrid;
    Chunk c;
    c.mag = _mm256_setr_epi32(static_cast<int>(g[q[0]]), static_cast<int>(g[q[1]]), static_cast<int>(g[q[2]]),
                              static_cast<int>(g[q[3]]), static_cast<int>(g[q[4]]), static_cast<int>(g[q[5]]),
                              static_cast<int>(g[q[6]]), static_cast<int>(g[q[7]]));
    c.neg = sign_mask(xxs_sign_bytes(aux));
    c.scale = _mm256_set1_epi16(static_cast<short>(2 * (aux >> 28) + 1));
    return c;
  }
};

struct S {
  using Block = block_iq3_s;
  static constexpr float kFinal = 1.0f;
  static Chunk chunk(const uint8_t* blk, int ib) {
    const uint8_t* qs = blk + offsetof(block_iq3_s, qs);
    const int high = blk[offsetof(block_iq3_s, qh) + ib];  // bit g: 9th index bit of point g
    uint32_t signs;
    std::memcpy(&signs, blk + offsetof(block_iq3_s, signs) + 4 * ib, 4);
    const int sc = iq3s_scale(blk + offsetof(block_iq3_s, scales), ib);
    // The 9-bit indices by vector (one shift per lane), read back for the scalar loads.
    const __m256i shift = _mm256_setr_epi32(8, 7, 6, 5, 4, 3, 2, 1);
    __m256i idx = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * ib)));
    idx = _mm256_or_si256(idx, _mm256_and_si256(_mm256_sllv_epi32(_mm256_set1_epi32(high), shift), _mm256_set1_epi32(256)));
    alignas(32) uint32_t ix[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(ix), idx);
    const uint32_t* g = kIq3sGrid;
    auto at = [&](int k) { return static_cast<int>(g[ix[k]]); };
    Chunk c;
    c.mag = _mm256_setr_epi32(at(0), at(1), at(2), at(3), at(4), at(5), at(6), at(7));
    c.neg = sign_mask(signs);
    c.scale = _mm256_set1_epi16(static_cast<short>(2 * sc + 1));
    return c;
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

// Sum of the 8 lanes, in a fixed order.
inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

constexpr size_t kQsOff = offsetof(block_q8_K, qs);

// An R x C tile: y[c * ys + r] = dot(row r, activation row c). pf: where the next tile's rows
// start (prefetched block by block), or nullptr.
template <class W, int R, int C>
void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
          const uint8_t* pf) {
  constexpr size_t kW = sizeof(typename W::Block);
  const int64_t nb = n / QK_K;
  __m256 accf[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) accf[r][c] = _mm256_setzero_ps();
  }
  for (int64_t i = 0; i < nb; ++i) {
    const uint8_t* wb[R];
    const uint8_t* ab[C];
    for (int r = 0; r < R; ++r) wb[r] = w + r * ws + static_cast<size_t>(i) * kW;
    for (int c = 0; c < C; ++c) ab[c] = a + c * as + static_cast<size_t>(i) * sizeof(block_q8_K);
    if (pf) {
      for (int r = 0; r < R; ++r) {
        for (size_t o = 0; o < kW; o += 64) _mm_prefetch(reinterpret_cast<const char*>(pf + r * ws + i * kW + o), _MM_HINT_T0);
      }
    } else if constexpr (R == 1 && C == 1) {
      for (size_t o = 0; o < kW; o += 64) {
        _mm_prefetch(reinterpret_cast<const char*>(wb[0] + kMatVecPrefetchAhead + o), _MM_HINT_T0);
      }
    }
    __m256i acc[R][C];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_si256();
    }
    for (int ib = 0; ib < QK_K / 32; ++ib) {
      if constexpr (C == 1) {
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[0] + kQsOff + 32 * ib));
        const __m256i u = _mm256_abs_epi8(q);
        const __m256i one = _mm256_set1_epi8(1);
        for (int r = 0; r < R; ++r) {
          const Chunk ch = W::chunk(wb[r], ib);
          const __m256i s = _mm256_sign_epi8(ch.mag, _mm256_or_si256(_mm256_xor_si256(q, ch.neg), one));
          acc[r][0] = _mm256_add_epi32(acc[r][0], _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), ch.scale));
        }
      } else {
        const __m256i bias = _mm256_set1_epi8(static_cast<char>(0x80));
        __m256i u[C];
        for (int c = 0; c < C; ++c) {
          u[c] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ab[c] + kQsOff + 32 * ib)), bias);
        }
        for (int r = 0; r < R; ++r) {
          const Chunk ch = W::chunk(wb[r], ib);
          const __m256i s = _mm256_sub_epi8(_mm256_xor_si256(ch.mag, ch.neg), ch.neg);
          const __m256i corr = _mm256_maddubs_epi16(bias, s);
          for (int c = 0; c < C; ++c) {
            const __m256i pairs = _mm256_sub_epi16(_mm256_maddubs_epi16(u[c], s), corr);
            acc[r][c] = _mm256_add_epi32(acc[r][c], _mm256_madd_epi16(pairs, ch.scale));
          }
        }
      }
    }
    for (int r = 0; r < R; ++r) {
      const float dw = h2f(wb[r]);
      for (int c = 0; c < C; ++c) {
        accf[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * act_d(ab[c])), _mm256_cvtepi32_ps(acc[r][c]), accf[r][c]);
      }
    }
  }
  for (int c = 0; c < C; ++c) {
    for (int r = 0; r < R; ++r) y[c * ys + r] = W::kFinal * hsum(accf[r][c]);
  }
}

template <class W>
float vec_dot(int64_t n, const void* w, const void* a) {
  float y;
  tile<W, 1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0, &y, 1, nullptr);
  return y;
}

// Tiles of kR rows x kC tokens, or kR rows x 1 token; edges by smaller tiles of the same code.
constexpr int kR = 2, kC = 2;

template <class W, int R>
void tile_cols(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, int64_t nc, float* y,
               int64_t ys, const uint8_t* pf) {
  int64_t c = 0;
  for (; c + kC <= nc; c += kC) tile<W, R, kC>(n, w, ws, a + c * as, as, y + c * ys, ys, c == 0 ? pf : nullptr);
  if (c < nc) tile<W, R, 1>(n, w, ws, a + c * as, as, y + c * ys, ys, c == 0 ? pf : nullptr);
}

template <class W>
void gemm(int64_t n, const void* vw, size_t ws, int64_t nr, const void* va, size_t as, int64_t nc, float* y,
          int64_t ys) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  int64_t r = 0;
  for (; r + kR <= nr; r += kR) {
    const uint8_t* pf = r + 2 * kR <= nr ? w + (r + kR) * ws : nullptr;
    tile_cols<W, kR>(n, w + r * ws, ws, a, as, nc, y + r, ys, pf);
  }
  if (r < nr) tile_cols<W, 1>(n, w + r * ws, ws, a, as, nc, y + r, ys, nullptr);
}

}  // namespace iq3_avx2
}  // namespace

void fill_kernel_table_avx2_iq3(KernelTable& t) {
  namespace k = iq3_avx2;
  t.vec_dot[static_cast<int>(Type::IQ3_XXS)] = k::vec_dot<k::Xxs>;
  t.vec_dot[static_cast<int>(Type::IQ3_S)] = k::vec_dot<k::S>;
  t.gemm[static_cast<int>(Type::IQ3_XXS)] = k::gemm<k::Xxs>;
  t.gemm[static_cast<int>(Type::IQ3_S)] = k::gemm<k::S>;
}

}  // namespace les
