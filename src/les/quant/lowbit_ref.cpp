// Scalar reference of TQ1_0, TQ2_0, MXFP4, NVFP4: dequantization, dot products against the activation type
// (llama.cpp's evaluation order) and the importance-weighted quantizers. (Being written.)

#include "les/quant/kernels_internal.h"

namespace les {

void fill_kernel_table_scalar_lowbit(KernelTable&) {}

RefQuantizeFn ref_weight_quantizer_lowbit(Type) { return nullptr; }

}  // namespace les
