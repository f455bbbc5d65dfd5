// AVX-512 kernels of TQ1_0, TQ2_0, MXFP4, NVFP4 (AVX-512 F/BW/VL/DQ + VNNI): vec_dot and gemm.
//
// Every type turns its weights into unsigned bytes u (a ternary digit 0..2 / 0..3, or an E2M1
// value plus 12, 0..24) laid out in the order of the activation bytes y, so that vpdpbusd gives
// exact int32 lane sums of u * y; the offset (1 for the ternary types, 12 for the FP4 values)
// comes off through the activations' sums (Q8_K's bsums; for Q8_0 a vpdpbusd of 12s), which a
// tile computes once per activation row and shares across its weight rows. Each block's (or pair
// of blocks') int32 lanes are converted and multiplied by their float scale into per-product float
// accumulators, in an order fixed by the code below for every tile shape: a product computed in
// any tile of rows x activation rows equals the vec_dot (the 1 x 1 tile) bit for bit.
// Tiles are driven by tiles::gemm_tiles (kernels_x86_tiles.h).

// GCC 12's AVX-512 intrinsics fill "undefined" pass-through operands with a self-initialised
// variable, which -Wuninitialized reports once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <bit>
#include <cstddef>
#include <cstdint>

#include "les/quant/blocks.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_x86_tiles.h"
#include "les/quant/lowbit_scales.h"

namespace les {
namespace {
namespace lowbit_avx512 {

using tiles::ld128;
using tiles::ld256;
using tiles::ld_f16;
using tiles::RowPtrs;

// e8m0_half_to_f32 of every byte, for scalar lookups.
struct E8m0Table {
  float v[256];
  constexpr E8m0Table() : v{} {
    for (int e = 0; e < 256; ++e) v[e] = std::bit_cast<float>(e8m0_half_bits(static_cast<uint8_t>(e)));
  }
};
alignas(64) constexpr E8m0Table kE8m0{};

// E2M1 values (doubled) plus 12, as unsigned bytes, in every 128-bit lane.
inline __m512i fp4_book_u() {
  alignas(16) static constexpr uint8_t b[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
  static_assert(b[7] == 12 + 12 && b[15] == 12 - 12);
  return _mm512_broadcast_i32x4(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
}

inline float hsum(__m512 v) { return _mm512_reduce_add_ps(v); }

// -12 * (sum of y over each group of 4 bytes): the offset term of u = value + 12.
inline __m512i fp4_offset(__m512i y) {
  return _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(12), y));
}

// ---------------------------------------------------------------------------------------------
// MXFP4 x Q8_0: two blocks per vector (block 2g in the lower 256 bits, 2g+1 in the upper); steps
// of 4 blocks (groups 0 and 1 into accumulators 0 and 1), then one of 2 and one of 1 (into 0).

struct Mxfp4 {
  static constexpr size_t WB = sizeof(block_mxfp4), AB = sizeof(block_q8_0);
  static constexpr int64_t kBlock = QK_MXFP4;
  static constexpr int NACC = 2;

  // u of blocks at b0 and b0 + WB (two = false: the upper half codes 0, against y = 0 there).
  static __m512i decode(const uint8_t* b0, bool two) {
    const uint8_t* q = b0 + offsetof(block_mxfp4, qs);
    __m512i v = _mm512_broadcast_i32x4(ld128(q));
    v = two ? _mm512_mask_broadcast_i32x4(v, 0xFF00, ld128(q + WB)) : _mm512_maskz_mov_epi64(0x0F, v);
    // lanes [q0 q0 q1 q1]: low nibbles in lanes 0, 2, high nibbles in lanes 1, 3
    const __m512i idx = _mm512_and_si512(_mm512_mask_srli_epi16(v, 0xFF00FF00u, v, 4), _mm512_set1_epi8(0x0F));
    return _mm512_shuffle_epi8(fp4_book_u(), idx);
  }
  static __m512i acts(const uint8_t* a0, bool two) {
    const __m256i lo = ld256(a0 + offsetof(block_q8_0, qs));
    return two ? _mm512_inserti64x4(_mm512_castsi256_si512(lo), ld256(a0 + AB + offsetof(block_q8_0, qs)), 1)
               : _mm512_zextsi256_si512(lo);
  }
  // The NB (1, 2, 4) weight scales of consecutive blocks at b, and the activation scales at a.
  template <int NB>
  static __m128 wscales(const uint8_t* b) {
    float s[4] = {};
    for (int k = 0; k < NB; ++k) s[k] = kE8m0.v[b[k * WB]];
    return _mm_loadu_ps(s);
  }
  template <int NB>
  static __m128 ascales(const uint8_t* a) {
    return tiles::f16x4(a + offsetof(block_q8_0, d), AB, NB);
  }
  // Lanes 0-7: float 2g of v4; lanes 8-15: float 2g + 1.
  static __m512 splat_pair(__m128 v4, int g) {
    const __m512i idx = g == 0 ? _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)
                               : _mm512_setr_epi32(2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v4));
  }

