// avxvnni kernels of IQ1_S and IQ1_M: vec_dot and gemm of iq1_x86.h with the AVX-VNNI (vpdpbusd + vpdpwssd on ymm)
// integer dot; bit-identical to the scalar reference.

#include "les/quant/iq1_x86.h"
#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_avxvnni_iq1(KernelTable& t) {
  using iq1_x86::DpVnni;
  t.vec_dot[static_cast<int>(Type::IQ1_S)] = iq1_x86::vec_dot<DpVnni, Type::IQ1_S>;
  t.vec_dot[static_cast<int>(Type::IQ1_M)] = iq1_x86::vec_dot<DpVnni, Type::IQ1_M>;
  t.gemm[static_cast<int>(Type::IQ1_S)] = iq1_x86::gemm<DpVnni, Type::IQ1_S>;
  t.gemm[static_cast<int>(Type::IQ1_M)] = iq1_x86::gemm<DpVnni, Type::IQ1_M>;
}

}  // namespace les
