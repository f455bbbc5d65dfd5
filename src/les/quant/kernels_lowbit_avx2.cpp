// AVX2 kernels of TQ1_0, TQ2_0, MXFP4, NVFP4 (AVX2 + FMA + F16C): vec_dot and gemm.
//
// Weights become bytes in the order of the activation bytes y, 32 per ymm: the ternary digits
// (0..2, TQ2_0 0..3) as vpmaddubsw's unsigned operand, summed in int16 over a block and corrected
// by Q8_K's bsums (the digits' offset of 1); the E2M1 values (signed, -12..12) against |y| with
// y's sign moved onto them (vpmaddubsw, exact: |pairs| <= 2 * 128 * 12), then vpmaddwd. Each
// block's int32 lanes are converted and multiplied by the block's float scale into per-product
// accumulators, in an order fixed by the code below for every tile shape, so that gemm equals
// vec_dot (the 1 x 1 tile) bit for bit. Tiles are driven by tiles::gemm_tiles.

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_x86_tiles.h"
#include "les/quant/lowbit_scales.h"

namespace les {
namespace {
namespace lowbit_avx2 {

using tiles::ld128;
using tiles::ld256;
using tiles::ld_f16;
using tiles::RowPtrs;

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline __m256i fp4_book() {
  return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kFp4Values)));
}

// Sum of v * y in int32 lanes (4 bytes each) for |v| <= 12 and any int8 y; ay = |y|.
inline __m256i dot_signed(__m256i v, __m256i ay, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ay, _mm256_sign_epi8(v, y)), _mm256_set1_epi16(1));
}

// ---------------------------------------------------------------------------------------------
// MXFP4 x Q8_0: one block per ymm; blocks alternate between 2 accumulators (even, odd).

struct Mxfp4 {
  static constexpr size_t WB = sizeof(block_mxfp4), AB = sizeof(block_q8_0);
  static constexpr int64_t kBlock = QK_MXFP4;

  static __m256i decode(const uint8_t* b) {
    const __m256i q = _mm256_broadcastsi128_si256(ld128(b + offsetof(block_mxfp4, qs)));
    const __m256i idx = _mm256_and_si256(_mm256_blend_epi32(q, _mm256_srli_epi16(q, 4), 0xF0), _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(fp4_book(), idx);
  }

  template <int R, int C, int NB>
  static void step(const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t wo, size_t ao, __m256 (&acc)[R][C][2]) {
    __m256i v[R][NB];
    float dw[R][NB];
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < NB; ++k) {
        v[r][k] = decode(wr.p[r] + wo + k * WB);
        dw[r][k] = e8m0_half_to_f32(wr.p[r][wo + k * WB]);
      }
    }
    for (int c = 0; c < C; ++c) {
      for (int k = 0; k < NB; ++k) {
        const uint8_t* a = ar.p[c] + ao + k * AB;
        const __m256i y = ld256(a + offsetof(block_q8_0, qs));
        const __m256i ay = _mm256_abs_epi8(y);
        const float da = ld_f16(a + offsetof(block_q8_0, d));
        for (int r = 0; r < R; ++r) {
          const __m256 d = _mm256_set1_ps(da * dw[r][k]);
          acc[r][c][k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_signed(v[r][k], ay, y)), d, acc[r][c][k]);
        }
      }
    }
  }
  template <int R, int C>
  static void run(int64_t n, const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t ws, const uint8_t* pf,
                  __m256 (&acc)[R][C][2]) {
    const int64_t nb = n / kBlock;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) {
      if (pf) tiles::prefetch_rows<R>(pf + static_cast<size_t>(i) * WB, ws, 2 * WB);
      step<R, C, 2>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc);
    }
    if (i < nb) step<R, C, 1>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc);
  }
};

// ---------------------------------------------------------------------------------------------
// NVFP4 x Q8_0: half h of a block (sub-blocks 2h, 2h + 1: one per 128-bit lane) per ymm, against
// Q8_0 block 2i + h, into accumulator h.

struct Nvfp4 {
  static constexpr size_t WB = sizeof(block_nvfp4), AB = 2 * sizeof(block_q8_0);
  static constexpr int64_t kBlock = QK_NVFP4;

