// AVX2 (+FMA, F16C) dot products and activation quantizers. Compiled with
// -mavx2 -mfma -mf16c -mbmi2 (CMake keys on the _avx2 suffix); reached only through the kernel
// table after the dispatcher has checked the CPU.
//
// Dot products: integer partial sums are exact (the same integers the scalar reference forms);
// only the order of the float accumulation differs from it.
// - Weights go into the unsigned operand of vpmaddubsw (K-quant and Q4/Q5 values are stored
//   unsigned; their offsets, -32 for Q6_K, -4 for Q3_K, -8/-16 for Q4_0/Q5_0, are subtracted
//   through the activation block sums), so any int8 activation, -128 included, is exact.
// - Q8_0 x Q8_0 puts |weight| in the unsigned operand, exact for all inputs except activations of
//   -128 (which our quantizer never produces); groups holding one take an exact 16-bit path.
// - IQ4_NL/IQ4_XS (signed codebook values in [-127, 113]) put |activation| in the unsigned operand
//   (|-128| = 128 fits) and the activation's sign on the value, which never wraps: exact for all
//   inputs.
// Quantizers: bit-identical to the scalar activation quantizers (quant_ref.cpp), which follow
// what llama.cpp runs on x86. A product that the scalar code rounds before adding to it must not
// be fused into an FMA; `opaque` below keeps GCC from contracting such pairs.

#include <cpuid.h>
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_q32_x86.h"
#include "les/util/fp16.h"

namespace les {
namespace {

// The integer dot of the 32-element block types without VNNI (kernels_q32_x86.h): vpmaddubsw,
// whose pair sums the callers keep within int16, then vpmaddwd by 1.
struct DpMaddubs {
  static constexpr bool kVnni = false;
  static __m256i pairs(__m256i u, __m256i s) { return sum_pairs(_mm256_maddubs_epi16(u, s)); }
};
using Q4_0A = Q4_0Ops<DpMaddubs>;
using Q5_0A = Q5_0Ops<DpMaddubs>;
using Q8_0A = Q8_0Ops<DpMaddubs>;
using IQ4_NLA = IQ4_NLOps<DpMaddubs>;
using Q4_1A = QX_1Ops<DpMaddubs, false>;
using Q5_1A = QX_1Ops<DpMaddubs, true>;

// ---------------------------------------------------------------------------------------------
// Helpers (more in kernels_q32_x86.h)

// The fp16 pair (d, dmin) at p times the activation scale dy: lane 0 d*dy, lane 1 dmin*dy.
inline __m128 load_d_dmin(const uint8_t* p, float dy) {
  return _mm_mul_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(static_cast<int>(load_u32(p)))), _mm_set1_ps(dy));
}
inline __m256 lane0(__m128 v) { return _mm256_broadcastss_ps(v); }
inline __m256 lane1(__m128 v) { return _mm256_broadcastss_ps(_mm_movehdup_ps(v)); }

// Shift of every 16-bit lane by a signed compile-time amount (left if positive).
template <int S>
inline __m256i shift16(__m256i v) {
  if constexpr (S > 0) return _mm256_slli_epi16(v, S);
  else if constexpr (S < 0) return _mm256_srli_epi16(v, -S);
  else return v;
}

// Broadcast of 16-bit element k of each 128-bit lane to that whole lane.
template <int K>
inline __m256i bcast16(__m256i v) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>(((2 * K + 1) << 8) | (2 * K))));
}

// Sixteen int8 scales of a 256-block (one per 16 elements) -> int16 vector whose low lane holds
// the even-indexed scales and high lane the odd-indexed ones. A 32-element chunk c covers
// sub-blocks 2c (low lane of a vpmaddubsw result) and 2c+1 (high lane), so bcast16<c> of this
// gives the multiplier vector of chunk c.
inline __m256i scales_even_odd_i8(__m128i sc) {
  const __m128i deint = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  return _mm256_cvtepi8_epi16(_mm_shuffle_epi8(sc, deint));
}


// ---------------------------------------------------------------------------------------------
// K-quants x Q8_K

constexpr size_t kQ8K_d = offsetof(block_q8_K, d);
constexpr size_t kQ8K_qs = offsetof(block_q8_K, qs);
constexpr size_t kQ8K_bsums = offsetof(block_q8_K, bsums);
static_assert(offsetof(block_q4_K, dmin) == offsetof(block_q4_K, d) + 2 &&
              offsetof(block_q5_K, dmin) == offsetof(block_q5_K, d) + 2 &&
              offsetof(block_q2_K, dmin) == offsetof(block_q2_K, d) + 2, "d and dmin are read as one pair");

