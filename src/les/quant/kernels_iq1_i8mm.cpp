// i8mm (SMMLA) gemm of IQ1_S, IQ1_M against Q8_K: tiles of 2 weight rows x up to 8 activation
// rows, each pair of blocks decoded once (iq_arm_tiles.h). The table keeps the dotprod vec_dot;
// every output of this gemm equals it bit for bit (the same integers, the same float steps).

#include "les/quant/iq1_arm.h"
#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_i8mm_iq1(KernelTable& t) { iq1_arm::fill_mmla(t); }

}  // namespace les