  static __m256i decode(const uint8_t* b, int h) {
    const __m256i q = _mm256_broadcastsi128_si256(ld128(b + offsetof(block_nvfp4, qs) + 16 * h));
    // lane 0: bytes 0..7 twice, lane 1: bytes 8..15 twice; the second copy's high nibbles
    const __m256i dup = _mm256_shuffle_epi8(
        q, _mm256_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 8, 9, 10, 11,
                            12, 13, 14, 15));
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi64(dup, _mm256_setr_epi64x(0, 4, 0, 4)), _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(fp4_book(), idx);
  }

  template <int R, int C>
  static void step(const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t wo, size_t ao, __m256 (&acc)[R][C][2]) {
    __m256i v[R][2];
    float dw[R][4];
    for (int r = 0; r < R; ++r) {
      const uint8_t* b = wr.p[r] + wo;
      for (int h = 0; h < 2; ++h) v[r][h] = decode(b, h);
      for (int s = 0; s < 4; ++s) dw[r][s] = ue4m3_half_to_f32(b[offsetof(block_nvfp4, d) + s]);
    }
    for (int c = 0; c < C; ++c) {
      for (int h = 0; h < 2; ++h) {
        const uint8_t* a = ar.p[c] + ao + h * sizeof(block_q8_0);
        const __m256i y = ld256(a + offsetof(block_q8_0, qs));
        const __m256i ay = _mm256_abs_epi8(y);
        const float da = ld_f16(a + offsetof(block_q8_0, d));
        for (int r = 0; r < R; ++r) {
          const __m256 d = _mm256_set_m128(_mm_set1_ps(da * dw[r][2 * h + 1]), _mm_set1_ps(da * dw[r][2 * h]));
          acc[r][c][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot_signed(v[r][h], ay, y)), d, acc[r][c][h]);
        }
      }
    }
  }
  template <int R, int C>
  static void run(int64_t n, const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t ws, const uint8_t* pf,
                  __m256 (&acc)[R][C][2]) {
    for (int64_t i = 0; i < n / kBlock; ++i) {
      if (pf) tiles::prefetch_rows<R>(pf + static_cast<size_t>(i) * WB, ws, WB);
      step<R, C>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// TQ1_0 / TQ2_0 x Q8_K: the block's 256 digits as 8 ymm in element order (ymm j: elements
// 32j..32j+31), vpmaddubsw against y, summed in int16 (|lane| <= 8 * 2 * 3 * 128), minus the
// bsums, then vpmaddwd; blocks alternate between 2 accumulators.

constexpr size_t kQ8K_d = offsetof(block_q8_K, d);
constexpr size_t kQ8K_qs = offsetof(block_q8_K, qs);
constexpr size_t kQ8K_bsums = offsetof(block_q8_K, bsums);

// Ternary digit of every byte of x by the 16-bit lane multipliers m16 (see the AVX-512 file:
// ((q * m mod 256) * 3) >> 8 by vpmullw / vpmulhuw on the byte moved to the high half).
inline __m256i trits(__m256i x, __m256i m16) {
  const __m256i three = _mm256_set1_epi16(3);
  const __m256i even = _mm256_mulhi_epu16(_mm256_mullo_epi16(_mm256_slli_epi16(x, 8), m16), three);
  const __m256i odd =
      _mm256_mulhi_epu16(_mm256_mullo_epi16(_mm256_and_si256(x, _mm256_set1_epi16(static_cast<short>(0xFF00))), m16), three);
  return _mm256_or_si256(even, _mm256_slli_epi16(odd, 8));
}

struct Tq1 {
  static constexpr size_t WB = sizeof(block_tq1_0);
  static constexpr size_t kD = offsetof(block_tq1_0, d);
  // qs[0..31] digit k -> 32k + m; qs[32..47] digit k -> 160 + 16k + m; qh[j] digit k -> 240 + 4k + j.
  static void decode(const uint8_t* b, __m256i (&u)[8]) {
    const __m256i q0 = ld256(b);
    for (int k = 0; k < 5; ++k) {
      static constexpr short kPow3[5] = {1, 3, 9, 27, 81};
      u[k] = trits(q0, _mm256_set1_epi16(kPow3[k]));
    }
    const __m256i q1 = _mm256_broadcastsi128_si256(ld128(b + 32));
    u[5] = trits(q1, _mm256_setr_epi16(1, 1, 1, 1, 1, 1, 1, 1, 3, 3, 3, 3, 3, 3, 3, 3));
    u[6] = trits(q1, _mm256_setr_epi16(9, 9, 9, 9, 9, 9, 9, 9, 27, 27, 27, 27, 27, 27, 27, 27));
    uint32_t qh;
    std::memcpy(&qh, b + offsetof(block_tq1_0, qh), 4);
    const __m256i q2 = _mm256_set_m128i(_mm_set1_epi32(static_cast<int>(qh)), ld128(b + 32));
    u[7] = trits(q2, _mm256_setr_epi16(81, 81, 81, 81, 81, 81, 81, 81, 1, 1, 3, 3, 9, 9, 27, 27));
  }
};

struct Tq2 {
  static constexpr size_t WB = sizeof(block_tq2_0);
  static constexpr size_t kD = offsetof(block_tq2_0, d);
  // Element 128h + 32k + m at bits 2k of qs[32h + m].
  static void decode(const uint8_t* b, __m256i (&u)[8]) {
    const __m256i m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; ++h) {
      const __m256i q = ld256(b + 32 * h);
      u[4 * h + 0] = _mm256_and_si256(q, m3);
      u[4 * h + 1] = _mm256_and_si256(_mm256_srli_epi16(q, 2), m3);
      u[4 * h + 2] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m3);
      u[4 * h + 3] = _mm256_and_si256(_mm256_srli_epi16(q, 6), m3);
    }
  }
};

