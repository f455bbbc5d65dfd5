// dotprod (SDOT) kernels of the k23x family: Q2_K, Q3_K and IQ4_XS weights against Q8_K.
//
// vec_dot: per 256-element block the exact integer sums of the scalar reference (SDOT products,
// per-sub-block sums scaled in int32 lanes; Q2_K's scales pre-multiplied into its int8 weights),
// then one fixed float update per block (kernels_k23x_arm.h). gemm: tiles of 1 weight row x up to
// 4 activation rows that decode each weight block once; every output goes through the same
// integers and the same float sequence as vec_dot, so the two agree bit for bit.
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_k23x_arm.h"

namespace les {

void fill_kernel_table_dotprod_k23x(KernelTable& t) {
  t.vec_dot[static_cast<int>(Type::Q2_K)] = vec_dot_rows<Q2K, SdotInts>;
  t.vec_dot[static_cast<int>(Type::Q3_K)] = vec_dot_rows<Q3K, SdotInts>;
  t.vec_dot[static_cast<int>(Type::IQ4_XS)] = vec_dot_rows<IQ4XS, SdotInts>;
  t.gemm[static_cast<int>(Type::Q2_K)] = gemm_rows_tiled<Q2K, SdotInts>;
  t.gemm[static_cast<int>(Type::Q3_K)] = gemm_rows_tiled<Q3K, SdotInts>;
  t.gemm[static_cast<int>(Type::IQ4_XS)] = gemm_rows_tiled<IQ4XS, SdotInts>;
}

}  // namespace les
