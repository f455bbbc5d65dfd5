// AVX-512 kernels of IQ2_XXS, IQ2_XS, IQ2_S against Q8_K activations: vec_dot and gemm tiles.
// They need AVX512-VBMI (vpermb, vpermi2b, vpmultishiftqb) on top of the avx512 level; on a CPU
// without it the table keeps the AVX2 entries.
//
// A weight block becomes 4 vectors of 64 grid bytes g (natural element order) and their sign
// masks, decoded once per tile of rows x activation rows:
//   IQ2_XXS, IQ2_XS: the grid indices go through the 16-bit codes of the codebook (iq2_codes:
//     byte permutes over 128-entry tables, blended on the index bits above 7, for the low and the
//     high code byte); one more permute places a grid point's code bytes and sign byte in a
//     quadword, vpmultishiftqb pulls out each element's 2-bit level (a vpermb maps it to 8, 25,
//     43) and its sign bit.
//   IQ2_S (1024 points): the grid points are gathered (vpgatherdq), the sign bytes are the masks.
// Products, exact for every int8 activation a (-128 included), with 4-product lane sums
// |s| <= 4 * 128 * 43 that fit int16, so vpdpwssd multiplies them by the lane's sub-block
// multiplier 2 ls + 1 and accumulates:
//   one activation row (matvec): vpdpbusd of |a| with the weights signed by sign(w) xor sign(a);
//   batched tiles: vpdpbusd of a + 128 with the signed weights, started from -128 * sum(w).
// Per super-block an exact integer sum (four rows reduced together), then the scalar reference's
// float order (sumf += (d_w * d_a) * bsum, 0.125 * sumf): every result equals the scalar table's
// bit for bit, whatever the tile.

// GCC 12's AVX-512 intrinsics fill "undefined" pass-through operands with a self-initialised
// variable, which -Wuninitialized reports once they are inlined here.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cpuid.h>
#include <immintrin.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "les/quant/blocks.h"
#include "les/quant/iq2_common.h"
#include "les/quant/iq_grids.h"
#include "les/quant/kernels_internal.h"

#define LES_IQ2_VBMI __attribute__((target("avx512vbmi")))