template <class T>
struct Ternary {
  static constexpr size_t WB = T::WB, AB = sizeof(block_q8_K);
  static constexpr int64_t kBlock = QK_K;

  // One block of R rows x C activation rows into accumulator k.
  template <int R, int C>
  static void step(const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t wo, size_t ao, int k, __m256 (&acc)[R][C][2]) {
    for (int r = 0; r < R; ++r) {
      __m256i u[8];
      T::decode(wr.p[r] + wo, u);
      const float dw = ld_f16(wr.p[r] + wo + T::kD);
      for (int c = 0; c < C; ++c) {
        const uint8_t* a = ar.p[c] + ao;
        __m256i s0 = _mm256_maddubs_epi16(u[0], ld256(a + kQ8K_qs));
        __m256i s1 = _mm256_maddubs_epi16(u[1], ld256(a + kQ8K_qs + 32));
        for (int j = 2; j < 8; j += 2) {
          s0 = _mm256_add_epi16(s0, _mm256_maddubs_epi16(u[j], ld256(a + kQ8K_qs + 32 * j)));
          s1 = _mm256_add_epi16(s1, _mm256_maddubs_epi16(u[j + 1], ld256(a + kQ8K_qs + 32 * j + 32)));
        }
        const __m256i s = _mm256_sub_epi16(_mm256_add_epi16(s0, s1), ld256(a + kQ8K_bsums));
        const __m256 d = _mm256_set1_ps(dw * tiles::ld_f32(a + kQ8K_d));
        acc[r][c][k] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(s, _mm256_set1_epi16(1))), d, acc[r][c][k]);
      }
    }
  }
  template <int R, int C>
  static void run(int64_t n, const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t ws, const uint8_t* pf,
                  __m256 (&acc)[R][C][2]) {
    for (int64_t i = 0; i < n / kBlock; ++i) {
      if (pf) tiles::prefetch_rows<R>(pf + static_cast<size_t>(i) * WB, ws, WB);
      step<R, C>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, static_cast<int>(i & 1), acc);
    }
  }
};

// ---------------------------------------------------------------------------------------------
// Tiles and drivers.

template <class K>
struct Kernel {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                   const uint8_t* pf) {
    __m256 acc[R][C][2];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = _mm256_setzero_ps();
    }
    const RowPtrs<R> wr(w, ws);
    const RowPtrs<C> ar(a, as);
    K::template run<R, C>(n, wr, ar, ws, pf, acc);
    for (int c = 0; c < C; ++c) {
      for (int r = 0; r < R; ++r) y[c * ys + r] = hsum(_mm256_add_ps(acc[r][c][0], acc[r][c][1]));
    }
  }
};

template <class K>
float vec_dot(int64_t n, const void* w, const void* a) {
  float y;
  Kernel<K>::template tile<1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0, &y, 0,
                                  nullptr);
  return y;
}

// Tiles of up to 2 rows x 2 activation rows (the 16 ymm registers); matrix-vector products in
// tiles of 2 rows that read 2 long streams, each prefetched ahead (gemm_tiles).
template <class K>
void gemm(int64_t n, const void* w, size_t ws, int64_t nr, const void* a, size_t as, int64_t nc, float* y, int64_t ys) {
  if (nc == 1) {
    tiles::gemm_tiles<Kernel<K>, 2, 1>(n, w, ws, nr, a, as, nc, y, ys);
  } else {
    tiles::gemm_tiles<Kernel<K>, 2, 2>(n, w, ws, nr, a, as, nc, y, ys);
  }
}

inline int tid(Type t) { return static_cast<int>(t); }

}  // namespace lowbit_avx2
}  // namespace

void fill_kernel_table_avx2_lowbit(KernelTable& t) {
  namespace k = lowbit_avx2;
  t.vec_dot[k::tid(Type::MXFP4)] = k::vec_dot<k::Mxfp4>;
  t.gemm[k::tid(Type::MXFP4)] = k::gemm<k::Mxfp4>;
  t.vec_dot[k::tid(Type::NVFP4)] = k::vec_dot<k::Nvfp4>;
  t.gemm[k::tid(Type::NVFP4)] = k::gemm<k::Nvfp4>;
  t.vec_dot[k::tid(Type::TQ1_0)] = k::vec_dot<k::Ternary<k::Tq1>>;
  t.gemm[k::tid(Type::TQ1_0)] = k::gemm<k::Ternary<k::Tq1>>;
  t.vec_dot[k::tid(Type::TQ2_0)] = k::vec_dot<k::Ternary<k::Tq2>>;
  t.gemm[k::tid(Type::TQ2_0)] = k::gemm<k::Ternary<k::Tq2>>;
}

}  // namespace les
