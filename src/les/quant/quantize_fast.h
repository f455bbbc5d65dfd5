// Internal interface of the fast weight quantizer (quantize_row_fast): the per-ISA fill
// functions, and the fp16 helpers every ISA's copy of the algorithm calls out of line. The
// helpers are compiled for the baseline ISA, in quantize_fast.cpp, so that no inline function of
// fp16.h compiled with AVX flags can be merged by the linker into code that runs on other CPUs.
// Include only from src/les/quant/*.cpp and tests.
#pragma once

#include <cstdint>

#include "les/quant/blocks.h"
#include "les/quant/kernels.h"

namespace les {

// Store quantize_fast entries for the required types (Q2_K..Q6_K, IQ4_XS, IQ4_NL, Q4_0, Q5_0,
// Q8_0) into t. Same contract as the fill functions of kernels_internal.h: every ISA's entries
// give bit-identical results (the scalar one is the same algorithm on 16 emulated lanes).
void fill_fast_quantizers_scalar(KernelTable& t);  // quantize_fast.cpp (also: reference entries for the rest)
void fill_fast_quantizers_avx2(KernelTable& t);    // quantize_fast_avx2.cpp
void fill_fast_quantizers_avx512(KernelTable& t);  // quantize_fast_avx512.cpp

namespace fastq {

// fit_scale / f2h_sat of quant_common.h and fp16 decoding, out of line.
half_bits fp16_scale_for(float v, int k);  // fit_scale(v, k)
half_bits fp16_saturating(float v);        // f2h_sat(v)
float fp16_value(half_bits h);

// For tests: the IQ4 codes (0..15, as floats) the fast algorithm assigns to v[0..15] (portable
// lanes); must equal quant_common.h's nearest_iq4 for every float, NaN and infinities included.
void iq4_codes_portable(const float* v, float* codes);

}  // namespace fastq
}  // namespace les