namespace les {
namespace {
namespace iq2_avx512 {

bool cpu_has_vbmi() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (c >> 1) & 1u;  // CPUID.(EAX=7,ECX=0):ECX.AVX512_VBMI[bit 1]
}

constexpr size_t kQ8Bytes = sizeof(block_q8_K);
constexpr size_t kQ8d = offsetof(block_q8_K, d);
constexpr size_t kQ8qs = offsetof(block_q8_K, qs);

template <typename T, size_t N>
struct alignas(64) Table {
  T v[N];
};

// Byte-permute controls and tables (constant data: no code runs before the CPU is checked).
// kSignBytes[c]: the sign byte of 7-bit code c.
constexpr Table<uint8_t, 128> kSignBytes = [] {
  Table<uint8_t, 128> t{};
  for (int c = 0; c < 128; ++c) t.v[c] = iq2_signs(c);
  return t;
}();
// kLevelBytes[i]: the grid byte of level i & 3 (vpermb uses 6 bits of the index).
constexpr Table<uint8_t, 64> kLevelBytes = [] {
  Table<uint8_t, 64> t{};
  constexpr uint8_t v[4] = {8, 25, 43, 0};
  for (int i = 0; i < 64; ++i) t.v[i] = v[i & 3];
  return t;
}();
// vpmultishiftqb controls over a quadword [code lo, code hi, sign byte, ...]: byte k takes bits
// 2k.. (level of element k in its low 2 bits) / bits 9+k.. (sign of element k in bit 7).
constexpr Table<uint8_t, 64> kFieldShifts = [] {
  Table<uint8_t, 64> t{};
  for (int i = 0; i < 64; ++i) t.v[i] = static_cast<uint8_t>(2 * (i % 8));
  return t;
}();
constexpr Table<uint8_t, 64> kSignShifts = [] {
  Table<uint8_t, 64> t{};
  for (int i = 0; i < 64; ++i) t.v[i] = static_cast<uint8_t>(9 + i % 8);
  return t;
}();
// IQ2_XXS: over a sub-block's quadword [4 grid indices, uint32 aux], bytes 4..7 take the four
// 7-bit sign codes (bits 32 + 7l..).
constexpr Table<uint8_t, 64> kXxsCodeShifts = [] {
  Table<uint8_t, 64> t{};
  for (int i = 0; i < 64; ++i) t.v[i] = static_cast<uint8_t>(i % 8 < 4 ? 0 : 32 + 7 * (i % 8 - 4));
  return t;
}();
// IQ2_XXS: for output vector j (grid points 8j..8j+7 = sub-blocks 2j, 2j+1), quadword q gathers
// from `merged` (low code bytes at 8s+l, sign bytes at 8s+4+l) and `hi` (high code bytes at 8s+l,
// indices 64..127) the point p = 8(2j + q/4) + q%4: [lo(p), hi(p), sign(p), 0...].
constexpr std::array<Table<uint8_t, 64>, 4> kXxsPlace = [] {
  std::array<Table<uint8_t, 64>, 4> t{};
  for (int j = 0; j < 4; ++j) {
    for (int q = 0; q < 8; ++q) {
      const int p = 8 * (2 * j + q / 4) + q % 4;
      t[j].v[8 * q + 0] = static_cast<uint8_t>(p);
      t[j].v[8 * q + 1] = static_cast<uint8_t>(64 + p);
      t[j].v[8 * q + 2] = static_cast<uint8_t>(p + 4);
    }
  }
  return t;
}();
// IQ2_XS: the same from `merged` (low code byte of group p at 2p, its sign byte at 2p + 1) and
// `hi` (high code byte at 2p), p = 8j + q.
constexpr std::array<Table<uint8_t, 64>, 4> kXsPlace = [] {
  std::array<Table<uint8_t, 64>, 4> t{};
  for (int j = 0; j < 4; ++j) {
    for (int q = 0; q < 8; ++q) {
      const int p = 8 * j + q;
      t[j].v[8 * q + 0] = static_cast<uint8_t>(2 * p);
      t[j].v[8 * q + 1] = static_cast<uint8_t>(64 + 2 * p);
      t[j].v[8 * q + 2] = static_cast<uint8_t>(2 * p + 1);
    }
  }
  return t;
}();
// Lane l of output vector j belongs to sub-block 2j + l/8 (IQ2_XXS, scales as quadwords: dword
// 2s) or 4j + l/4 (IQ2_XS / IQ2_S, scales as dwords).
constexpr std::array<Table<int32_t, 16>, 4> kXxsScaleLanes = [] {
  std::array<Table<int32_t, 16>, 4> t{};
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 16; ++l) t[j].v[l] = 2 * (2 * j + l / 8);
  }
  return t;
}();
constexpr std::array<Table<int32_t, 16>, 4> kScaleLanes16 = [] {
  std::array<Table<int32_t, 16>, 4> t{};
  for (int j = 0; j < 4; ++j) {
    for (int l = 0; l < 16; ++l) t[j].v[l] = 4 * j + l / 4;
  }
  return t;
}();
// IQ2_S: shifts of the 2-bit high index fields of 8 groups within 16 bits of qh.
constexpr Table<int32_t, 8> kQhShifts = {{0, 2, 4, 6, 8, 10, 12, 14}};

template <typename T, size_t N>
inline __m512i ld(const Table<T, N>& t) {
  return _mm512_load_si512(t.v);
}

// A weight block decoded for products: the grid bytes g (unsigned, natural element order), the
// masks of its negative elements, each int32 lane's multiplier 2 ls + 1 (an int16 with a zero high
// half), and d.
struct Decoded {
  __m512i g[4];
  __mmask64 neg[4];
  __m512i mult[4];
  float d;
};

inline float ld_f32(const uint8_t* p) {
  float f;
  std::memcpy(&f, p, 4);
  return f;
}
inline float ld_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
// a * b rounded once: never fused with a following addition (the scalar reference's order).
inline float mul_unfused(float a, float b) {
  float p = a * b;
  __asm__("" : "+x"(p));
  return p;
}

inline void finish(Decoded& o, int j, __m512i g, __mmask64 neg) {
  o.g[j] = g;
  o.neg[j] = neg;
}

