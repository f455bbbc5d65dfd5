// neon kernels of IQ1_S, IQ1_M. (Being written: the table keeps the entries of the ISA below.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_neon_iq1(KernelTable&) {}

}  // namespace les
