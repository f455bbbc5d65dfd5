// Scalar reference of IQ3_XXS, IQ3_S: dequantization, dot products against the activation type
// (llama.cpp's evaluation order) and the importance-weighted quantizers. (Being written.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_scalar_iq3(KernelTable&) {}

RefQuantizeFn ref_weight_quantizer_iq3(Type) { return nullptr; }

}  // namespace les