// Scales and mins of Q4_K/Q5_K (12 bytes at p, 6 bits each; 16 bytes are read, the block goes on)
// -> bytes [sc0..sc7 m0..m7] in both 128-bit lanes. As dwords: D0 = bytes 0..3, D1 = 4..7,
// D2 = 8..11: sc0-3 = D0 & 0x3f, sc4-7 = (D2 & 0x0f) | (D0 >> 6 & 3) << 4,
// m0-3 = D1 & 0x3f, m4-7 = (D2 >> 4 & 0x0f) | (D1 >> 6 & 3) << 4.
inline __m256i unpack_scales_mins_k4(const uint8_t* p) {
  const __m128i v = loadu128(p);
  const __m128i x = _mm_shuffle_epi32(v, _MM_SHUFFLE(2, 1, 2, 0));  // D0 D2 D1 D2
  const __m128i y = _mm_shuffle_epi32(v, _MM_SHUFFLE(1, 1, 0, 0));  // D0 D0 D1 D1
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(x, _mm_setr_epi32(0, 0, 0, 4)),
                                   _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi32(y, 2), _mm_setr_epi32(0, 0x30303030, 0, 0x30303030));
  return _mm256_broadcastsi128_si256(_mm_or_si128(lo, hi));
}

// Byte K of each lane zero-extended into every 16-bit element (pshufb index 0x80 gives 0).
template <int K>
inline __m256i bcast_u8_to16(__m256i v) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>(0x8000 | K)));
}

// sum over the 8 sub-blocks of 32 of mins[j] * (bsums[2j] + bsums[2j+1]), as 8 int32 lanes
// (lane j: mins[j]). sm as from unpack_scales_mins_k4.
inline __m256i mins_dot_bsums(__m256i sm, const uint8_t* bsums) {
  // int16 elements: lane 0 m0 m0 m1 m1 m2 m2 m3 m3, lane 1 m4 m4 .. m7 m7
  const __m256i idx = _mm256_setr_epi8(8, -128, 8, -128, 9, -128, 9, -128, 10, -128, 10, -128, 11, -128, 11, -128,
                                       12, -128, 12, -128, 13, -128, 13, -128, 14, -128, 14, -128, 15, -128, 15, -128);
  return _mm256_madd_epi16(loadu(bsums), _mm256_shuffle_epi8(sm, idx));
}

template <int J>
inline __m256i q4k_chunk(const uint8_t* qs, const int8_t* q8, __m256i sm) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i bits = loadu(qs + 32 * J);
  const __m256i lo = _mm256_and_si256(bits, m4);
  const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m4);
  const __m256i pl = _mm256_maddubs_epi16(lo, loadu(reinterpret_cast<const uint8_t*>(q8) + 64 * J));
  const __m256i ph = _mm256_maddubs_epi16(hi, loadu(reinterpret_cast<const uint8_t*>(q8) + 64 * J + 32));
  return _mm256_add_epi32(_mm256_madd_epi16(pl, bcast_u8_to16<2 * J>(sm)),
                          _mm256_madd_epi16(ph, bcast_u8_to16<2 * J + 1>(sm)));
}

// Prefetch of the `bytes` of weights kMatVecPrefetchAhead past p: a matrix-vector product walks one
// contiguous stream of rows, which the hardware prefetchers alone keep too few lines ahead of from
// DRAM (as the tiles' Ahead1, kernels_tiles_avx2.cpp; docs/kernels.md).
inline void prefetch_ahead(const uint8_t* p, size_t bytes) {
  for (size_t o = 0; o < bytes; o += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kMatVecPrefetchAhead + o), _MM_HINT_T0);
  }
}

float vec_dot_q4_K(int64_t n, const void* vw, const void* va) {
  const int64_t nb = n / QK_K;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, w += sizeof(block_q4_K), a += sizeof(block_q8_K)) {
    const __m128 dd = load_d_dmin(w + offsetof(block_q4_K, d), load_f32(a + kQ8K_d));
    const __m256i sm = unpack_scales_mins_k4(w + offsetof(block_q4_K, scales));
    acc_m = _mm256_fmadd_ps(lane1(dd), _mm256_cvtepi32_ps(mins_dot_bsums(sm, a + kQ8K_bsums)), acc_m);
    const uint8_t* qs = w + offsetof(block_q4_K, qs);
    const auto* q8 = reinterpret_cast<const int8_t*>(a + kQ8K_qs);
    __m256i s0 = q4k_chunk<0>(qs, q8, sm);
    __m256i s1 = q4k_chunk<1>(qs, q8, sm);
    s0 = _mm256_add_epi32(s0, q4k_chunk<2>(qs, q8, sm));
    s1 = _mm256_add_epi32(s1, q4k_chunk<3>(qs, q8, sm));
    acc = _mm256_fmadd_ps(lane0(dd), _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), acc);
  }
  return hsum(acc) - hsum(acc_m);
}

