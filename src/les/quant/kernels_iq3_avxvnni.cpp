// AVX-VNNI: no kernels of this family's own. The table keeps AVX2's entries (the AVX-VNNI table is
// derived from AVX2's), which are exact for these types; 256-bit vpdpbusd would only replace their
// byte products (a CPU with AVX-VNNI but no AVX-512 is the case where it would help; not measured).

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_avxvnni_iq3(KernelTable&) {}

}  // namespace les