// 2 ls + 1 for the 16 nibbles of 8 scale bytes (IQ2_XS / IQ2_S), sub-block order, as dwords.
inline __m512i nibble_mults(const uint8_t* sc) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc));
  const __m128i lo = _mm_and_si128(b, _mm_set1_epi8(0x0f));
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0x0f));
  const __m128i ls = _mm_unpacklo_epi8(lo, hi);
  const __m128i m = _mm_add_epi8(_mm_add_epi8(ls, ls), _mm_set1_epi8(1));
  return _mm512_cvtepu8_epi32(m);
}

LES_IQ2_VBMI inline __m512i lookup256(const uint8_t* t, __m512i idx, __mmask64 bit7) {
  const __m512i a = _mm512_permutex2var_epi8(_mm512_load_si512(t), idx, _mm512_load_si512(t + 64));
  const __m512i b = _mm512_permutex2var_epi8(_mm512_load_si512(t + 128), idx, _mm512_load_si512(t + 192));
  return _mm512_mask_blend_epi8(bit7, a, b);
}

// Grid bytes and sign masks of the 4 output vectors from `merged` (low code bytes and sign bytes)
// and `hi` (high code bytes) through the placement controls place[j].
LES_IQ2_VBMI inline void expand(__m512i merged, __m512i hi, const Table<uint8_t, 64>* place, Decoded& o) {
  const __m512i fields = ld(kFieldShifts), sign_bits = ld(kSignShifts), levels = ld(kLevelBytes);
  for (int j = 0; j < 4; ++j) {
    const __m512i placed = _mm512_permutex2var_epi8(merged, ld(place[j]), hi);
    finish(o, j, _mm512_permutexvar_epi8(_mm512_multishift_epi64_epi8(fields, placed), levels),
           _mm512_movepi8_mask(_mm512_multishift_epi64_epi8(sign_bits, placed)));
  }
}

LES_IQ2_VBMI inline void decode_xxs(const uint8_t* blk, const Iq2Codes& codes, Decoded& o) {
  const __m512i raw = _mm512_loadu_si512(blk + offsetof(block_iq2_xxs, qs));
  const __mmask64 bit7 = _mm512_movepi8_mask(raw);
  const __m512i lo = lookup256(codes.lo, raw, bit7);
  const __m512i hi = lookup256(codes.hi, raw, bit7);
  const __m512i sign_codes = _mm512_multishift_epi64_epi8(ld(kXxsCodeShifts), raw);
  const __m512i signs =
      _mm512_permutex2var_epi8(ld(kSignBytes), sign_codes, _mm512_load_si512(kSignBytes.v + 64));
  expand(_mm512_mask_blend_epi8(0xF0F0F0F0F0F0F0F0ull, lo, signs), hi, kXxsPlace.data(), o);
  // 2 ls + 1 of sub-block s in dword 2s.
  const __m512i ls = _mm512_srli_epi64(raw, 60);
  const __m512i mults = _mm512_add_epi64(_mm512_add_epi64(ls, ls), _mm512_set1_epi64(1));
  for (int j = 0; j < 4; ++j) o.mult[j] = _mm512_permutexvar_epi32(ld(kXxsScaleLanes[j]), mults);
  o.d = ld_f16(blk);
}