template <int J>
inline __m256i q5k_chunk(const uint8_t* qs, __m256i hbits, const int8_t* q8, __m256i sm) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m16 = _mm256_set1_epi8(0x10);
  const __m256i bits = loadu(qs + 32 * J);
  // 5th bit of the low-nibble elements is bit 2J of qh, of the high-nibble ones bit 2J+1.
  const __m256i lo = _mm256_or_si256(_mm256_and_si256(bits, m4), _mm256_and_si256(shift16<4 - 2 * J>(hbits), m16));
  const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m4),
                                     _mm256_and_si256(shift16<3 - 2 * J>(hbits), m16));
  const __m256i pl = _mm256_maddubs_epi16(lo, loadu(reinterpret_cast<const uint8_t*>(q8) + 64 * J));
  const __m256i ph = _mm256_maddubs_epi16(hi, loadu(reinterpret_cast<const uint8_t*>(q8) + 64 * J + 32));
  return _mm256_add_epi32(_mm256_madd_epi16(pl, bcast_u8_to16<2 * J>(sm)),
                          _mm256_madd_epi16(ph, bcast_u8_to16<2 * J + 1>(sm)));
}

float vec_dot_q5_K(int64_t n, const void* vw, const void* va) {
  const int64_t nb = n / QK_K;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, w += sizeof(block_q5_K), a += sizeof(block_q8_K)) {
    prefetch_ahead(w, sizeof(block_q5_K));
    const __m128 dd = load_d_dmin(w + offsetof(block_q5_K, d), load_f32(a + kQ8K_d));
    const __m256i sm = unpack_scales_mins_k4(w + offsetof(block_q5_K, scales));
    acc_m = _mm256_fmadd_ps(lane1(dd), _mm256_cvtepi32_ps(mins_dot_bsums(sm, a + kQ8K_bsums)), acc_m);
    const uint8_t* qs = w + offsetof(block_q5_K, qs);
    const __m256i hbits = loadu(w + offsetof(block_q5_K, qh));
    const auto* q8 = reinterpret_cast<const int8_t*>(a + kQ8K_qs);
    __m256i s0 = q5k_chunk<0>(qs, hbits, q8, sm);
    __m256i s1 = q5k_chunk<1>(qs, hbits, q8, sm);
    s0 = _mm256_add_epi32(s0, q5k_chunk<2>(qs, hbits, q8, sm));
    s1 = _mm256_add_epi32(s1, q5k_chunk<3>(qs, hbits, q8, sm));
    acc = _mm256_fmadd_ps(lane0(dd), _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), acc);
  }
  return hsum(acc) - hsum(acc_m);
}

// One 128-element half of a Q6_K block: 64 bytes of ql, 32 of qh, chunks 4H..4H+3.
template <int H>
inline __m256i q6k_half(const uint8_t* ql, const uint8_t* qh, const uint8_t* q8, __m256i sc) {
  const __m256i m15 = _mm256_set1_epi8(0x0F);
  const __m256i m48 = _mm256_set1_epi8(0x30);
  const __m256i l0 = loadu(ql + 64 * H);
  const __m256i l1 = loadu(ql + 64 * H + 32);
  const __m256i h = loadu(qh + 32 * H);
  const __m256i q0 = _mm256_or_si256(_mm256_and_si256(l0, m15), _mm256_and_si256(_mm256_slli_epi16(h, 4), m48));
  const __m256i q1 = _mm256_or_si256(_mm256_and_si256(l1, m15), _mm256_and_si256(_mm256_slli_epi16(h, 2), m48));
  const __m256i q2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), m15), _mm256_and_si256(h, m48));
  const __m256i q3 =
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m15), _mm256_and_si256(_mm256_srli_epi16(h, 2), m48));
  const uint8_t* y = q8 + 128 * H;
  const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(q0, loadu(y)), bcast16<4 * H + 0>(sc));
  const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(q1, loadu(y + 32)), bcast16<4 * H + 1>(sc));
  const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(q2, loadu(y + 64)), bcast16<4 * H + 2>(sc));
  const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(q3, loadu(y + 96)), bcast16<4 * H + 3>(sc));
  return _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
}

float vec_dot_q6_K(int64_t n, const void* vw, const void* va) {
  const int64_t nb = n / QK_K;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, w += sizeof(block_q6_K), a += sizeof(block_q8_K)) {
    const float d = load_f32(a + kQ8K_d) * load_f16(w + offsetof(block_q6_K, d));
    const __m128i sc8 = loadu128(w + offsetof(block_q6_K, scales));
    // sum q*y over unsigned q in [0, 63]; the -32 offset comes off as 32 * sum(scale * bsum).
    const __m256i corr = _mm256_madd_epi16(loadu(a + kQ8K_bsums), _mm256_cvtepi8_epi16(sc8));
    const __m256i sc = scales_even_odd_i8(sc8);
    const uint8_t* ql = w + offsetof(block_q6_K, ql);
    const uint8_t* qh = w + offsetof(block_q6_K, qh);
    const uint8_t* q8 = a + kQ8K_qs;
    __m256i s = _mm256_add_epi32(q6k_half<0>(ql, qh, q8, sc), q6k_half<1>(ql, qh, q8, sc));
    s = _mm256_sub_epi32(s, _mm256_slli_epi32(corr, 5));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc);
  }
  return hsum(acc);
}

