// AVX-512 kernels (AVX-512 F/BW/VL/DQ + VNNI; AVX512-BF16 only behind cpu_has_avx512_bf16(), GFNI
// only behind cpu_has_gfni()).
// Compiled with the flags CMake gives *_avx512.cpp; reached only through the kernel table after
// the dispatcher has checked the CPU. See kernels_internal.h for the contract of fill functions.
//
// Integer types: the tiled VNNI kernels of kernels_x86_tiles.h on one zmm per vector, with a
// vec_dot and a gemm (tiles of up to 4 weight rows x 4 activation rows) per type.
// Float types: F32/F16 (converted by vcvtph2ps) and BF16 (vdpbf16ps where the CPU has
// AVX512-BF16, else widened by a shift) with fmadd over 16 lanes; tails by masked loads.
// The activation quantizers are the AVX2 ones (inherited).

// GCC 12's AVX-512 intrinsics fill "undefined" pass-through operands with a self-initialised
// variable, which -Wuninitialized reports once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "les/quant/blocks.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_x86_tiles.h"

namespace les {
namespace {

// The VNNI vector policy of kernels_x86_tiles.h on zmm registers.
struct P512 {
  using VI = __m512i;
  using VF = __m512;
  static constexpr int R = 4;
  static constexpr int C = 4;