// IQ2_XS: word g = 9-bit grid index | 7-bit sign code << 9. The codes of the 512 grid points are
// looked up from the low index bytes (even bytes) with four 128-entry permutes per code byte,
// chosen by index bits 7 and 8; sign bytes go to the odd bytes.
LES_IQ2_VBMI inline void decode_xs(const uint8_t* blk, const Iq2Codes& codes, Decoded& o) {
  const __m512i raw = _mm512_loadu_si512(blk + offsetof(block_iq2_xs, qs));
  const __mmask64 bit7 = _mm512_movepi8_mask(raw);
  const __mmask64 bit8 = _mm512_movepi8_mask(_mm512_srli_epi16(raw, 1));
  const __m512i lo = _mm512_mask_blend_epi8(bit8, lookup256(codes.lo, raw, bit7), lookup256(codes.lo + 256, raw, bit7));
  const __m512i hi = _mm512_mask_blend_epi8(bit8, lookup256(codes.hi, raw, bit7), lookup256(codes.hi + 256, raw, bit7));
  const __m512i signs =
      _mm512_permutex2var_epi8(ld(kSignBytes), _mm512_srli_epi16(raw, 9), _mm512_load_si512(kSignBytes.v + 64));
  expand(_mm512_mask_blend_epi8(0xAAAAAAAAAAAAAAAAull, lo, _mm512_slli_epi16(signs, 8)), hi, kXsPlace.data(), o);
  const __m512i mults = nibble_mults(blk + offsetof(block_iq2_xs, scales));
  for (int j = 0; j < 4; ++j) o.mult[j] = _mm512_permutexvar_epi32(ld(kScaleLanes16[j]), mults);
  o.d = ld_f16(blk);
}

// IQ2_S: 10-bit grid indices (qs low byte, 2 bits of qh), explicit sign bytes.
LES_IQ2_VBMI inline void decode_s(const uint8_t* blk, const Iq2Codes&, Decoded& o) {
  const uint8_t* qs = blk + offsetof(block_iq2_s, qs);
  const uint8_t* qh = blk + offsetof(block_iq2_s, qh);
  const __m512i mults = nibble_mults(blk + offsetof(block_iq2_s, scales));
  const __m256i shifts = _mm256_load_si256(reinterpret_cast<const __m256i*>(kQhShifts.v));
  for (int j = 0; j < 4; ++j) {
    uint16_t h;
    std::memcpy(&h, qh + 2 * j, 2);
    const __m256i high = _mm256_slli_epi32(
        _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), shifts), _mm256_set1_epi32(3)), 8);
    const __m256i idx =
        _mm256_or_si256(_mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qs + 8 * j))), high);
    const __m512i g = _mm512_i32gather_epi64(idx, reinterpret_cast<const long long*>(kIq2sGrid), 8);
    uint64_t sg;
    std::memcpy(&sg, qs + QK_K / 8 + 8 * j, 8);
    finish(o, j, g, _cvtu64_mask64(sg));
    o.mult[j] = _mm512_permutexvar_epi32(ld(kScaleLanes16[j]), mults);
  }
  o.d = ld_f16(blk);
}

// Four int32 vectors to their four sums (lane order fixed: the sums are exact integers anyway).
inline __m128i hsum4(__m512i a, __m512i b, __m512i c, __m512i d) {
  // 512 -> 256 bits, pairs interleaved so that each step halves the vectors.
  const __m512i ab = _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xee));
  const __m512i cd = _mm512_add_epi32(_mm512_shuffle_i64x2(c, d, 0x44), _mm512_shuffle_i64x2(c, d, 0xee));
  // ab: a's lanes 0-7 in 128-bit lanes 0, 1 and b's in 2, 3 (each the sum of two halves).
  const __m512i abcd = _mm512_add_epi32(_mm512_shuffle_i64x2(ab, cd, 0x88), _mm512_shuffle_i64x2(ab, cd, 0xdd));
  // abcd: 128-bit lane k holds 4 partial sums of vector k.
  const __m512i t = _mm512_add_epi32(_mm512_unpacklo_epi32(abcd, _mm512_setzero_si512()),
                                     _mm512_unpackhi_epi32(abcd, _mm512_setzero_si512()));
  const __m512i u = _mm512_add_epi64(t, _mm512_bsrli_epi128(t, 8));
  // Lane 0 of each 128-bit lane: vector k's sum; gather them into 4 dwords.
  return _mm512_castsi512_si128(_mm512_permutexvar_epi32(_mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0), u));
}

// Matrix-vector tiles (one activation row): the activation's magnitudes |a| are the unsigned
// operand and each weight takes the sign of w * a (its sign mask xor a's): exact for every int8 a.
inline __m512i block_acc_abs(const Decoded& b, const __m512i* abs_a, const __mmask64* neg_a) {
  __m512i acc = _mm512_setzero_si512();
  for (int j = 0; j < 4; ++j) {
    const __m512i w = _mm512_mask_sub_epi8(b.g[j], _kxor_mask64(b.neg[j], neg_a[j]), _mm512_setzero_si512(), b.g[j]);
    acc = _mm512_dpwssd_epi32(acc, _mm512_dpbusd_epi32(_mm512_setzero_si512(), abs_a[j], w), b.mult[j]);
  }
  return acc;
}