// One 128-element half of a Q3_K block: 32 bytes of qs (2 bits per element, 4 chunks), the high
// bit of chunk c = 4H+k in bit c of hmask. Values are taken unsigned, u = low | high << 2 in
// [0, 7]; q = u - 4.
template <int H>
inline __m256i q3k_half(const uint8_t* qs, __m256i hm, const uint8_t* q8, __m256i sc) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i m4 = _mm256_set1_epi8(4);
  const __m256i bits = loadu(qs + 32 * H);
  const uint8_t* y = q8 + 128 * H;
  const __m256i u0 = _mm256_or_si256(_mm256_and_si256(bits, m3), _mm256_and_si256(shift16<2 - (4 * H + 0)>(hm), m4));
  const __m256i u1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 2), m3),
                                     _mm256_and_si256(shift16<2 - (4 * H + 1)>(hm), m4));
  const __m256i u2 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 4), m3),
                                     _mm256_and_si256(shift16<2 - (4 * H + 2)>(hm), m4));
  const __m256i u3 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bits, 6), m3),
                                     _mm256_and_si256(shift16<2 - (4 * H + 3)>(hm), m4));
  const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, loadu(y)), bcast16<4 * H + 0>(sc));
  const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, loadu(y + 32)), bcast16<4 * H + 1>(sc));
  const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(u2, loadu(y + 64)), bcast16<4 * H + 2>(sc));
  const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(u3, loadu(y + 96)), bcast16<4 * H + 3>(sc));
  return _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
}

// The 16 6-bit scales of Q3_K (12 bytes: as dwords D0 D1 D2, scale bits 0-3 from the nibbles
// of D0, D1, bits 4-5 from 2-bit fields of D2), minus 32, as int8.
//   s0-3 = D0 & 0xf | (D2 & 3) << 4          s4-7   = D1 & 0xf | (D2 >> 2 & 3) << 4
//   s8-11 = D0 >> 4 & 0xf | (D2 >> 4 & 3) << 4  s12-15 = D1 >> 4 & 0xf | (D2 >> 6 & 3) << 4
// The 16 bytes ending with the scales are read (the qs before them), not the 2 bytes after them:
// the block may end the row.
static_assert(offsetof(block_q3_K, scales) >= 4);
inline __m128i unpack_scales_q3k(const uint8_t* scales) {
  const __m128i v = loadu128(scales - 4);  // scale byte k at v[4 + k]
  const __m128i x = _mm_shuffle_epi8(v, _mm_setr_epi8(4, 5, 6, 7, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11));
  const __m128i y = _mm_shuffle_epi8(v, _mm_setr_epi8(12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15, 12, 13, 14, 15));
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(x, _mm_setr_epi32(0, 0, 4, 4)), _mm_set1_epi8(0x0f));
  const __m128i hi = _mm_and_si128(_mm_slli_epi32(_mm_srlv_epi32(y, _mm_setr_epi32(0, 2, 4, 6)), 4), _mm_set1_epi8(0x30));
  return _mm_sub_epi8(_mm_or_si128(lo, hi), _mm_set1_epi8(32));
}

float vec_dot_q3_K(int64_t n, const void* vw, const void* va) {
  const int64_t nb = n / QK_K;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, w += sizeof(block_q3_K), a += sizeof(block_q8_K)) {
    const float d = load_f32(a + kQ8K_d) * load_f16(w + offsetof(block_q3_K, d));
    const __m128i sc8 = unpack_scales_q3k(w + offsetof(block_q3_K, scales));
    // sum (u - 4) * y * scale = sum u*y*scale - 4 * sum(scale * bsum)
    const __m256i corr = _mm256_madd_epi16(loadu(a + kQ8K_bsums), _mm256_cvtepi8_epi16(sc8));
    const __m256i sc = scales_even_odd_i8(sc8);
    const uint8_t* qs = w + offsetof(block_q3_K, qs);
    const __m256i hm = loadu(w + offsetof(block_q3_K, hmask));
    const uint8_t* q8 = a + kQ8K_qs;
    __m256i s = _mm256_add_epi32(q3k_half<0>(qs, hm, q8, sc), q3k_half<1>(qs, hm, q8, sc));
    s = _mm256_sub_epi32(s, _mm256_slli_epi32(corr, 2));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(s), acc);
  }
  return hsum(acc);
}

template <int H>
inline __m256i q2k_half(const uint8_t* qs, const uint8_t* q8, __m256i sc) {
  const __m256i m3 = _mm256_set1_epi8(3);
  const __m256i bits = loadu(qs + 32 * H);
  const uint8_t* y = q8 + 128 * H;
  const __m256i u0 = _mm256_and_si256(bits, m3);
  const __m256i u1 = _mm256_and_si256(_mm256_srli_epi16(bits, 2), m3);
  const __m256i u2 = _mm256_and_si256(_mm256_srli_epi16(bits, 4), m3);
  const __m256i u3 = _mm256_and_si256(_mm256_srli_epi16(bits, 6), m3);
  const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(u0, loadu(y)), bcast16<4 * H + 0>(sc));
  const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(u1, loadu(y + 32)), bcast16<4 * H + 1>(sc));
  const __m256i p2 = _mm256_madd_epi16(_mm256_maddubs_epi16(u2, loadu(y + 64)), bcast16<4 * H + 2>(sc));
  const __m256i p3 = _mm256_madd_epi16(_mm256_maddubs_epi16(u3, loadu(y + 96)), bcast16<4 * H + 3>(sc));
  return _mm256_add_epi32(_mm256_add_epi32(p0, p1), _mm256_add_epi32(p2, p3));
}

