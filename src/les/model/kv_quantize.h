// The conversion llama.cpp applies to K/V rows it stores as q4_0, q4_1, q5_0 or q5_1 (its
// from_float for these types: the scale from the block's extreme values, no search), so that a
// cache of these types holds the values llama.cpp's would. Blocks of 32 values; n a multiple of 32.
#pragma once

#include <cstdint>

#include "les/quant/types.h"

namespace les {

// True for the four types above; y receives row_bytes(t, n) bytes.
bool kv_quantize_simple(Type t, const float* x, uint8_t* y, int64_t n);

}  // namespace les
