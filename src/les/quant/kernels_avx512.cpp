// AVX-512 kernels (AVX-512 F/BW/VL/DQ/VNNI; AVX512-BF16 only behind cpu_has_avx512_bf16()).
// None yet: the avx512 table is the avx2 table unchanged. See kernels_internal.h for the contract
// of fill functions.

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_avx512(KernelTable& t) { (void)t; }

}  // namespace les