float vec_dot_q2_K(int64_t n, const void* vw, const void* va) {
  const int64_t nb = n / QK_K;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  const __m128i m15 = _mm_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  __m256 acc_m = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, w += sizeof(block_q2_K), a += sizeof(block_q8_K)) {
    const __m128 dd = load_d_dmin(w + offsetof(block_q2_K, d), load_f32(a + kQ8K_d));
    const __m128i raw = loadu128(w + offsetof(block_q2_K, scales));
    const __m128i mins = _mm_and_si128(_mm_srli_epi16(raw, 4), m15);
    const __m256i summ = _mm256_madd_epi16(loadu(a + kQ8K_bsums), _mm256_cvtepu8_epi16(mins));
    acc_m = _mm256_fmadd_ps(lane1(dd), _mm256_cvtepi32_ps(summ), acc_m);
    const __m256i sc = scales_even_odd_i8(_mm_and_si128(raw, m15));  // values 0..15, sign-extension is harmless
    const uint8_t* qs = w + offsetof(block_q2_K, qs);
    const uint8_t* q8 = a + kQ8K_qs;
    const __m256i s = _mm256_add_epi32(q2k_half<0>(qs, q8, sc), q2k_half<1>(qs, q8, sc));
    acc = _mm256_fmadd_ps(lane0(dd), _mm256_cvtepi32_ps(s), acc);
  }
  return hsum(acc) - hsum(acc_m);
}

// IQ4_XS against Q8_K: per 256-block, sum over the 8 sub-blocks of (ls - 32) * sum(v * y) in
// int32 lanes, then one float multiply-add by d_w * d_a.
float vec_dot_iq4_xs(int64_t n, const void* vw, const void* va) {
  const int64_t nb = n / QK_K;
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  const __m256i book = iq4_codebook();
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < nb; ++i, w += sizeof(block_iq4_xs), a += sizeof(block_q8_K)) {
    const uint8_t* qs = w + offsetof(block_iq4_xs, qs);
    const uint8_t* q8 = a + kQ8K_qs;
    const uint32_t sh = static_cast<uint32_t>(load_u16_wide(w + offsetof(block_iq4_xs, scales_h)));
    const uint32_t sl = load_u32(w + offsetof(block_iq4_xs, scales_l));
    auto scale = [&](int ib) {  // ls - 32 of sub-block ib, in every int16 lane
      return _mm256_set1_epi16(static_cast<int16_t>((((sl >> (4 * ib)) & 0x0f) | (((sh >> (2 * ib)) & 3) << 4)) - 32));
    };
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int ib = 0; ib < QK_K / 32; ib += 2) {
      const __m256i p0 = mul_pairs_i8(iq4_values_32(qs + 16 * ib, book), loadu(q8 + 32 * ib));
      const __m256i p1 = mul_pairs_i8(iq4_values_32(qs + 16 * ib + 16, book), loadu(q8 + 32 * ib + 32));
      s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(p0, scale(ib)));
      s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(p1, scale(ib + 1)));
    }
    const float d = load_f16(w + offsetof(block_iq4_xs, d)) * load_f32(a + kQ8K_d);
    acc = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(_mm256_add_epi32(s0, s1)), acc);
  }
  return hsum(acc);
}

// ---------------------------------------------------------------------------------------------
// Float types. n is arbitrary; tails are done one element at a time. Rows are addressed as bytes
// (they need not be aligned to their element size).

inline __m256 load_f32x8(const uint8_t* p) { return _mm256_loadu_ps(reinterpret_cast<const float*>(p)); }
inline __m256 load_f16x8(const uint8_t* p) { return _mm256_cvtph_ps(loadu128(p)); }

float vec_dot_f32(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
         acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const uint8_t* x = w + 4 * i;
    const uint8_t* y = a + 4 * i;
    acc0 = _mm256_fmadd_ps(load_f32x8(x), load_f32x8(y), acc0);
    acc1 = _mm256_fmadd_ps(load_f32x8(x + 32), load_f32x8(y + 32), acc1);
    acc2 = _mm256_fmadd_ps(load_f32x8(x + 64), load_f32x8(y + 64), acc2);
    acc3 = _mm256_fmadd_ps(load_f32x8(x + 96), load_f32x8(y + 96), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_f32x8(w + 4 * i), load_f32x8(a + 4 * i), acc0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += load_f32(w + 4 * i) * load_f32(a + 4 * i);
  return s;
}

float vec_dot_f16(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
         acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const uint8_t* x = w + 2 * i;
    const uint8_t* y = a + 2 * i;
    acc0 = _mm256_fmadd_ps(load_f16x8(x), load_f16x8(y), acc0);
    acc1 = _mm256_fmadd_ps(load_f16x8(x + 16), load_f16x8(y + 16), acc1);
    acc2 = _mm256_fmadd_ps(load_f16x8(x + 32), load_f16x8(y + 32), acc2);
    acc3 = _mm256_fmadd_ps(load_f16x8(x + 48), load_f16x8(y + 48), acc3);
  }
  for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load_f16x8(w + 2 * i), load_f16x8(a + 2 * i), acc0);
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) s += load_f16(w + 2 * i) * load_f16(a + 2 * i);
  return s;
}