  static VI izero() { return _mm512_setzero_si512(); }
  static VI set1_8(char v) { return _mm512_set1_epi8(v); }
  static VI load64(const uint8_t* p) { return _mm512_loadu_si512(p); }
  static VI bcast32(const uint8_t* p) { return _mm512_broadcast_i64x4(tiles::ld256(p)); }
  static VI load32x2(const uint8_t* p0, const uint8_t* p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(tiles::ld256(p0)), tiles::ld256(p1), 1);
  }
  static VI load32_lo(const uint8_t* p) { return _mm512_zextsi256_si512(tiles::ld256(p)); }
  static VI load16x2_dup(const uint8_t* p0, const uint8_t* p1) {
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_broadcastsi128_si256(tiles::ld128(p0))),
                              _mm256_broadcastsi128_si256(tiles::ld128(p1)), 1);
  }
  static VI load16_dup_lo(const uint8_t* p) { return _mm512_zextsi256_si512(_mm256_broadcastsi128_si256(tiles::ld128(p))); }
  static VI and_(VI x, VI y) { return _mm512_and_si512(x, y); }
  static VI or_(VI x, VI y) { return _mm512_or_si512(x, y); }
  static VI xor_(VI x, VI y) { return _mm512_xor_si512(x, y); }
  static VI add32(VI x, VI y) { return _mm512_add_epi32(x, y); }
  static VI sub32(VI x, VI y) { return _mm512_sub_epi32(x, y); }
  template <int S>
  static VI srl32(VI v) {
    return _mm512_srli_epi32(v, S);
  }
  template <int S>
  static VI sll32(VI v) {
    return _mm512_slli_epi32(v, S);
  }
  template <int S0, int S1>
  static VI srl_halves(VI v) {
    if constexpr (S0 == S1) {
      return _mm512_srli_epi32(v, S0);
    } else {
      return _mm512_srlv_epi32(v, _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(S0), _mm512_set1_epi32(S1)));
    }
  }
  template <int S>
  static VI srl_odd_lanes(VI v) {
    return _mm512_srlv_epi32(v, _mm512_mask_blend_epi32(0xf0f0, _mm512_setzero_si512(), _mm512_set1_epi32(S)));
  }
  static VI shuffle8(VI table, VI idx) { return _mm512_shuffle_epi8(table, idx); }
  static VI bcast128(__m128i x) { return _mm512_broadcast_i32x4(x); }
  static VI dpbusd(VI acc, VI u, VI s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static VI dpwssd(VI acc, VI x, VI y) { return _mm512_dpwssd_epi32(acc, x, y); }
  static VI abs8(VI y) { return _mm512_abs_epi8(y); }
  static VI sign8(VI v, VI y) { return _mm512_mask_sub_epi8(v, _mm512_movepi8_mask(y), _mm512_setzero_si512(), v); }
  static VI zext(__m256i x) { return _mm512_zextsi256_si512(x); }
  // [v's upper 8 lanes | hi] in one vshufi64x2, then the lower 8 lanes plus v's lower 8.
  static VI fold_set_high(VI v, __m256i hi) {
    const VI t = _mm512_shuffle_i64x2(v, _mm512_castsi256_si512(hi), _MM_SHUFFLE(1, 0, 3, 2));
    return _mm512_mask_add_epi32(t, 0x00ff, t, v);
  }
  // Bytes j whose bit j is set get v | byte (callers guarantee those bits of v are clear).
  static VI or_bits(VI v, uint64_t bits, char byte) {
    return _mm512_mask_add_epi8(v, static_cast<__mmask64>(bits), v, _mm512_set1_epi8(byte));
  }
  static VI maddubs(VI u, VI y) { return _mm512_maddubs_epi16(u, y); }

  // The dwords A B C D in every 128-bit lane, as one 64-byte constant: a plain load where the
  // loop reloads it (a broadcast from memory takes a shuffle pipe, one per cycle on Zen 5).
  template <int A, int B, int C, int D>
  static __m512i rep4() {
    alignas(64) static constexpr int32_t v[16] = {A, B, C, D, A, B, C, D, A, B, C, D, A, B, C, D};
    return _mm512_load_si512(v);
  }

  // Scale unpacking of four rows at once (tile_k's prep4): each row's 16 bytes in one 128-bit
  // lane, the per-row steps of tiles::scales_mins_k4 / tiles::scales_q3k on all four lanes, then
  // the widening to int16 two rows at a time. The values equal the one-row functions'.
  static __m512i lanes4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3) {
    __m512i v = _mm512_castsi128_si512(tiles::ld128(p0));
    v = _mm512_inserti32x4(v, tiles::ld128(p1), 1);
    v = _mm512_inserti32x4(v, tiles::ld128(p2), 2);
    return _mm512_inserti32x4(v, tiles::ld128(p3), 3);
  }
  template <bool Signed>
  static void widen4(__m512i b, __m256i (&out)[4]) {
    const __m256i b01 = _mm512_castsi512_si256(b), b23 = _mm512_extracti64x4_epi64(b, 1);
    const __m512i w01 = Signed ? _mm512_cvtepi8_epi16(b01) : _mm512_cvtepu8_epi16(b01);
    const __m512i w23 = Signed ? _mm512_cvtepi8_epi16(b23) : _mm512_cvtepu8_epi16(b23);
    out[0] = _mm512_castsi512_si256(w01);
    out[1] = _mm512_extracti64x4_epi64(w01, 1);
    out[2] = _mm512_castsi512_si256(w23);
    out[3] = _mm512_extracti64x4_epi64(w23, 1);
  }
  static void scales_mins_k4_x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3,
                                __m256i (&out)[4]) {
    const __m512i v = lanes4(p0, p1, p2, p3);
    const __m512i x = _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(2, 1, 2, 0)));
    const __m512i y = _mm512_shuffle_epi32(v, static_cast<_MM_PERM_ENUM>(_MM_SHUFFLE(1, 1, 0, 0)));
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(x, rep4<0, 0, 0, 4>()),
                                        rep4<0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f>());
    const __m512i hi = _mm512_and_si512(_mm512_srli_epi32(y, 2), rep4<0, 0x30303030, 0, 0x30303030>());
    widen4<false>(_mm512_or_si512(lo, hi), out);
  }
  static void scales_q3k_x4(const uint8_t* p0, const uint8_t* p1, const uint8_t* p2, const uint8_t* p3,
                            __m256i (&out)[4]) {
    const __m512i v = lanes4(p0 - 4, p1 - 4, p2 - 4, p3 - 4);  // scale byte k at lane byte 4 + k
    const __m512i x = _mm512_shuffle_epi8(v, rep4<0x07060504, 0x0b0a0908, 0x07060504, 0x0b0a0908>());
    const __m512i y = _mm512_shuffle_epi8(v, rep4<0x0f0e0d0c, 0x0f0e0d0c, 0x0f0e0d0c, 0x0f0e0d0c>());
    const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(x, rep4<0, 0, 4, 4>()), _mm512_set1_epi8(0x0f));
    const __m512i hi = _mm512_and_si512(_mm512_slli_epi32(_mm512_srlv_epi32(y, rep4<0, 2, 4, 6>()), 4),
                                        _mm512_set1_epi8(0x30));
    widen4<true>(_mm512_sub_epi8(_mm512_or_si512(lo, hi), _mm512_set1_epi8(32)), out);
  }
  // [m0 m0 m1 m1 .. m7 m7] from [.. | m0..m7] (tiles::dup_pairs_high) in one vpermw.
  static __m256i dup_pairs_high(__m256i s16) {
    const __m256i idx = _mm256_setr_epi16(8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15);
    return _mm256_permutexvar_epi16(idx, s16);
  }
  // s[2G] in both int16 halves of int32 lanes 0-7, s[2G+1] in lanes 8-15.
  template <int G>
  static VI scales_32(__m256i s16) {
    const VI idx = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(0x10001 * (2 * G)), _mm512_set1_epi32(0x10001 * (2 * G + 1)));
    return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(s16));
  }
  // s[4G+q] in both int16 halves of the int32 lanes of 128-bit lane q.
  template <int G>
  static VI scales_16(__m256i s16) {
    constexpr int k = 0x10001 * 4 * G, o = 0x10001;
    const VI idx = _mm512_setr_epi32(k, k, k, k, k + o, k + o, k + o, k + o, k + 2 * o, k + 2 * o, k + 2 * o, k + 2 * o,
                                     k + 3 * o, k + 3 * o, k + 3 * o, k + 3 * o);
    return _mm512_permutexvar_epi16(idx, _mm512_castsi256_si512(s16));
  }

  // Group scales in one permute per block: 128-bit lane q, dword j holds in both int16 halves
  // s[4j + q] (spread16: scales_16<j>) or s[2j + (q >= 2)] (spread32: scales_32<j>); pick<G>
  // takes dword G of every lane by vpshufd.
  static VI spread16(__m256i s16) {
    alignas(64) static constexpr int16_t idx[32] = {0, 0, 4, 4, 8, 8, 12, 12, 1, 1, 5, 5, 9, 9, 13, 13,
                                                    2, 2, 6, 6, 10, 10, 14, 14, 3, 3, 7, 7, 11, 11, 15, 15};
    return _mm512_permutexvar_epi16(_mm512_load_si512(idx), _mm512_castsi256_si512(s16));
  }
  static VI spread32(__m256i s16) {
    alignas(64) static constexpr int16_t idx[32] = {0, 0, 2, 2, 4, 4, 6, 6, 0, 0, 2, 2, 4, 4, 6, 6,
                                                    1, 1, 3, 3, 5, 5, 7, 7, 1, 1, 3, 3, 5, 5, 7, 7};
    return _mm512_permutexvar_epi16(_mm512_load_si512(idx), _mm512_castsi256_si512(s16));
  }
  template <int G>
  static VI pick(VI spread) {
    return _mm512_shuffle_epi32(spread, static_cast<_MM_PERM_ENUM>(0x55 * G));
  }
  // Bit S of every byte of h to bit B (clear in v) of v's bytes: a dword shift by an immediate
  // (bit B of a byte then holds bit S of the same byte, for 0 <= S, B < 8; the bits that cross
  // bytes land elsewhere and are masked off) and one vpternlogd, v | (shifted & (1 << B)); no
  // shift where S == B. A shift, not a rotate: on Zen 5 rotates share the two multiply pipes with
  // vpmaddubsw / vpdpwssd, shifts do not (docs/kernels.md).
  template <int S, int B>
  static VI or_bit_rot(VI v, VI h) {
    VI m = h;
    if constexpr (B > S) {
      m = _mm512_slli_epi32(h, B - S);
    } else if constexpr (B < S) {
      m = _mm512_srli_epi32(h, S - B);
    }
    return _mm512_ternarylogic_epi32(v, m, _mm512_set1_epi8(static_cast<char>(1 << B)), 0xF8);
  }

  // The fp16 words at p + k S (k < 4), then with Pair those at p + 2 + k S, packed into 4 / 8
  // words; one or two masked loads name exactly those words (nothing else is read), vpermw packs.
  template <size_t S, bool Pair>
  static __m128i f16_words(const uint8_t* p) {
    static_assert(S % 2 == 0 && 3 * (S / 2) + 1 < 64);
    constexpr int w = static_cast<int>(S / 2);
    constexpr auto word = [](int j) { return (j % 4) * w + (Pair ? j / 4 : 0); };
    constexpr uint64_t mask = [word] {
      uint64_t m = 0;
      for (int j = 0; j < 8; ++j) m |= uint64_t{1} << word(j);
      return m;
    }();
    const __m512i idx = _mm512_castsi128_si512(_mm_setr_epi16(static_cast<short>(word(0)), static_cast<short>(word(1)),
        static_cast<short>(word(2)), static_cast<short>(word(3)), static_cast<short>(word(4)), static_cast<short>(word(5)),
        static_cast<short>(word(6)), static_cast<short>(word(7))));
    const __m512i lo = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(mask), p);
    if constexpr ((mask >> 32) == 0) {
      return _mm512_castsi512_si128(_mm512_permutexvar_epi16(idx, lo));
    } else {
      const __m512i hi = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(mask >> 32), p + 64);
      return _mm512_castsi512_si128(_mm512_permutex2var_epi16(lo, idx, hi));
    }
  }

  static VF fzero() { return _mm512_setzero_ps(); }
  static VF fset1(float x) { return _mm512_set1_ps(x); }
  static VF fset1_neg_high(float x) {
    const __m512i v = _mm512_castps_si512(_mm512_set1_ps(x));
    return _mm512_castsi512_ps(_mm512_mask_xor_epi32(v, 0xff00, v, _mm512_set1_epi32(INT32_MIN)));
  }
  static VF fset_f16pair(uint32_t bits) {
    const __m512 v = _mm512_cvtph_ps(_mm256_set1_epi32(static_cast<int>(bits)));  // a b a b ..
    return _mm512_permutexvar_ps(_mm512_mask_blend_epi32(0xff00, _mm512_setzero_si512(), _mm512_set1_epi32(1)), v);
  }
  static VF fsplat_pair(__m128 v4, int g) {
    const VI idx = _mm512_mask_blend_epi32(0xff00, _mm512_set1_epi32(2 * g), _mm512_set1_epi32(2 * g + 1));
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v4));
  }
  static VF cvt(VI v) { return _mm512_cvtepi32_ps(v); }
  static VF fmadd(VF x, VF y, VF z) { return _mm512_fmadd_ps(x, y, z); }
  static VF fmul(VF x, VF y) { return _mm512_mul_ps(x, y); }
  // Sum of the 16 lanes: halves, then quarters, then lanes (0+2, 1+3), then the two.
  static float hsum(VF v) {
    const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  // hsum of v0..v3 into out[0..3], by the same additions in the same pairs (each 128-bit lane k
  // of the intermediate vectors carries v_k's partial sums).
  static void hsum4(VF v0, VF v1, VF v2, VF v3, float* out) {
    const __m512 s01 = _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(v0, v1, _MM_SHUFFLE(3, 2, 3, 2)));  // [s8(v0) | s8(v1)]
    const __m512 s23 = _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(v2, v3, _MM_SHUFFLE(3, 2, 3, 2)));
    __m512 s4 = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                              _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));  // lane k: s4(v_k)
    s4 = _mm512_add_ps(s4, _mm512_permute_ps(s4, _MM_SHUFFLE(3, 2, 3, 2)));
    s4 = _mm512_add_ps(s4, _mm512_movehdup_ps(s4));
    const __m512 r = _mm512_permutexvar_ps(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), s4);
    _mm_storeu_ps(out, _mm512_castps512_ps128(r));
  }
};

