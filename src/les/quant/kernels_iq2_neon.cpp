// NEON kernels of IQ2_XXS, IQ2_XS, IQ2_S against Q8_K: widening int8 products (iq2_arm.h).

#include "les/quant/iq2_arm.h"
#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_neon_iq2(KernelTable& t) { iq2_arm::fill(t); }

}  // namespace les
