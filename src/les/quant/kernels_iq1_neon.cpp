// NEON (Armv8.0) kernels of IQ1_S, IQ1_M against Q8_K: vec_dot and a gemm of 1 weight row x up
// to 8 activation rows (each block decoded once per tile), widening int8 products into int16
// lanes (iq_arm_tiles.h); both give the scalar reference's floats bit for bit.

#include "les/quant/iq1_arm.h"
#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_neon_iq1(KernelTable& t) { iq1_arm::fill_row_tiles(t); }

}  // namespace les