// Batched tiles: signed weights w per row block and -128 * (sum of each lane's weights), shared
// by every activation row; a + 128 per activation block.
struct Signed {
  __m512i w[4];
  __m512i neg_corr[4];
};
inline void make_signed(const Decoded& b, Signed& s) {
  for (int j = 0; j < 4; ++j) {
    s.w[j] = _mm512_mask_sub_epi8(b.g[j], b.neg[j], _mm512_setzero_si512(), b.g[j]);
    s.neg_corr[j] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(0x80)), s.w[j]));
  }
}
inline __m512i block_acc_biased(const Decoded& b, const Signed& s, const __m512i* biased_a) {
  __m512i acc = _mm512_setzero_si512();
  for (int j = 0; j < 4; ++j) acc = _mm512_dpwssd_epi32(acc, _mm512_dpbusd_epi32(s.neg_corr[j], biased_a[j], s.w[j]), b.mult[j]);
  return acc;
}

constexpr int kTileRows = 4;
constexpr int kTileActs = 4;

using DecodeFn = void (*)(const uint8_t*, const Iq2Codes&, Decoded&);

// Matrix-vector product: tiles of 4 rows, each block's activation prepared once per tile; the
// weight stream is prefetched kMatVecPrefetchAhead bytes ahead of each row (rows are the streams).
template <Type T, DecodeFn Decode, size_t BlockBytes>
LES_IQ2_VBMI void matvec(int64_t n, const uint8_t* w, size_t w_stride, int64_t nr, const uint8_t* a, float* y) {
  const int64_t nb = n / QK_K;
  const Iq2Codes& codes = iq2_codes(T);
  for (int64_t r0 = 0; r0 < nr; r0 += kTileRows) {
    const int rr = static_cast<int>(nr - r0 < kTileRows ? nr - r0 : kTileRows);
    float sumf[kTileRows] = {};
    for (int64_t i = 0; i < nb; ++i) {
      const uint8_t* ab = a + i * kQ8Bytes;
      __m512i abs_a[4];
      __mmask64 neg_a[4];
      for (int j = 0; j < 4; ++j) {
        const __m512i v = _mm512_loadu_si512(ab + kQ8qs + 64 * j);
        abs_a[j] = _mm512_abs_epi8(v);
        neg_a[j] = _mm512_movepi8_mask(v);
      }
      const float da = ld_f32(ab + kQ8d);
      __m512i acc[kTileRows];
      float dw[kTileRows];
      for (int r = 0; r < kTileRows; ++r) {
        if (r < rr) {
          Decoded dec;
          const uint8_t* blk = w + static_cast<size_t>(r0 + r) * w_stride + i * BlockBytes;
          _mm_prefetch(reinterpret_cast<const char*>(blk + kMatVecPrefetchAhead), _MM_HINT_T0);
          Decode(blk, codes, dec);
          acc[r] = block_acc_abs(dec, abs_a, neg_a);
          dw[r] = dec.d;
        } else {
          acc[r] = _mm512_setzero_si512();
          dw[r] = 0;
        }
      }
      alignas(16) int32_t bsum[4];
      _mm_store_si128(reinterpret_cast<__m128i*>(bsum), hsum4(acc[0], acc[1], acc[2], acc[3]));
      for (int r = 0; r < rr; ++r) sumf[r] += mul_unfused(dw[r] * da, static_cast<float>(bsum[r]));
    }
    for (int r = 0; r < rr; ++r) y[r0 + r] = 0.125f * sumf[r];
  }
}