  template <int R, int C, int NB>
  static void step(const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t wo, size_t ao, __m512 (&acc)[R][C][NACC]) {
    constexpr int NG = (NB + 1) / 2;
    __m512i u[R][NG];
    __m128 dw[R];
    for (int r = 0; r < R; ++r) {
      for (int g = 0; g < NG; ++g) u[r][g] = decode(wr.p[r] + wo + 2 * g * WB, 2 * g + 1 < NB);
      dw[r] = wscales<NB>(wr.p[r] + wo);
    }
    for (int c = 0; c < C; ++c) {
      const uint8_t* a = ar.p[c] + ao;
      __m512i y[NG], off[NG];
      for (int g = 0; g < NG; ++g) {
        y[g] = acts(a + 2 * g * AB, 2 * g + 1 < NB);
        off[g] = fp4_offset(y[g]);
      }
      const __m128 da = ascales<NB>(a);
      for (int r = 0; r < R; ++r) {
        const __m128 d = _mm_mul_ps(dw[r], da);
        for (int g = 0; g < NG; ++g) {
          const __m512i isum = _mm512_dpbusd_epi32(off[g], u[r][g], y[g]);
          acc[r][c][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), splat_pair(d, g), acc[r][c][g]);
        }
      }
    }
  }
  template <int R, int C>
  static void run(int64_t n, const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t ws, const uint8_t* pf,
                  __m512 (&acc)[R][C][NACC]) {
    const int64_t nb = n / kBlock;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
      if (pf) tiles::prefetch_rows<R>(pf + static_cast<size_t>(i) * WB, ws, 4 * WB);
      step<R, C, 4>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc);
    }
    if (i + 2 <= nb) {
      step<R, C, 2>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc);
      i += 2;
    }
    if (i < nb) step<R, C, 1>(wr, ar, static_cast<size_t>(i) * WB, static_cast<size_t>(i) * AB, acc);
  }
};

// ---------------------------------------------------------------------------------------------
// NVFP4 x Q8_0: one block (4 sub-blocks of 16) per vector, sub-block s in 128-bit lane s, against
// Q8_0 blocks 2i (lanes 0, 1) and 2i + 1 (lanes 2, 3); blocks alternate between 2 accumulators.

struct Nvfp4 {
  static constexpr size_t WB = sizeof(block_nvfp4), AB = 2 * sizeof(block_q8_0);
  static constexpr int64_t kBlock = QK_NVFP4;
  static constexpr int NACC = 2;