// P512 where the CPU also has GFNI (checked at run time: cpu_has_gfni): a bit field of every
// byte in one GF2P8AFFINEQB instead of a shift and a mask (tiles::field_halves). The values are
// the same; on Zen 5 the K-quant matrix-vector products run 7-20% faster.
struct P512G : P512 {
  // GF2P8AFFINEQB matrix (one qword) taking bits S.. of each byte to bits 0.. (width of M):
  // row byte 7 - i selects the input bit of output bit i.
  static constexpr uint64_t gf_field(int S, int M) {
    uint64_t a = 0;
    for (int i = 0; (M >> i) & 1; ++i) a |= (uint64_t{1} << (S + i)) << (8 * (7 - i));
    return a;
  }
  template <int S0, int S1, int M>
  static VI gf_field_halves(VI v) {
    const VI a = _mm512_mask_blend_epi64(0xf0, _mm512_set1_epi64(static_cast<int64_t>(gf_field(S0, M))),
                                         _mm512_set1_epi64(static_cast<int64_t>(gf_field(S1, M))));
    return _mm512_gf2p8affine_epi64_epi8(v, a, 0);
  }
};

// ---------------------------------------------------------------------------------------------
// Float types. Rows are addressed as bytes (they need not be aligned to their element size);
// n is arbitrary. Two accumulators per product (even and odd 16-element chunks) are summed at
// the end; a tail shorter than 16 goes into the even one through a masked load.

