// avxvnni kernels of IQ2_XXS, IQ2_XS, IQ2_S. (Being written: the table keeps the entries of the ISA below.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_avxvnni_iq2(KernelTable&) {}

}  // namespace les