  static __m512i decode(const uint8_t* b) {
    // sub-block s: bytes 8s..8s+7, low nibbles then high nibbles
    const __m512i q = _mm512_castsi256_si512(ld256(b + offsetof(block_nvfp4, qs)));
    const __m512i d = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 0, 1, 1, 2, 2, 3, 3), q);
    const __m512i idx = _mm512_and_si512(_mm512_srlv_epi64(d, _mm512_setr_epi64(0, 4, 0, 4, 0, 4, 0, 4)),
                                         _mm512_set1_epi8(0x0F));
    return _mm512_shuffle_epi8(fp4_book_u(), idx);
  }
  static __m128 wscales(const uint8_t* b) {
    return _mm_setr_ps(kUe4m3Half.v[b[0]], kUe4m3Half.v[b[1]], kUe4m3Half.v[b[2]], kUe4m3Half.v[b[3]]);
  }
  static __m128 ascales(const uint8_t* a) {
    const float d0 = ld_f16(a + offsetof(block_q8_0, d)), d1 = ld_f16(a + sizeof(block_q8_0) + offsetof(block_q8_0, d));
    return _mm_setr_ps(d0, d0, d1, d1);
  }

  template <int R, int C, int NB>
  static void step(const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t wo, size_t ao, __m512 (&acc)[R][C][NACC]) {
    const __m512i lanes = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512i u[R][NB];
    __m128 dw[R][NB];
    for (int r = 0; r < R; ++r) {
      for (int k = 0; k < NB; ++k) {
        u[r][k] = decode(wr.p[r] + wo + k * WB);
        dw[r][k] = wscales(wr.p[r] + wo + k * WB);
      }
    }
    for (int c = 0; c < C; ++c) {
      for (int k = 0; k < NB; ++k) {
        const uint8_t* a = ar.p[c] + ao + k * AB;
        const __m512i y = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(a + offsetof(block_q8_0, qs))),
                                             ld256(a + sizeof(block_q8_0) + offsetof(block_q8_0, qs)), 1);
        const __m512i off = fp4_offset(y);
        const __m128 da = ascales(a);
        for (int r = 0; r < R; ++r) {
          const __m512 d = _mm512_permutexvar_ps(lanes, _mm512_castps128_ps512(_mm_mul_ps(da, dw[r][k])));
          const __m512i isum = _mm512_dpbusd_epi32(off, u[r][k], y);
          acc[r][c][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), d, acc[r][c][k]);
        }
      }
    }
  }
  template <int R, int C>
  static void run(int64_t n, const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t ws, const uint8_t* pf,
                  __m512 (&acc)[R][C][NACC]) {
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
// TQ1_0 / TQ2_0 x Q8_K: the 256 digits of a block as 4 vectors in element order (vector j:
// elements 64j..64j+63, against y[64j..64j+63]); isum = (digits . y) - (sum of y by bsums), in two
// vpdpbusd chains; blocks alternate between 2 accumulators.

constexpr size_t kQ8K_d = offsetof(block_q8_K, d);
constexpr size_t kQ8K_qs = offsetof(block_q8_K, qs);
constexpr size_t kQ8K_bsums = offsetof(block_q8_K, bsums);

// Ternary digit of every byte of x: digit k of byte q is ((q * 3^k mod 256) * 3) >> 8, where
// each 16-bit lane's multiplier m = 3^k is taken from m16. The byte is moved to the high half of
// its 16-bit lane, so that vpmullw gives (q * m mod 256) << 8 and vpmulhuw by 3 the digit.
inline __m512i trits(__m512i x, __m512i m16) {
  const __m512i three = _mm512_set1_epi16(3);
  const __m512i even = _mm512_mulhi_epu16(_mm512_mullo_epi16(_mm512_slli_epi16(x, 8), m16), three);
  const __m512i odd = _mm512_mulhi_epu16(_mm512_mullo_epi16(_mm512_and_si512(x, _mm512_set1_epi16(static_cast<short>(0xFF00))), m16), three);
  return _mm512_or_si512(even, _mm512_slli_epi16(odd, 8));
}

struct Tq1 {
  static constexpr size_t WB = sizeof(block_tq1_0);
  static constexpr size_t kD = offsetof(block_tq1_0, d);
  // Element order: qs[0..31] digit k -> 32k + m; qs[32..47] digit k -> 160 + 16k + m; qh[j]
  // digit k (k < 4) -> 240 + 4k + j.
  static void decode(const uint8_t* b, __m512i (&u)[4]) {
    static_assert(offsetof(block_tq1_0, qh) == 48 && kD == 52);
    const __m512i z = _mm512_maskz_loadu_epi8((1ull << 52) - 1, b);  // qs, qh (not past the block)
    const __m512i a = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 0, 1, 0));  // [qs0..31 | qs0..31]
    const __m512i bb = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(2, 2, 1, 0));  // [qs0..31 | qs32..47 x2]
    __m512i c = _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(3, 2, 2, 2));        // [qs32..47 x3 | qh ..]
    c = _mm512_mask_shuffle_epi32(c, 0xF000, c, _MM_PERM_AAAA);              // lane 3: qh0..3 x4
    auto m16 = [](int a0, int a1, int a2, int a3) {  // the multiplier of each 128-bit lane
      return _mm512_setr_epi64(a0 * 0x0001000100010001ll, a0 * 0x0001000100010001ll, a1 * 0x0001000100010001ll,
                               a1 * 0x0001000100010001ll, a2 * 0x0001000100010001ll, a2 * 0x0001000100010001ll,
                               a3 * 0x0001000100010001ll, a3 * 0x0001000100010001ll);
    };
    u[0] = trits(a, m16(1, 1, 3, 3));      // elements 0..63: digits 0, 1 of qs0..31
    u[1] = trits(a, m16(9, 9, 27, 27));    // 64..127: digits 2, 3
    u[2] = trits(bb, m16(81, 81, 1, 3));   // 128..159: digit 4; 160..191: digits 0, 1 of qs32..47
    // 192..239: digits 2, 3, 4 of qs32..47; 240..255: qh byte j digit k at 4k + j
    const __m512i mq = _mm512_setr_epi64(9 * 0x0001000100010001ll, 9 * 0x0001000100010001ll, 27 * 0x0001000100010001ll,
                                         27 * 0x0001000100010001ll, 81 * 0x0001000100010001ll, 81 * 0x0001000100010001ll,
                                         0x0003000300010001ll, 0x001B001B00090009ll);
    u[3] = trits(c, mq);
  }
};

