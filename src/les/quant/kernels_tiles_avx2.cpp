// AVX2 tiles: the tiled kernels of kernels_x86_tiles.h on pairs of ymm registers (as the AVX-VNNI
// ones) for CPUs with AVX2 but no VNNI, the VNNI products emulated exactly. Compiled with the
// AVX2 flags (CMake keys on the _avx2 suffix); reached only through the kernel table after the
// dispatcher has checked the CPU. Registered on top of kernels_avx2.cpp's table, only for the
// types where they beat its vec_dot (bench_kernels, docs/kernels.md).

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "les/quant/blocks.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_x86_tiles.h"
#include "les/quant/kernels_x86_ymm2.h"

namespace les {
namespace {

// vpdpwssd / vpdpbusd without VNNI, exact for every input:
// - dpwssd: vpmaddwd then vpaddd (the same int32 sums; vpdpwssd does not saturate either).
// - dpbusd_u7 (u <= 127): vpmaddubsw, whose pair sums |u0*s0 + u1*s1| <= 2 * 127 * 128 = 32512 do
//   not saturate, then vpmaddwd by 1 and vpaddd.
// - dpbusd (any u): u = (u & 0x80) + (u & 0x7f); each part by vpmaddubsw is exact (the high part's
//   pairs are 128 * (s0 + s1) in [-32768, 32512]), each widened by vpmaddwd by 1 and added.
struct DpAvx2 {
  static __m256i dpwssd(__m256i acc, __m256i x, __m256i y) {
    __m256i r = _mm256_add_epi32(acc, _mm256_madd_epi16(x, y));
    // The sum is done here: without this empty asm (which may "change" r in its register) GCC
    // reassociates a block's additions into a tree after all of its products, and the 1 x 4
    // tiles spilled ~30 ymm per block (docs/kernels.md; batched q4_K 48 -> 62 GMAC/s).
    asm("" : "+x"(r));
    return r;
  }
  static __m256i dpbusd_u7(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }
  static __m256i dpbusd(__m256i acc, __m256i u, __m256i s) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i lo = _mm256_maddubs_epi16(_mm256_and_si256(u, _mm256_set1_epi8(0x7f)), s);
    const __m256i hi = _mm256_maddubs_epi16(_mm256_and_si256(u, _mm256_set1_epi8(static_cast<char>(0x80))), s);
    return _mm256_add_epi32(acc, _mm256_add_epi32(_mm256_madd_epi16(lo, ones), _mm256_madd_epi16(hi, ones)));
  }
};

// Tiles of one weight row x four activation rows (the float accumulators spill; they are touched
// once per 256-element block). A single activation row goes one row at a time, one sequential
// stream that each tile prefetches 4 KiB ahead of itself: the hardware prefetchers alone left
// decode-shaped products from DRAM 20% slower (bench_kernels --decode, q4_K and q6_K; 2 KiB and
// 8 KiB were slower than 4 KiB), and prefetching the whole next row at once was no faster.
using PAvx2 = tiles::PYmm2<DpAvx2, 1, 4, 1, false, kMatVecPrefetchAhead>;

template <class W>
void set_int(KernelTable& t, Type ty) {
  t.vec_dot[static_cast<size_t>(ty)] = tiles::vec_dot<PAvx2, W>;
  t.gemm[static_cast<size_t>(ty)] = tiles::gemm<PAvx2, W>;
}

}  // namespace

// Only where the tiles beat kernels_avx2.cpp's vec_dot in bench_kernels (docs/kernels.md): K-quants
// but Q5_K and IQ4_XS gain 1.3-2x in batched products and keep their matrix-vector speed; Q5_K,
// Q8_0 and the other 32-element types lose 10-40% in matrix-vector products (Q8_0's full-range
// u needs the two-product dpbusd) and stay with their AVX2 vec_dot.
void fill_kernel_table_avx2_tiles(KernelTable& t) {
  set_int<tiles::KQ45<false>>(t, Type::Q4_K);
  set_int<tiles::KQ6>(t, Type::Q6_K);
  set_int<tiles::KQ3>(t, Type::Q3_K);
  set_int<tiles::KQ2>(t, Type::Q2_K);
  set_int<tiles::KIQ4XS>(t, Type::IQ4_XS);
}

void dpbusd_avx2_emulated(const int32_t* acc, const uint8_t* u, const int8_t* s, int32_t* out, bool u7) {
  const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(acc));
  const __m256i uv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u));
  const __m256i sv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), u7 ? DpAvx2::dpbusd_u7(a, uv, sv) : DpAvx2::dpbusd(a, uv, sv));
}

}  // namespace les
