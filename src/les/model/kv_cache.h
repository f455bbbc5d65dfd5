// The KV cache's storage: one row per (attention layer, position) for K and for V, each of a type
// llama.cpp's -ctk / -ctv take (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl). Rows are
// converted when written (llama.cpp's conversions: fp16/bf16 rounded to nearest, q8_0 as its
// activation quantizer, the other types by their reference quantizer) and read in place by the
// attention (attention_core.h): no dequantized copy of the cache exists.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "les/quant/types.h"
#include "les/storage/io.h"

namespace les {

// The cache types, in llama.cpp's spelling: "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0",
// "q5_1", "iq4_nl".
bool is_kv_type(Type t);
// Parses a cache type name (case-insensitive); throws les::Error naming the accepted ones.
Type parse_kv_type(std::string_view name, const char* flag = "--cache-type-k");
std::string kv_type_name(Type t);  // lower case, as llama.cpp prints it ("q8_0", "iq4_nl")
// Bytes of one cache row of `width` elements (width a multiple of the type's block size).
size_t kv_row_bytes(Type t, int64_t width);
// Throws les::Error when rows of heads of head_dim elements cannot be stored as t (a quantized
// type needs head_dim to be a multiple of its 32-element block: a head's values start a block).
void check_kv_head_dim(Type t, int64_t head_dim, const char* what);

// Rows of one layer's K or V: position p's row at data + p * row_bytes, head h's part at
// h * head_bytes within it.
struct KvView {
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;
  size_t head_bytes = 0;
  Type type = Type::F32;
  const uint8_t* row(int64_t pos) const { return data + static_cast<size_t>(pos) * row_bytes; }
};

// [n_layers][n_ctx] rows of `width` elements of one type (K or V); zeros until written. Large
// caches are anonymous mappings whose pages are taken as positions are written (a 4096-position
// cache of a 48-layer model would cost seconds of page faults if touched up front).
class KvRows {
 public:
  // Throws les::Error when it cannot be allocated (naming the size).
  void allocate(int n_layers, int n_ctx, int64_t width, int64_t head_dim, Type t);
  // Converts rows [n][width] of floats into positions pos0 .. pos0 + n - 1 of layer `layer`.
  void write(int layer, int pos0, const float* rows, int n);
  KvView view(int layer) const;
  uint8_t* row(int layer, int pos) { return buf_.data() + (static_cast<size_t>(layer) * n_ctx_ + static_cast<size_t>(pos)) * row_bytes_; }
  Type type() const { return type_; }
  size_t row_bytes() const { return row_bytes_; }
  uint64_t bytes() const { return static_cast<uint64_t>(n_layers_) * static_cast<uint64_t>(n_ctx_) * row_bytes_; }
  int64_t width() const { return width_; }

 private:
  storage::AlignedBuffer buf_;
  Type type_ = Type::F32;
  int n_layers_ = 0, n_ctx_ = 0;
  int64_t width_ = 0, head_dim_ = 0;
  size_t row_bytes_ = 0;
};

}  // namespace les
