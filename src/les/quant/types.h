// Tensor element types. Numeric ids are GGUF's (ggml_type), so files from the ecosystem load as is.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace les {

enum class Type : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
  MXFP4 = 39,
  NVFP4 = 40,
};

// Size of the per-type tables indexed by type id (the kernel tables): every id above is smaller.
inline constexpr int kTypeSlots = 48;

struct TypeInfo {
  const char* name;     // "q4_K", as llama.cpp spells it
  int64_t block_size;   // elements per block
  size_t block_bytes;   // bytes per block
  bool weight_type;     // usable as a weight tensor type (not an activation-only type)
};

// Information for a known type; nullopt for an id we do not support.
std::optional<TypeInfo> type_info(uint32_t id);
// Same, for a type we know is valid (asserts).
const TypeInfo& info(Type t);
const char* type_name(Type t);
// Parses "q4_K", "Q4_K", "f16", ... ; nullopt if unknown.
std::optional<Type> parse_type(std::string_view name);

// Bytes for n elements (n must be a multiple of the block size; asserts).
size_t row_bytes(Type t, int64_t n);
inline int64_t block_size(Type t) { return info(t).block_size; }

}  // namespace les