// 16 bf16 as two float vectors: even-indexed elements (shifted up) and odd-indexed (masked).
// Both operands get the same permutation, so the products pair up correctly.
inline void load_bf16x16(const uint8_t* p, __m256& even, __m256& odd) {
  const __m256i v = loadu(p);
  even = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
  odd = _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(static_cast<int>(0xffff0000u))));
}

float vec_dot_bf16(int64_t n, const void* vw, const void* va) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
         acc3 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 we, wo, ae, ao;
    load_bf16x16(w + 2 * i, we, wo);
    load_bf16x16(a + 2 * i, ae, ao);
    acc0 = _mm256_fmadd_ps(we, ae, acc0);
    acc1 = _mm256_fmadd_ps(wo, ao, acc1);
    load_bf16x16(w + 2 * i + 32, we, wo);
    load_bf16x16(a + 2 * i + 32, ae, ao);
    acc2 = _mm256_fmadd_ps(we, ae, acc2);
    acc3 = _mm256_fmadd_ps(wo, ao, acc3);
  }
  for (; i + 16 <= n; i += 16) {
    __m256 we, wo, ae, ao;
    load_bf16x16(w + 2 * i, we, wo);
    load_bf16x16(a + 2 * i, ae, ao);
    acc0 = _mm256_fmadd_ps(we, ae, acc0);
    acc1 = _mm256_fmadd_ps(wo, ao, acc1);
  }
  float s = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
  for (; i < n; ++i) {
    uint16_t x, y;
    std::memcpy(&x, w + 2 * i, 2);
    std::memcpy(&y, a + 2 * i, 2);
    s += bf16_to_f32(x) * bf16_to_f32(y);
  }
  return s;
}

// ---------------------------------------------------------------------------------------------
// Activation quantizers

inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }
inline float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

// Four vectors of 8 int32 (each in int8 range) -> 32 int8 in order.
inline __m256i pack_i32x32_to_i8(__m256i i0, __m256i i1, __m256i i2, __m256i i3) {
  const __m256i a = _mm256_packs_epi32(i0, i1);  // per lane: i0[0..3] i1[0..3] | i0[4..7] i1[4..7]
  const __m256i b = _mm256_packs_epi32(i2, i3);
  const __m256i c = _mm256_packs_epi16(a, b);    // dwords: i0lo i1lo i2lo i3lo | i0hi i1hi i2hi i3hi
  return _mm256_permutevar8x32_epi32(c, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The scalar quantizers' qround(v, lo, hi): clamp v to [lo-1, hi+1] (std::clamp: a NaN passes),
// round half to even through the 1.5*2^23 trick of llama.cpp's nearest_int (a NaN gives its
// mantissa bits), clamp the integer to [lo, hi]. Emulated step by step so that every input,
// inf/NaN products of a denormal block maximum included, quantizes as the scalar code does.
template <int Lo, int Hi>
inline __m256i qround(__m256 v) {
  v = _mm256_max_ps(_mm256_set1_ps(static_cast<float>(Lo - 1)), v);  // Lo-1 > v ? Lo-1 : v
  v = _mm256_min_ps(_mm256_set1_ps(static_cast<float>(Hi + 1)), v);  // Hi+1 < v ? Hi+1 : v
  const __m256i t = _mm256_castps_si256(_mm256_add_ps(v, _mm256_set1_ps(12582912.0f)));
  const __m256i r = _mm256_sub_epi32(_mm256_and_si256(t, _mm256_set1_epi32(0x007fffff)), _mm256_set1_epi32(0x00400000));
  return _mm256_min_epi32(_mm256_max_epi32(r, _mm256_set1_epi32(Lo)), _mm256_set1_epi32(Hi));
}

// max |x| over 8*nv floats, ignoring NaNs like the scalar `if (ax > amax)` / std::max(amax, ax).
inline float amax_ps(const float* x, int nv) {
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < nv; ++j) m = _mm256_max_ps(abs_ps(_mm256_loadu_ps(x + 8 * j)), m);  // NaN -> m
  return hmax(m);
}

// Q8_0 / Q8_1, as quantize_row_q8_0_act / q8_1_act (llama.cpp's x86 SIMD path):
// d = amax/127 stored as fp16, id = 127/amax, q = qround(x * id, -127, 127);
// Q8_1 also s = fp16(d * sum q).
template <bool WithSum>
void quantize_q8_x(const float* x, void* vy, int64_t n) {
  constexpr size_t B = WithSum ? sizeof(block_q8_1) : sizeof(block_q8_0);
  constexpr size_t off_d = WithSum ? kQ81_d : kQ80_d;
  constexpr size_t off_qs = WithSum ? kQ81_qs : kQ80_qs;
  auto* y = static_cast<uint8_t*>(vy);
  const int64_t nb = n / 32;
  for (int64_t i = 0; i < nb; ++i, x += 32, y += B) {
    const float amax = amax_ps(x, 4);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const uint16_t dh = f32_to_fp16(d);
    std::memcpy(y + off_d, &dh, 2);
    const __m256 vid = _mm256_set1_ps(id);
    const __m256i i0 = qround<-127, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(x), vid)));
    const __m256i i1 = qround<-127, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(x + 8), vid)));
    const __m256i i2 = qround<-127, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(x + 16), vid)));
    const __m256i i3 = qround<-127, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(x + 24), vid)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + off_qs), pack_i32x32_to_i8(i0, i1, i2, i3));
    if constexpr (WithSum) {
      const int32_t sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i0, i1), _mm256_add_epi32(i2, i3)));
      const uint16_t sh = f32_to_fp16(d * static_cast<float>(sum));
      std::memcpy(y + kQ81_s, &sh, 2);
    }
  }
}