enum class FloatKind { f32, f16, bf16_shift, bf16_dot };

template <FloatKind K>
struct FloatRow {
  static constexpr size_t kElemBytes = K == FloatKind::f32 ? 4 : 2;
  // 16 elements at p (only the first `count` if count < 16, the rest zero) as floats.
  static __m512 load(const uint8_t* p, int count = 16) {
    const __mmask16 m = count >= 16 ? __mmask16(0xffff) : static_cast<__mmask16>((1u << count) - 1);
    if constexpr (K == FloatKind::f32) {
      if (count >= 16) {  // two 32-byte loads: rows are often 32-byte aligned, and a 64-byte load
                          // across two cache lines costs more than two that each stay in one
        const float* f = reinterpret_cast<const float*>(p);
        return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_loadu_ps(f)), _mm256_loadu_ps(f + 8), 1);
      }
      return _mm512_maskz_loadu_ps(m, p);
    } else if constexpr (K == FloatKind::f16) {
      return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
    }
  }
};

template <FloatKind K, int R, int C>
void tile_float(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                const uint8_t* pf) {
  using FR = FloatRow<K>;
  constexpr size_t EB = FR::kElemBytes;
  __m512 acc0[R][C], acc1[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = _mm512_setzero_ps();
  }
  const tiles::RowPtrs<R> wr(w, ws);
  const tiles::RowPtrs<C> ar(a, as);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    if (pf) tiles::prefetch_rows<R>(pf + EB * i, ws, 32 * EB);
    __m512 x0[R], x1[R];
    for (int r = 0; r < R; ++r) {
      x0[r] = FR::load(wr.p[r] + EB * i);
      x1[r] = FR::load(wr.p[r] + EB * (i + 16));
    }
    for (int c = 0; c < C; ++c) {
      const __m512 y0 = FR::load(ar.p[c] + EB * i);
      const __m512 y1 = FR::load(ar.p[c] + EB * (i + 16));
      for (int r = 0; r < R; ++r) {
        acc0[r][c] = _mm512_fmadd_ps(x0[r], y0, acc0[r][c]);
        acc1[r][c] = _mm512_fmadd_ps(x1[r], y1, acc1[r][c]);
      }
    }
  }
  for (; i < n; i += 16) {
    const int cnt = n - i < 16 ? static_cast<int>(n - i) : 16;
    for (int c = 0; c < C; ++c) {
      const __m512 yv = FR::load(ar.p[c] + EB * i, cnt);
      for (int r = 0; r < R; ++r) acc0[r][c] = _mm512_fmadd_ps(FR::load(wr.p[r] + EB * i, cnt), yv, acc0[r][c]);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc0[r][c] = _mm512_add_ps(acc0[r][c], acc1[r][c]);
  }
  tiles::store_sums<P512, R, C>(acc0, y, ys);
}

