// attention_kernels.h's loops compiled for AVX2 + FMA (this file's compile flags).
#define LES_ATTN_NS attn_avx2
#include "les/model/attention_kernels_impl.h"
