// Quantization kernels: quantize / dequantize rows and dot products of a weight row against
// activations quantized to the weight type's activation type (as llama.cpp does, so that our
// arithmetic matches its results). Scalar references are always compiled; SIMD variants are
// chosen at run time through one table per ISA.
#pragma once

#include <cstdint>

#include "les/quant/types.h"

namespace les {

// Kernel sets, in order of preference within an architecture.
// x86-64: avx_vnni is AVX2 + AVX-VNNI (256-bit VNNI without AVX-512); avx512 is AVX-512
// F/BW/VL/DQ + VNNI (its BF16 kernels only where the CPU has AVX512-BF16). A CPU may support
// avx512 without avx_vnni (AVX-512 VNNI came first).
// aarch64: neon is Advanced SIMD (every aarch64 CPU); dotprod adds SDOT/UDOT (Armv8.2 FEAT_DotProd,
// HWCAP_ASIMDDP); i8mm adds SMMLA (FEAT_I8MM, HWCAP2_I8MM) on top of dotprod.
// The other architecture's ISAs are never supported (their tables are not compiled in).
enum class Isa { scalar = 0, avx2 = 1, avx_vnni = 2, avx512 = 3, neon = 4, dotprod = 5, i8mm = 6 };
constexpr int kNumIsa = 7;
// "scalar", "avx2", "avxvnni", "avx512", "neon", "dotprod", "i8mm"
const char* isa_name(Isa isa);
// The ISA named `name` (as isa_name spells it); false if there is none of that name.
bool parse_isa(const char* name, Isa& isa);
// Whether this CPU (and OS) can run the kernels of `isa`.
bool isa_supported(Isa isa);
// Best ISA this CPU supports (cpuid + OS support).
Isa detect_isa();
// The ISA used unless --isa / set_active_isa chooses: LES_ISA (an isa_name) if set
// and supported (else a warning on stderr), otherwise detect_isa().
Isa default_isa();

// Type the activations are quantized to for products with weights of type w:
// K-quants, i-quants except IQ4_NL, TQ1_0/TQ2_0 -> Q8_K; Q4_0/Q5_0/Q8_0/IQ4_NL/MXFP4/NVFP4 -> Q8_0; Q4_1/Q5_1 -> Q8_1; F16 -> F16;
// BF16 -> BF16; F32 -> F32.
Type act_type(Type w);

// Dot product of n elements: a weight row of type w and an activation row of act_type(w).
using VecDotFn = float (*)(int64_t n, const void* w, const void* a);
// Products of nr weight rows with nc activation rows (a small matrix product):
//   y[c * y_stride + r] = vec_dot(n, w + r * w_stride, a + c * a_stride)   for r < nr, c < nc,
// bit-identical to the vec_dot entry of the same table (same integer sums, same float order), so
// a result never depends on how many rows or tokens were computed together. Each weight block is
// decoded once per tile of rows and reused across the tile's activation rows.
using GemmFn = void (*)(int64_t n, const void* w, size_t w_stride, int64_t nr, const void* a, size_t a_stride,
                        int64_t nc, float* y, int64_t y_stride);
// Converts n floats to a row of type t (activation quantization; fast path).
using QuantizeFn = void (*)(const float* x, void* y, int64_t n);
using DequantizeFn = void (*)(const void* x, float* y, int64_t n);
// Converts n weights to a row of type t with an optional importance[n] (nullptr = none).
using WeightQuantizeFn = void (*)(const float* x, void* y, int64_t n, const float* importance);

struct KernelTable {
  Isa isa;
  VecDotFn vec_dot[kTypeSlots];      // indexed by weight type id; nullptr if not provided at this ISA
  GemmFn gemm[kTypeSlots];           // indexed by weight type id; nullptr: use vec_dot per output
  QuantizeFn quantize[kTypeSlots];   // indexed by target type id (activation types must be present)
  DequantizeFn dequantize[kTypeSlots];// indexed by type id
  // Fast weight quantizers (quantize_row_fast), indexed by weight type id: the fast algorithm
  // where there is one, else the reference quantizer; the same bytes at every ISA.
  WeightQuantizeFn quantize_fast[kTypeSlots];
};

// The table for an ISA, with entries missing at that ISA filled from lower ISAs (so every entry
// of the scalar table is present in all). Returns nullptr if the ISA is not compiled in.
const KernelTable* kernel_table(Isa isa);
// The table in use: the best supported ISA unless overridden by set_active_isa (tests, --isa).
const KernelTable& kernels();
// Forces an ISA (isa_supported must hold); returns false if not available.
bool set_active_isa(Isa isa);

// t.gemm for weight type w, or, where t has none, vec_dot for every output (the same results).
void gemm_rows(const KernelTable& t, Type w, int64_t n, const void* wr, size_t w_stride, int64_t nr, const void* a,
               size_t a_stride, int64_t nc, float* y, int64_t y_stride);

// Reference-quality quantization of weights (may be slow; used by `les quantize` and `les synth`).
// n must be a multiple of the block size.
// importance: optional per-element weights [n] (>= 0; e.g. an importance matrix's mean squared
// activation of each input column of this row); nullptr = unweighted (today's behaviour, bit-identical).
// Every quantized weight type minimises the importance-weighted error in its scale/min search
// (as llama.cpp weighs an imatrix: element i by importance[i] * sqrt(sigma2 + x_i^2), sigma2 the
// mean square of the row or super-block); F32/F16/BF16 ignore it. Throws Error if an importance
// value is negative or not finite.
void quantize_row_ref(Type t, const float* x, void* y, int64_t n, const float* importance = nullptr);
void dequantize_row(Type t, const void* x, float* y, int64_t n);

// Fast weight quantization, for converting whole models: the reference's algorithm family
// (importance-weighted scale search, fp16 super-scales, per-sub-block integer scale choice)
// evaluated in float on 16 groups at a time (quantize_fast_impl.h), about an order of magnitude
// faster than quantize_row_ref. Weighted squared error within about 1% of the reference's
// (tests/test_quant_fast.cpp). Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, IQ4_NL, Q4_0, Q5_0 and Q8_0
// have a fast version; other types fall back to quantize_row_ref. Deterministic, and the same
// bytes whichever ISA runs it (the scalar table holds the same algorithm on emulated lanes).
// Same arguments, contract and errors as quantize_row_ref; x must be finite.
void quantize_row_fast(Type t, const float* x, void* y, int64_t n, const float* importance = nullptr);

}  // namespace les