// Batched products: tiles of up to kTileRows weight rows x kTileActs activation rows, each weight
// block decoded once per tile, each activation block biased once per tile. One activation row
// goes to matvec (the same integer sums, the same float order).
template <Type T, DecodeFn Decode, size_t BlockBytes>
LES_IQ2_VBMI void gemm(int64_t n, const void* vw, size_t w_stride, int64_t nr, const void* va, size_t a_stride,
                       int64_t nc, float* y, int64_t y_stride) {
  const auto* w = static_cast<const uint8_t*>(vw);
  const auto* a = static_cast<const uint8_t*>(va);
  if (nc == 1) {
    matvec<T, Decode, BlockBytes>(n, w, w_stride, nr, a, y);
    return;
  }
  const int64_t nb = n / QK_K;
  const __m512i bias = _mm512_set1_epi8(char(0x80));
  const Iq2Codes& codes = iq2_codes(T);
  for (int64_t r0 = 0; r0 < nr; r0 += kTileRows) {
    const int rr = static_cast<int>(nr - r0 < kTileRows ? nr - r0 : kTileRows);
    for (int64_t c0 = 0; c0 < nc; c0 += kTileActs) {
      const int cc = static_cast<int>(nc - c0 < kTileActs ? nc - c0 : kTileActs);
      float sumf[kTileRows][kTileActs] = {};
      for (int64_t i = 0; i < nb; ++i) {
        Decoded dec[kTileRows];
        Signed sw[kTileRows];
        for (int r = 0; r < rr; ++r) {
          Decode(w + static_cast<size_t>(r0 + r) * w_stride + i * BlockBytes, codes, dec[r]);
          make_signed(dec[r], sw[r]);
        }
        for (int c = 0; c < cc; ++c) {
          const uint8_t* ab = a + static_cast<size_t>(c0 + c) * a_stride + i * kQ8Bytes;
          __m512i av[4];
          for (int j = 0; j < 4; ++j) av[j] = _mm512_xor_si512(_mm512_loadu_si512(ab + kQ8qs + 64 * j), bias);
          const float da = ld_f32(ab + kQ8d);
          __m512i acc[kTileRows];
          for (int r = 0; r < kTileRows; ++r) acc[r] = r < rr ? block_acc_biased(dec[r], sw[r], av) : _mm512_setzero_si512();
          alignas(16) int32_t bsum[4];
          _mm_store_si128(reinterpret_cast<__m128i*>(bsum), hsum4(acc[0], acc[1], acc[2], acc[3]));
          for (int r = 0; r < rr; ++r) sumf[r][c] += mul_unfused(dec[r].d * da, static_cast<float>(bsum[r]));
        }
      }
      for (int c = 0; c < cc; ++c) {
        for (int r = 0; r < rr; ++r) y[(c0 + c) * y_stride + r0 + r] = 0.125f * sumf[r][c];
      }
    }
  }
}

template <Type T, DecodeFn Decode, size_t BlockBytes>
LES_IQ2_VBMI float vec_dot(int64_t n, const void* w, const void* a) {
  float y;
  matvec<T, Decode, BlockBytes>(n, static_cast<const uint8_t*>(w), 0, 1, static_cast<const uint8_t*>(a), &y);
  return y;
}

}  // namespace iq2_avx512
}  // namespace

void fill_kernel_table_avx512_iq2(KernelTable& t) {
  using namespace iq2_avx512;
  if (!cpu_has_vbmi()) return;  // the AVX2 entries stay
  t.vec_dot[static_cast<int>(Type::IQ2_XXS)] = vec_dot<Type::IQ2_XXS, decode_xxs, sizeof(block_iq2_xxs)>;
  t.vec_dot[static_cast<int>(Type::IQ2_XS)] = vec_dot<Type::IQ2_XS, decode_xs, sizeof(block_iq2_xs)>;
  t.vec_dot[static_cast<int>(Type::IQ2_S)] = vec_dot<Type::IQ2_S, decode_s, sizeof(block_iq2_s)>;
  t.gemm[static_cast<int>(Type::IQ2_XXS)] = gemm<Type::IQ2_XXS, decode_xxs, sizeof(block_iq2_xxs)>;
  t.gemm[static_cast<int>(Type::IQ2_XS)] = gemm<Type::IQ2_XS, decode_xs, sizeof(block_iq2_xs)>;
  t.gemm[static_cast<int>(Type::IQ2_S)] = gemm<Type::IQ2_S, decode_s, sizeof(block_iq2_s)>;
}

}  // namespace les
