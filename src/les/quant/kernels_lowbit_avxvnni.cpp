// avxvnni kernels of TQ1_0, TQ2_0, MXFP4, NVFP4. (Being written: the table keeps the entries of the ISA below.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_avxvnni_lowbit(KernelTable&) {}

}  // namespace les