void quantize_q8_0(const float* x, void* y, int64_t n) { quantize_q8_x<false>(x, y, n); }
void quantize_q8_1(const float* x, void* y, int64_t n) { quantize_q8_x<true>(x, y, n); }

// Q8_K, as quantize_row_q8_K_act (llama.cpp's quantize_row_q8_K_ref): max = the first element of
// largest magnitude, iscale = -127/max, q = qround(iscale * x, -128, 127), d = 1/iscale, bsums.
// An all-zero block is all zero (bsums included).
void quantize_q8_K(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  const int64_t nb = n / QK_K;
  for (int64_t i = 0; i < nb; ++i, x += QK_K, y += sizeof(block_q8_K)) {
    const float amax = amax_ps(x, QK_K / 8);
    if (amax == 0.0f) {
      std::memset(y, 0, sizeof(block_q8_K));
      continue;
    }
    const __m256 vamax = _mm256_set1_ps(amax);
    int first = 0;
    for (int j = 0; j < QK_K; j += 8) {
      const int mask = _mm256_movemask_ps(_mm256_cmp_ps(abs_ps(_mm256_loadu_ps(x + j)), vamax, _CMP_EQ_OQ));
      if (mask != 0) {
        first = j + __builtin_ctz(static_cast<unsigned>(mask));
        break;
      }
    }
    const float iscale = -127.0f / x[first];
    const float d = 1 / iscale;
    std::memcpy(y + kQ8K_d, &d, 4);
    const __m256 vs = _mm256_set1_ps(iscale);
    const __m256i ones8 = _mm256_set1_epi8(1);
    const __m256i ones16 = _mm256_set1_epi16(1);
    __m256i quads[8];  // per 32 elements: 8 int32 sums of 4 (lane 0: elements 0..15, lane 1: 16..31)
    for (int c = 0; c < 8; ++c) {
      const float* xc = x + 32 * c;
      const __m256i i0 = qround<-128, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(xc), vs)));
      const __m256i i1 = qround<-128, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(xc + 8), vs)));
      const __m256i i2 = qround<-128, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(xc + 16), vs)));
      const __m256i i3 = qround<-128, 127>(opaque(_mm256_mul_ps(_mm256_loadu_ps(xc + 24), vs)));
      const __m256i q = pack_i32x32_to_i8(i0, i1, i2, i3);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + kQ8K_qs + 32 * c), q);
      quads[c] = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, q), ones16);
    }
    // hadd twice: lane 0 gets the sums of sub-blocks 2c, lane 1 of 2c+1, for 4 chunks c.
    const __m256i s03 = _mm256_hadd_epi32(_mm256_hadd_epi32(quads[0], quads[1]), _mm256_hadd_epi32(quads[2], quads[3]));
    const __m256i s47 = _mm256_hadd_epi32(_mm256_hadd_epi32(quads[4], quads[5]), _mm256_hadd_epi32(quads[6], quads[7]));
    const __m256i p = _mm256_packs_epi32(s03, s47);  // lane 0: bsums 0,2,..,14; lane 1: 1,3,..,15
    const __m128i ev = _mm256_castsi256_si128(p), od = _mm256_extracti128_si256(p, 1);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + kQ8K_bsums), _mm_unpacklo_epi16(ev, od));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + kQ8K_bsums + 16), _mm_unpackhi_epi16(ev, od));
  }
}

// F16: F16C conversion, round to nearest even. NaNs are rewritten to the scalar converter's
// canonical quiet NaN (sign kept, payload dropped) so the output is bit-identical.
void quantize_f16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    __m128i h = _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT);
    const __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    if (_mm256_movemask_ps(nan) != 0) {
      const __m256i n32 = _mm256_castps_si256(nan);
      const __m128i n16 = _mm_packs_epi32(_mm256_castsi256_si128(n32), _mm256_extracti128_si256(n32, 1));
      h = _mm_andnot_si128(_mm_and_si128(n16, _mm_set1_epi16(0x01ff)), h);
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y + 2 * i), h);
  }
  for (; i < n; ++i) {
    const uint16_t h = f32_to_fp16(x[i]);
    std::memcpy(y + 2 * i, &h, 2);
  }
}