// BF16 by vdpbf16ps: each lane accumulates the products of a pair of adjacent elements. Chunks
// of 32 elements alternate between two accumulators; a tail (any length) is one masked chunk.
template <int R, int C>
void tile_bf16_dot(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                   const uint8_t* pf) {
  __m512 acc0[R][C], acc1[R][C];
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc0[r][c] = acc1[r][c] = _mm512_setzero_ps();
  }
  const tiles::RowPtrs<R> wr(w, ws);
  const tiles::RowPtrs<C> ar(a, as);
  // 32 bf16 at p (the first `m` of them): full chunks as two 32-byte loads (see FloatRow::load)
  auto ld = [](const uint8_t* p, __mmask32 m) {
    if (m == ~__mmask32(0)) {
      return (__m512bh)_mm512_inserti64x4(_mm512_castsi256_si512(tiles::ld256(p)), tiles::ld256(p + 32), 1);
    }
    return (__m512bh)_mm512_maskz_loadu_epi16(m, p);
  };
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    if (pf) tiles::prefetch_rows<R>(pf + 2 * i, ws, 128);
    __m512bh x0[R], x1[R];
    for (int r = 0; r < R; ++r) {
      x0[r] = ld(wr.p[r] + 2 * i, ~__mmask32(0));
      x1[r] = ld(wr.p[r] + 2 * (i + 32), ~__mmask32(0));
    }
    for (int c = 0; c < C; ++c) {
      const __m512bh y0 = ld(ar.p[c] + 2 * i, ~__mmask32(0));
      const __m512bh y1 = ld(ar.p[c] + 2 * (i + 32), ~__mmask32(0));
      for (int r = 0; r < R; ++r) {
        acc0[r][c] = _mm512_dpbf16_ps(acc0[r][c], x0[r], y0);
        acc1[r][c] = _mm512_dpbf16_ps(acc1[r][c], x1[r], y1);
      }
    }
  }
  for (; i < n; i += 32) {
    const int cnt = n - i < 32 ? static_cast<int>(n - i) : 32;
    const __mmask32 m = cnt == 32 ? ~__mmask32(0) : static_cast<__mmask32>((1u << cnt) - 1);
    for (int c = 0; c < C; ++c) {
      const __m512bh yv = ld(ar.p[c] + 2 * i, m);
      for (int r = 0; r < R; ++r) acc0[r][c] = _mm512_dpbf16_ps(acc0[r][c], ld(wr.p[r] + 2 * i, m), yv);
    }
  }
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) acc0[r][c] = _mm512_add_ps(acc0[r][c], acc1[r][c]);
  }
  tiles::store_sums<P512, R, C>(acc0, y, ys);
}

