// Internal interface between the dispatcher (dispatch.cpp) and the per-ISA kernel files.
// Not part of the public API: include only from src/les/quant/*.cpp and tests.
#pragma once

#include "les/quant/kernels.h"

namespace les {

// Each fill function stores the entries its ISA provides into `t` and leaves every other entry as
// it found it. The dispatcher calls them once, on a table that already holds the entries of the
// ISA below it (scalar -> avx2 -> avx_vnni, and avx2 -> avx512: a CPU with AVX-512 need not have
// AVX-VNNI), so an ISA only overrides what it speeds up. Where an ISA overrides a vec_dot but not
// the gemm of that type, the dispatcher drops the inherited gemm (it would not match the new
// vec_dot bit for bit) and products fall back to vec_dot.
// Contract: a fill function only stores function pointers; it must not execute instructions of
// its ISA (it runs before we know the CPU supports them). An override must give the same
// results as the entry it replaces: bit-identical for quantize/dequantize, within float rounding
// for vec_dot.
void fill_kernel_table_scalar(KernelTable& t);  // quant_ref.cpp: every entry of every type
void fill_kernel_table_avx2(KernelTable& t);    // kernels_avx2.cpp   (AVX2+FMA+F16C+BMI2)
void fill_kernel_table_avx2_tiles(KernelTable& t);  // kernels_tiles_avx2.cpp (tiles on AVX2, over the above)
void fill_kernel_table_avx_vnni(KernelTable& t);  // kernels_avxvnni.cpp (AVX2 + AVX-VNNI)
void fill_kernel_table_avx512(KernelTable& t);  // kernels_avx512.cpp (AVX-512 F/BW/VL/DQ/VNNI)
// The same without the GFNI variants (what a CPU without GFNI gets), for the tests.
void fill_kernel_table_avx512_without_gfni(KernelTable& t);
void fill_dequantizers_avx2(KernelTable& t);    // dequantize_avx2.cpp (conversion sources: Q4_K)

// How far ahead of itself an x86 matrix-vector kernel without row tiles (the AVX2 and AVX-VNNI 1 x 1
// tiles, the AVX2 vec_dots) prefetches its weight stream: measured best of 2, 4 and 8 KiB for
// decode-shaped products from DRAM (docs/kernels.md, "The AVX2 policy").
inline constexpr size_t kMatVecPrefetchAhead = 4096;

// aarch64 (files named *_neon.cpp, *_dotprod.cpp, *_i8mm.cpp get their -march in CMakeLists.txt).
// Derivation: scalar -> neon -> dotprod -> i8mm. Each family of types has one file per ISA:
//   q32:  Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL (32-element blocks), F32, F16, BF16, and the
//         activation quantizers Q8_0, Q8_1, Q8_K, F16, BF16 (neon only: bit-identical to scalar)
//   k456: Q4_K, Q5_K, Q6_K
//   k23x: Q2_K, Q3_K, IQ4_XS
void fill_kernel_table_neon_q32(KernelTable& t);      // kernels_q32_neon.cpp
void fill_kernel_table_dotprod_q32(KernelTable& t);   // kernels_q32_dotprod.cpp
void fill_kernel_table_i8mm_q32(KernelTable& t);      // kernels_q32_i8mm.cpp
void fill_kernel_table_neon_k456(KernelTable& t);     // kernels_k456_neon.cpp
void fill_kernel_table_dotprod_k456(KernelTable& t);  // kernels_k456_dotprod.cpp
void fill_kernel_table_i8mm_k456(KernelTable& t);     // kernels_k456_i8mm.cpp
void fill_kernel_table_neon_k23x(KernelTable& t);     // kernels_k23x_neon.cpp
void fill_kernel_table_dotprod_k23x(KernelTable& t);  // kernels_k23x_dotprod.cpp
void fill_kernel_table_i8mm_k23x(KernelTable& t);     // kernels_k23x_i8mm.cpp

// The low-bit families, each in files of its own (same contracts as above):
//   iq2:    IQ2_XXS, IQ2_XS, IQ2_S       (iq2_ref.cpp, kernels_iq2_<isa>.cpp)
//   iq3:    IQ3_XXS, IQ3_S               (iq3_ref.cpp, kernels_iq3_<isa>.cpp)
//   iq1:    IQ1_S, IQ1_M                 (iq1_ref.cpp, kernels_iq1_<isa>.cpp)
//   lowbit: TQ1_0, TQ2_0, MXFP4, NVFP4   (lowbit_ref.cpp, kernels_lowbit_<isa>.cpp)
// The scalar fill stores every entry of its types (dequantize, vec_dot); fill_kernel_table_scalar
// calls it. The ISA fills are called by the dispatcher after the ISA's main fill.
void fill_kernel_table_scalar_iq2(KernelTable& t);
void fill_kernel_table_scalar_iq3(KernelTable& t);
void fill_kernel_table_scalar_iq1(KernelTable& t);
void fill_kernel_table_scalar_lowbit(KernelTable& t);
void fill_kernel_table_avx2_iq2(KernelTable& t);
void fill_kernel_table_avx2_iq3(KernelTable& t);
void fill_kernel_table_avx2_iq1(KernelTable& t);
void fill_kernel_table_avx2_lowbit(KernelTable& t);
void fill_kernel_table_avxvnni_iq2(KernelTable& t);
void fill_kernel_table_avxvnni_iq3(KernelTable& t);
void fill_kernel_table_avxvnni_iq1(KernelTable& t);
void fill_kernel_table_avxvnni_lowbit(KernelTable& t);
void fill_kernel_table_avx512_iq2(KernelTable& t);
void fill_kernel_table_avx512_iq3(KernelTable& t);
void fill_kernel_table_avx512_iq1(KernelTable& t);
void fill_kernel_table_avx512_lowbit(KernelTable& t);
void fill_kernel_table_neon_iq2(KernelTable& t);
void fill_kernel_table_neon_iq3(KernelTable& t);
void fill_kernel_table_neon_iq1(KernelTable& t);
void fill_kernel_table_neon_lowbit(KernelTable& t);
void fill_kernel_table_dotprod_iq2(KernelTable& t);
void fill_kernel_table_dotprod_iq3(KernelTable& t);
void fill_kernel_table_dotprod_iq1(KernelTable& t);
void fill_kernel_table_dotprod_lowbit(KernelTable& t);
void fill_kernel_table_i8mm_iq2(KernelTable& t);
void fill_kernel_table_i8mm_iq3(KernelTable& t);
void fill_kernel_table_i8mm_iq1(KernelTable& t);
void fill_kernel_table_i8mm_lowbit(KernelTable& t);

// The AVX2 tiles' emulation of vpdpbusd (kernels_tiles_avx2.cpp), exposed for the tests: out[i] =
// acc[i] + sum_k u[4i + k] * s[4i + k] for i < 8 (u7: the path for u <= 127 only). Needs AVX2.
void dpbusd_avx2_emulated(const int32_t* acc, const uint8_t* u, const int8_t* s, int32_t* out, bool u7);

// Whether the CPU (and OS) support AVX512-BF16. The avx512 ISA level does not require it, so
// kernels using AVX512-BF16 instructions must be registered only when this returns true.
bool cpu_has_avx512_bf16();
// Whether the CPU has GFNI (GF2P8AFFINEQB) next to the avx512 level; the avx512 table uses it
// for some K-quant kernels when it does.
bool cpu_has_gfni();

// Reference-quality weight quantizer: x[n] -> y, with an optional importance[n] (nullptr = none;
// the caller has checked it is finite and >= 0).
using RefQuantizeFn = void (*)(const float* x, void* y, int64_t n, const float* importance);
// The one for type t (slow; used by quantize_row_ref), or nullptr if there is none. For the
// activation-only types Q8_1/Q8_K it is the activation quantizer; float types and those ignore
// the importance.
RefQuantizeFn ref_weight_quantizer(Type t);
// The same for the low-bit families' types (nullptr for any other type). IQ1_* and IQ2_* need an
// importance vector (IQ2_S does not), as in llama.cpp: their quantizers throw Error when it is nullptr.
RefQuantizeFn ref_weight_quantizer_iq2(Type t);
RefQuantizeFn ref_weight_quantizer_iq3(Type t);
RefQuantizeFn ref_weight_quantizer_iq1(Type t);
RefQuantizeFn ref_weight_quantizer_lowbit(Type t);

// Row quantizers that reproduce llama.cpp's activation quantization bit for bit (see
// quant_ref.cpp for which llama.cpp code path each one follows). Exposed for the tests and as the
// fallback of SIMD code. n must be a multiple of the block size.
void quantize_row_q8_0_act(const float* x, void* y, int64_t n);
void quantize_row_q8_1_act(const float* x, void* y, int64_t n);
void quantize_row_q8_K_act(const float* x, void* y, int64_t n);

}  // namespace les
