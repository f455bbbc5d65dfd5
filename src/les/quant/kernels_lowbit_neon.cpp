// Advanced SIMD (Armv8.0, no SDOT) kernels of TQ1_0, TQ2_0, MXFP4, NVFP4: vec_dot and gemm.
//
// Weights are decoded to signed bytes in the order of the activation bytes (lowbit_arm.h: the
// E2M1 values by a table lookup, the ternary digits by a wrapping multiplication by 3^k and two
// comparisons), multiplied with widening int16 products into the exact integer sums of the
// scalar reference, then updated in floats in the family's fixed order. gemm: 1 weight row x up
// to 4 activation rows, each weight block decoded once; bit-identical to this vec_dot.

#include "les/quant/kernels_internal.h"
#include "les/quant/lowbit_arm.h"

namespace les {

void fill_kernel_table_neon_lowbit(KernelTable& t) { lowbit_arm::set_all<lowbit_arm::WideningInts>(t); }

}  // namespace les
