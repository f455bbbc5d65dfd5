// llama.cpp's CPU flash attention (ggml_flash_attn_ext, which mtmd's encoders use by default)
// reproduced for the vision encoder, so that its embeddings match llama.cpp's rather than a more
// exact attention's: K and V are rounded to half precision; where ggml's tiled kernel does not
// apply (head width not a multiple of its float vector width, or fewer than 64 queries), Q is
// rounded too and each query's weighted sum of V rows is kept in a half-precision accumulator,
// updated key by key with an online softmax. On SigLIP's 72-wide heads with AVX-512 that path
// moves the embeddings by about 5e-3 of their largest value against an exact attention.
#pragma once

#include <cstddef>
#include <cstdint>

namespace les::vision {

// Whether ggml's tiled flash-attention kernel (float accumulation) runs for this head width and
// query count on this CPU (ggml's float vector width: 16 lanes with AVX-512, 8 with AVX2, 4 with
// NEON); else the one-query-at-a-time kernel with the half-precision accumulator.
bool llamacpp_fa_tiled(int64_t head_dim, int64_t n_queries);

// One query of the one-query kernel: dots[t] = q . k_t (half-precision inputs, float sums) over
// n_keys keys in order; v16 rows (half precision) of d floats, v_stride elements apart. Writes
// softmax(dots * scale) . V to out[d] as ggml computes it.
void fa_query_f16acc(const float* dots, int64_t n_keys, const uint16_t* v16, size_t v_stride, int64_t d, float scale,
                     float* out);

}  // namespace les::vision
