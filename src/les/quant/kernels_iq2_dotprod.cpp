// dotprod kernels of IQ2_XXS, IQ2_XS, IQ2_S against Q8_K: SDOT products (iq2_arm.h; this file is
// built with +dotprod, so the header's integer sums use SDOT here).

#include "les/quant/iq2_arm.h"
#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_dotprod_iq2(KernelTable& t) { iq2_arm::fill(t); }

}  // namespace les