struct Tq2 {
  static constexpr size_t WB = sizeof(block_tq2_0);
  static constexpr size_t kD = offsetof(block_tq2_0, d);
  // Element 128h + 32k + m at bits 2k of qs[32h + m].
  static void decode(const uint8_t* b, __m512i (&u)[4]) {
    const __m512i q = _mm512_loadu_si512(b);  // the 64 bytes of qs
    const __m512i m3 = _mm512_set1_epi8(3);
    // digit k of every byte: bytes 0..31 elements 32k + m, bytes 32..63 elements 128 + 32k + m
    const __m512i d0 = _mm512_and_si512(q, m3);
    const __m512i d1 = _mm512_and_si512(_mm512_srli_epi16(q, 2), m3);
    const __m512i d2 = _mm512_and_si512(_mm512_srli_epi16(q, 4), m3);
    const __m512i d3 = _mm512_and_si512(_mm512_srli_epi16(q, 6), m3);
    u[0] = _mm512_shuffle_i64x2(d0, d1, _MM_SHUFFLE(1, 0, 1, 0));
    u[1] = _mm512_shuffle_i64x2(d2, d3, _MM_SHUFFLE(1, 0, 1, 0));
    u[2] = _mm512_shuffle_i64x2(d0, d1, _MM_SHUFFLE(3, 2, 3, 2));
    u[3] = _mm512_shuffle_i64x2(d2, d3, _MM_SHUFFLE(3, 2, 3, 2));
  }
};

template <class T>
struct Ternary {
  static constexpr size_t WB = T::WB, AB = sizeof(block_q8_K);
  static constexpr int64_t kBlock = QK_K;
  static constexpr int NACC = 2;

  // One block of every row (decoded once, its 4 vectors used for every activation row) into
  // accumulator k. (Decoding all R rows first would hold 4 R vectors: spills at R = 4.)
  template <int R, int C>
  static void step(const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t wo, size_t ao, int k, __m512 (&acc)[R][C][NACC]) {
    for (int r = 0; r < R; ++r) {
      __m512i u[4];
      T::decode(wr.p[r] + wo, u);
      const float dw = ld_f16(wr.p[r] + wo + T::kD);
      for (int c = 0; c < C; ++c) {
        const uint8_t* a = ar.p[c] + ao;
        const __m512i off = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_cvtepi16_epi32(ld256(a + kQ8K_bsums)));
        const __m512i s0 = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(off, u[0], _mm512_loadu_si512(a + kQ8K_qs)), u[1],
                                               _mm512_loadu_si512(a + kQ8K_qs + 64));
        const __m512i s1 = _mm512_dpbusd_epi32(
            _mm512_dpbusd_epi32(_mm512_setzero_si512(), u[2], _mm512_loadu_si512(a + kQ8K_qs + 128)), u[3],
            _mm512_loadu_si512(a + kQ8K_qs + 192));
        const __m512 d = _mm512_set1_ps(dw * tiles::ld_f32(a + kQ8K_d));
        acc[r][c][k] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), d, acc[r][c][k]);
      }
    }
  }
  template <int R, int C>
  static void run(int64_t n, const RowPtrs<R>& wr, const RowPtrs<C>& ar, size_t ws, const uint8_t* pf,
                  __m512 (&acc)[R][C][NACC]) {
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
    __m512 acc[R][C][K::NACC];
    for (int r = 0; r < R; ++r) {
      for (int c = 0; c < C; ++c) {
        for (int k = 0; k < K::NACC; ++k) acc[r][c][k] = _mm512_setzero_ps();
      }
    }
    const RowPtrs<R> wr(w, ws);
    const RowPtrs<C> ar(a, as);
    K::template run<R, C>(n, wr, ar, ws, pf, acc);
    for (int c = 0; c < C; ++c) {
      for (int r = 0; r < R; ++r) y[c * ys + r] = hsum(_mm512_add_ps(acc[r][c][0], acc[r][c][1]));
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

// Tiles of up to 2 rows x 4 activation rows; matrix-vector products in tiles of 4 rows that read
// 4 long streams, each prefetched ahead (gemm_tiles' matrix-vector path; the next tile's rows
// alone arrive too late from DRAM).
template <class K>
void gemm(int64_t n, const void* w, size_t ws, int64_t nr, const void* a, size_t as, int64_t nc, float* y, int64_t ys) {
  if (nc == 1) {
    tiles::gemm_tiles<Kernel<K>, 4, 1>(n, w, ws, nr, a, as, nc, y, ys);
  } else {
    tiles::gemm_tiles<Kernel<K>, 2, 4>(n, w, ws, nr, a, as, nc, y, ys);
  }
}

inline int tid(Type t) { return static_cast<int>(t); }

}  // namespace lowbit_avx512
}  // namespace

void fill_kernel_table_avx512_lowbit(KernelTable& t) {
  namespace k = lowbit_avx512;
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
