// Scalar reference of IQ2_XXS, IQ2_XS, IQ2_S: dequantization, dot products against the activation type
// (llama.cpp's evaluation order) and the importance-weighted quantizers. (Being written.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_scalar_iq2(KernelTable&) {}

RefQuantizeFn ref_weight_quantizer_iq2(Type) { return nullptr; }

}  // namespace les
