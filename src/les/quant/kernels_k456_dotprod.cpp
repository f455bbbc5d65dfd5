// dotprod (Armv8.2 SDOT) kernels of Q4_K, Q5_K, Q6_K x Q8_K: vec_dot and gemm.
// The work is in kernels_k456_arm.h: a tile of one weight row x up to 4 activation rows decodes
// each weight chunk once and runs SDOT (exact int32 sums: unsigned weights <= 63 x int8) for
// every activation row; vec_dot is the 1 x 1 tile, so the gemm is bit-identical to it (every
// output's float operations are the same, in the same order; see the header).
#include "les/quant/kernels_internal.h"
#include "les/quant/kernels_k456_arm.h"

namespace les {
namespace {

using namespace k456;

template <template <int> class Tiles>
float vec_dot_sdot(int64_t n, const void* w, const void* a) {
  float out;
  Tiles<1>::run(n / QK_K, static_cast<const uint8_t*>(w), static_cast<const uint8_t*>(a), 0, &out);
  return out;
}

template <template <int> class Tiles>
void gemm_sdot(int64_t n, const void* w, size_t w_stride, int64_t nr, const void* a, size_t a_stride, int64_t nc,
               float* y, int64_t y_stride) {
  const auto* wr = static_cast<const uint8_t*>(w);
  for (int64_t r = 0; r < nr; ++r) {
    row_sdot<Tiles>(n / QK_K, wr + r * w_stride, static_cast<const uint8_t*>(a), a_stride, nc, y + r, y_stride);
  }
}

}  // namespace

void fill_kernel_table_dotprod_k456(KernelTable& t) {
  t.vec_dot[static_cast<int>(Type::Q4_K)] = vec_dot_sdot<Q4Tiles>;
  t.vec_dot[static_cast<int>(Type::Q5_K)] = vec_dot_sdot<Q5Tiles>;
  t.vec_dot[static_cast<int>(Type::Q6_K)] = vec_dot_sdot<Q6Tiles>;
  t.gemm[static_cast<int>(Type::Q4_K)] = gemm_sdot<Q4Tiles>;
  t.gemm[static_cast<int>(Type::Q5_K)] = gemm_sdot<Q5Tiles>;
  t.gemm[static_cast<int>(Type::Q6_K)] = gemm_sdot<Q6Tiles>;
}

}  // namespace les