// BF16: round to nearest even on the bits; NaN -> (bits >> 16) | 64, as f32_to_bf16.
void quantize_bf16(const float* x, void* vy, int64_t n) {
  auto* y = static_cast<uint8_t*>(vy);
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(0x7fff);
  const __m256i absmask = _mm256_set1_epi32(0x7fffffff);
  const __m256i inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(64);
  auto conv = [&](__m256i u) {
    const __m256i r = _mm256_srli_epi32(
        _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), one))), 16);
    const __m256i isnan = _mm256_cmpgt_epi32(_mm256_and_si256(u, absmask), inf);
    const __m256i nanv = _mm256_or_si256(_mm256_srli_epi32(u, 16), quiet);
    return _mm256_blendv_epi8(r, nanv, isnan);
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256i r0 = conv(_mm256_castps_si256(_mm256_loadu_ps(x + i)));
    const __m256i r1 = conv(_mm256_castps_si256(_mm256_loadu_ps(x + i + 8)));
    // values are in [0, 0xffff]: unsigned saturation is exact; fix the per-lane interleave.
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(r0, r1), _MM_SHUFFLE(3, 1, 2, 0));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y + 2 * i), p);
  }
  for (; i < n; ++i) {
    const uint16_t b = f32_to_bf16(x[i]);
    std::memcpy(y + 2 * i, &b, 2);
  }
}

// Whether the CPU's vendor string (CPUID leaf 0) is AMD's.
bool cpu_vendor_is_amd() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
  char v[13];
  std::memcpy(v, &b, 4);
  std::memcpy(v + 4, &d, 4);
  std::memcpy(v + 8, &c, 4);
  v[12] = 0;
  return std::strcmp(v, "AuthenticAMD") == 0;
}

}  // namespace

void fill_kernel_table_avx2(KernelTable& t) {
  auto id = [](Type ty) { return static_cast<size_t>(ty); };
  t.vec_dot[id(Type::F32)] = vec_dot_f32;
  t.vec_dot[id(Type::F16)] = vec_dot_f16;
  t.vec_dot[id(Type::BF16)] = vec_dot_bf16;
  t.vec_dot[id(Type::Q4_0)] = vec_dot_q32<Q4_0A>;
  t.vec_dot[id(Type::Q4_1)] = vec_dot_q32<Q4_1A>;
  t.vec_dot[id(Type::Q5_0)] = vec_dot_q32<Q5_0A>;
  t.vec_dot[id(Type::Q5_1)] = vec_dot_q32<Q5_1A>;
  t.vec_dot[id(Type::Q8_0)] = vec_dot_q32<Q8_0A>;
  t.vec_dot[id(Type::Q2_K)] = vec_dot_q2_K;
  t.vec_dot[id(Type::Q3_K)] = vec_dot_q3_K;
  t.vec_dot[id(Type::Q4_K)] = vec_dot_q4_K;
  t.vec_dot[id(Type::Q5_K)] = vec_dot_q5_K;
  t.vec_dot[id(Type::Q6_K)] = vec_dot_q6_K;
  t.vec_dot[id(Type::IQ4_NL)] = vec_dot_q32<IQ4_NLA>;
  t.vec_dot[id(Type::IQ4_XS)] = vec_dot_iq4_xs;
  t.gemm[id(Type::Q4_0)] = gemm_q32<Q4_0A>;
  t.gemm[id(Type::Q4_1)] = gemm_q32<Q4_1A>;
  t.gemm[id(Type::Q5_1)] = gemm_q32<Q5_1A>;
  t.gemm[id(Type::IQ4_NL)] = gemm_q32<IQ4_NLA>;
  // Q5_0 and Q8_0 (docs/kernels.md, "The AVX2 policy"): on Zen 5 the 4 x 1 and 1 x 4 tiles beat
  // one vec_dot per output 1.8-3.5x (Q5_0 from L3 6 -> 14 GB/s, Q8_0 7-11 -> 25-27; batched 2.3x
  // and 1.8x); on the Intel VM Q5_0 measured even and Q8_0's 1 x 4 batches lost (0.7x), so Q8_0
  // takes the tiles on AMD CPUs only. Results are the same either way (the tiles are vec_dot's
  // instructions per product).
  t.gemm[id(Type::Q5_0)] = gemm_q32<Q5_0A>;
  if (cpu_vendor_is_amd()) t.gemm[id(Type::Q8_0)] = gemm_q32<Q8_0A>;

  t.quantize[id(Type::Q8_0)] = quantize_q8_0;
  t.quantize[id(Type::Q8_1)] = quantize_q8_1;
  t.quantize[id(Type::Q8_K)] = quantize_q8_K;
  t.quantize[id(Type::F16)] = quantize_f16;
  t.quantize[id(Type::BF16)] = quantize_bf16;
}

}  // namespace les
