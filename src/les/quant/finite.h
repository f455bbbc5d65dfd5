// Non-finite values in tensor data: NaN or infinite F32/F16/BF16 elements, and NaN or infinite
// scales (d, dmin, m, s; MXFP4's E8M0 e = 0xff) in the blocks of the quantized types. A quantized block's values are
// finite exactly when its scales are (its quants are small integers), so scanning the scales
// finds every block that would put a NaN or infinity into a dot product.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "les/quant/types.h"

namespace les {

struct NonFinite {
  int64_t block = 0;         // index of the first bad block (element index for F32/F16/BF16)
  const char* field = "";    // "value" for plain floats, else the block field: "d", "dmin", "m", "s"
  bool nan = false;          // NaN (else +-infinity)
};

// The first non-finite value among the n_elements elements (a multiple of the block size) of
// type t at data, or nullopt. Integer types (I8, I16, I32) have none.
std::optional<NonFinite> find_nonfinite(Type t, const void* data, int64_t n_elements);

// "block 12 (elements 384..415): scale d is NaN" / "element 7 is +-inf" for messages.
std::string describe_nonfinite(Type t, const NonFinite& nf);

}  // namespace les
