// i8mm kernels of IQ3_XXS, IQ3_S. (Being written: the table keeps the entries of the ISA below.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_i8mm_iq3(KernelTable&) {}

}  // namespace les
