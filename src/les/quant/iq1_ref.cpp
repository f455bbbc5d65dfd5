// Scalar reference of IQ1_S, IQ1_M: dequantization, dot products against the activation type
// (llama.cpp's evaluation order) and the importance-weighted quantizers. (Being written.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_scalar_iq1(KernelTable&) {}

RefQuantizeFn ref_weight_quantizer_iq1(Type) { return nullptr; }

}  // namespace les
