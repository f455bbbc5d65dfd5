// AVX-VNNI kernels: the tiled VNNI kernels of kernels_x86_tiles.h with each 512-bit vector held
// as a pair of ymm registers and the VEX-encoded vpdpbusd / vpdpwssd, for CPUs that have
// AVX-VNNI without AVX-512. Compiled with -mavx2 -mfma -mf16c -mbmi2 -mavxvnni (CMake keys on the
// _avxvnni suffix); reached only through the kernel table after the dispatcher has checked the
// CPU. The 32-element block types but Q8_0 are AVX2's kernels (kernels_q32_x86.h) with vpdpbusd;
// float types and the activation quantizers are the AVX2 ones (inherited).

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "les/quant/blocks.h"
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_q32_x86.h"
#include "les/quant/kernels_x86_tiles.h"
#include "les/quant/kernels_x86_ymm2.h"

namespace les {
namespace {

// The VEX-encoded VNNI products.
struct DpVnni {
  static __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static __m256i dpwssd(__m256i acc, __m256i x, __m256i y) { return _mm256_dpwssd_avx_epi32(acc, x, y); }
};

// Tiles of one weight row x four activation rows, as the AVX2 tiles (the float accumulators spill;
// they are touched once per block): batched products 10-20% faster than with two activation rows
// on a Zen 5 (bench_kernels --tokens 64: q4_K 55 -> 64, q5_K 48 -> 57, q8_0 33 -> 40 GMAC/s). One
// activation row: one row at a time, each tile prefetching its stream 4 KiB ahead (docs/kernels.md).
using PVnni = tiles::PYmm2<DpVnni, 1, 4, 1, false, kMatVecPrefetchAhead>;

// The 32-element block types' kernels of kernels_q32_x86.h (those of AVX2) with vpdpbusd: the
// same int32 lane sums as AVX2's vpmaddubsw + vpmaddwd, so the same results, in fewer instructions.
struct DpVnniQ32 {
  static constexpr bool kVnni = true;
  static __m256i dpbusd(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_avx_epi32(acc, u, s); }
  static __m256i pairs(__m256i u, __m256i s) { return dpbusd(_mm256_setzero_si256(), u, s); }
};

template <class K>
void set_q32(KernelTable& t, Type ty) {
  t.vec_dot[static_cast<size_t>(ty)] = vec_dot_q32<K>;
  t.gemm[static_cast<size_t>(ty)] = gemm_q32<K>;
}

template <class W>
void set_int(KernelTable& t, Type ty) {
  t.vec_dot[static_cast<size_t>(ty)] = tiles::vec_dot<PVnni, W>;
  t.gemm[static_cast<size_t>(ty)] = tiles::gemm<PVnni, W>;
}

}  // namespace

// The 32-element block types other than Q8_0 take AVX2's kernels with vpdpbusd (set_q32), not
// the ymm-pair tiles: with one row per tile those tiles' matrix-vector products were 15-30%
// slower than AVX2's on a Zen 5 (bench_kernels), and decode matters more than batches.
void fill_kernel_table_avx_vnni(KernelTable& t) {
  set_int<tiles::KQ45<false>>(t, Type::Q4_K);
  set_int<tiles::KQ45<true>>(t, Type::Q5_K);
  set_int<tiles::KQ6>(t, Type::Q6_K);
  set_int<tiles::KQ3>(t, Type::Q3_K);
  set_int<tiles::KQ2>(t, Type::Q2_K);
  set_int<tiles::KIQ4XS>(t, Type::IQ4_XS);
  set_int<tiles::KQ8_0>(t, Type::Q8_0);
  set_q32<Q4_0Ops<DpVnniQ32>>(t, Type::Q4_0);
  set_q32<Q5_0Ops<DpVnniQ32>>(t, Type::Q5_0);
  set_q32<QX_1Ops<DpVnniQ32, false>>(t, Type::Q4_1);
  set_q32<QX_1Ops<DpVnniQ32, true>>(t, Type::Q5_1);
  set_q32<IQ4_NLOps<DpVnniQ32>>(t, Type::IQ4_NL);
}

}  // namespace les
