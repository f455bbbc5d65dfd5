// dotprod (Armv8.2 SDOT) kernels of TQ1_0, TQ2_0, MXFP4, NVFP4: vec_dot and gemm.
//
// The neon kernels' decoders and float order (lowbit_arm.h) with the integer sums formed by SDOT
// (exact for any int8 operands). gemm: 1 weight row x up to 4 activation rows, each weight block
// decoded once; bit-identical to this vec_dot, which the i8mm table keeps.

#include "les/quant/kernels_internal.h"
#include "les/quant/lowbit_arm.h"

namespace les {

void fill_kernel_table_dotprod_lowbit(KernelTable& t) { lowbit_arm::set_all<lowbit_arm::SdotInts>(t); }

}  // namespace les
