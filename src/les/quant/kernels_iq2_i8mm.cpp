// i8mm: no IQ2 kernels of its own. The table keeps dotprod's vec_dot and gemm for IQ2_XXS, IQ2_XS and
// IQ2_S (exact, bit-identical to the scalar reference); an SMMLA tile would speed up prefill only.

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_i8mm_iq2(KernelTable&) {}

}  // namespace les
