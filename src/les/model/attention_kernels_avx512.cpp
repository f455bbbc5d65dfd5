// attention_kernels.h's loops compiled for AVX-512 (this file's compile flags).
#define LES_ATTN_NS attn_avx512
#include "les/model/attention_kernels_impl.h"