template <FloatKind K>
struct FloatKernel {
  template <int R, int C>
  static void tile(int64_t n, const uint8_t* w, size_t ws, const uint8_t* a, size_t as, float* y, int64_t ys,
                   const uint8_t* pf) {
    if constexpr (K == FloatKind::bf16_dot) {
      tile_bf16_dot<R, C>(n, w, ws, a, as, y, ys, pf);
    } else {
      tile_float<K, R, C>(n, w, ws, a, as, y, ys, pf);
    }
  }
  static void gemm(int64_t n, const void* w, size_t ws, int64_t nr, const void* a, size_t as, int64_t nc, float* y,
                   int64_t ys) {
    tiles::gemm_tiles<FloatKernel, 4, 3, 1>(n, w, ws, nr, a, as, nc, y, ys);
  }
  static float vec_dot(int64_t n, const void* w, const void* a) {
    float y;
    tile<1, 1>(n, static_cast<const uint8_t*>(w), 0, static_cast<const uint8_t*>(a), 0, &y, 0, nullptr);
    return y;
  }
};

template <class W, class P = P512>
void set_int(KernelTable& t, Type ty) {
  t.vec_dot[static_cast<size_t>(ty)] = tiles::vec_dot<P, W>;
  t.gemm[static_cast<size_t>(ty)] = tiles::gemm<P, W>;
}

template <FloatKind K>
void set_float(KernelTable& t, Type ty) {
  t.vec_dot[static_cast<size_t>(ty)] = FloatKernel<K>::vec_dot;
  t.gemm[static_cast<size_t>(ty)] = FloatKernel<K>::gemm;
}

// The K-quants whose groups are bit fields: with GFNI where asked.
template <class P>
void set_k_fields(KernelTable& t) {
  set_int<tiles::KQ45<false>, P>(t, Type::Q4_K);
  set_int<tiles::KQ45<true>, P>(t, Type::Q5_K);
  set_int<tiles::KQ3, P>(t, Type::Q3_K);
  set_int<tiles::KQ2, P>(t, Type::Q2_K);
}

void fill_avx512(KernelTable& t, bool gfni) {
  if (gfni) {
    set_k_fields<P512G>(t);
  } else {
    set_k_fields<P512>(t);
  }
  set_int<tiles::KQ6>(t, Type::Q6_K);
  set_int<tiles::KIQ4XS>(t, Type::IQ4_XS);
  set_int<tiles::KQ4_0>(t, Type::Q4_0);
  set_int<tiles::KQ4_1>(t, Type::Q4_1);
  set_int<tiles::KQ5<false>>(t, Type::Q5_0);
  set_int<tiles::KQ5<true>>(t, Type::Q5_1);
  set_int<tiles::KQ8_0>(t, Type::Q8_0);
  set_int<tiles::KIQ4NL>(t, Type::IQ4_NL);
  set_float<FloatKind::f32>(t, Type::F32);
  set_float<FloatKind::f16>(t, Type::F16);
  if (cpu_has_avx512_bf16()) {
    set_float<FloatKind::bf16_dot>(t, Type::BF16);
  } else {
    set_float<FloatKind::bf16_shift>(t, Type::BF16);
  }
}


}  // namespace

void fill_kernel_table_avx512(KernelTable& t) { fill_avx512(t, cpu_has_gfni()); }
void fill_kernel_table_avx512_without_gfni(KernelTable& t) { fill_avx512(t, false); }

}  // namespace les
