// aarch64 dotprod (Armv8.2 SDOT) kernels of the q32 family: vec_dot and gemm of Q4_0, Q4_1, Q5_0,
// Q5_1, Q8_0 and IQ4_NL against Q8_0/Q8_1 activations. The quantizers and float products are
// inherited from the neon table.
//
// Exactness: two SDOTs give the exact int32 sum of a block's 32 products (any int8 values,
// -128 included); the float steps per block and output are the family's (kernels_q32_arm.h), and
// the gemm (one weight row x up to 4 activation rows, each weight block decoded once) evaluates
// the same steps per output, so it is bit-identical to vec_dot. The i8mm gemm reproduces them too.

#include <arm_neon.h>

#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_q32_arm.h"

namespace les {
namespace {

struct DotSdot {
  static inline int32_t sum(int8x16_t wl, int8x16_t wh, int8x16_t al, int8x16_t ah) {
    return vaddvq_s32(vdotq_s32(vdotq_s32(vdupq_n_s32(0), wl, al), wh, ah));
  }
};

template <class D>
void set(KernelTable& t, Type type) {
  t.vec_dot[static_cast<int>(type)] = vec_dot_q32<D, DotSdot>;
  t.gemm[static_cast<int>(type)] = gemm_q32<D, DotSdot>;
}

}  // namespace

void fill_kernel_table_dotprod_q32(KernelTable& t) {
  set<DecQ4_0>(t, Type::Q4_0);
  set<DecQ4_1>(t, Type::Q4_1);
  set<DecQ5_0>(t, Type::Q5_0);
  set<DecQ5_1>(t, Type::Q5_1);
  set<DecQ8_0>(t, Type::Q8_0);
  set<DecIq4Nl>(t, Type::IQ4_NL);
}

}  // namespace les
