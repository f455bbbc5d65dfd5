// GGUF v2/v3 container: a pure, bounds-checked parser over a byte span and a writer.
// The parser never reads outside [data, data+size), never aborts, and reports errors as
// les::Error naming the key / tensor and the byte offset.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <variant>
#include <vector>

#include "les/quant/types.h"

namespace les::gguf {

// Parser limits for untrusted input (all checked before allocating).
constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxStringBytes = 1ull << 30;  // any string: key, value, tensor name
constexpr int kMaxArrayDepth = 8;                 // levels of array nesting (a flat array is 1)
constexpr uint64_t kMaxValues = 1ull << 24;       // keys + array elements (all depths) per file
constexpr uint64_t kMaxTensors = 1ull << 20;
constexpr uint32_t kMaxDims = 4;

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
const char* value_type_name(ValueType t);

// A metadata value. Arrays hold one element type; nested arrays are allowed by the format.
struct Value {
  ValueType type = ValueType::UINT8;
  ValueType elem_type = ValueType::UINT8;  // for ARRAY
  // Scalars: integers in i64/u64, floats in f64, bool in u64, strings in str.
  // Precisely: unsigned types and BOOL use u64, signed types use i64 (the other field is unused),
  // FLOAT32/FLOAT64 use f64; the writer refuses values out of range for `type`.
  uint64_t u64 = 0;
  int64_t i64 = 0;
  double f64 = 0;
  std::string str;
  std::vector<Value> arr;  // for ARRAY (elements carry their own type)

  bool is_int() const;        // any integer type or bool
  bool is_float() const;
  // Conversions with range checks; throw les::Error on a type mismatch or out-of-range value.
  int64_t as_int(std::string_view key) const;
  uint64_t as_uint(std::string_view key) const;
  double as_float(std::string_view key) const;  // ints convert too
  bool as_bool(std::string_view key) const;
  const std::string& as_string(std::string_view key) const;
};

struct TensorInfo {
  std::string name;
  std::vector<int64_t> ne;  // dimensions, ne[0] is the contiguous (row) dimension, as in ggml
  Type type = Type::F32;
  uint64_t offset = 0;      // relative to the data section start
  uint64_t n_bytes = 0;     // computed from ne and type
  int64_t n_elements() const;
};

struct File {
  uint32_t version = 3;
  uint64_t alignment = 32;        // general.alignment, default 32
  std::vector<std::pair<std::string, Value>> kv;  // in file order
  std::vector<TensorInfo> tensors;                // in file order
  uint64_t data_offset = 0;       // absolute offset of the data section in the file
                                  // (with no tensors it may lie past the end of the file)
  uint64_t file_size = 0;

  const Value* find(std::string_view key) const;  // nullptr if absent
  const Value& get(std::string_view key) const;   // throws les::Error "missing key ..."
  const TensorInfo* find_tensor(std::string_view name) const;
  // Typed accessors with defaults for optional keys.
  int64_t get_int(std::string_view key) const;
  int64_t get_int(std::string_view key, int64_t def) const;
  double get_float(std::string_view key) const;
  double get_float(std::string_view key, double def) const;
  std::string get_string(std::string_view key, std::string_view def = {}) const;
  bool get_bool(std::string_view key, bool def) const;
};

// Parses the header, metadata and tensor infos from the first `size` bytes of a file whose total
// size is `file_size` (size may be a prefix as long as it covers the header; tensor extents are
// checked against file_size). Checks: magic, version (2 or 3), counts against the remaining bytes,
// string lengths (<= 1 GiB and within the buffer), array lengths, value types, dimensions (1..4,
// each >= 0, product without overflow, row size a multiple of the block size), known tensor
// types, duplicate tensor names, offsets aligned, extents inside the file and not overlapping.
File parse(const uint8_t* data, size_t size, uint64_t file_size, std::string_view what = "gguf");

// Reads the header of a file on disk (reads as many bytes as needed), then parse().
File read_file(const std::string& path);

// Builds a GGUF file. Tensor data are written in the order added, each aligned to `alignment`.
class Writer {
 public:
  // All add* and set_alignment validate their input and throw les::Error (duplicate key or
  // tensor name, value out of range for its type, bad dims, alignment not a power of two <= 2^31).
  // A "general.alignment" key (uint32) sets the alignment; one is emitted if it is not 32.
  void set_alignment(uint64_t a);
  void set_fill_piece(uint64_t bytes) { fill_piece_ = bytes > 0 ? bytes : 1; }
  void add(std::string key, Value v);
  void add_u32(std::string key, uint32_t v);
  void add_i32(std::string key, int32_t v);
  void add_u64(std::string key, uint64_t v);
  void add_f32(std::string key, float v);
  void add_bool(std::string key, bool v);
  void add_string(std::string key, std::string v);
  void add_string_array(std::string key, const std::vector<std::string>& v);
  void add_i32_array(std::string key, const std::vector<int32_t>& v);
  void add_f32_array(std::string key, const std::vector<float>& v);
  // Declares a tensor; its bytes come from `data` (must hold n_bytes) at write time, or from a
  // callback that fills the buffer (for streaming very large files).
  void add_tensor(std::string name, std::vector<int64_t> ne, Type type, const void* data);
  using FillFn = std::function<void(void* dst, uint64_t n_bytes)>;
  void add_tensor(std::string name, std::vector<int64_t> ne, Type type, FillFn fill);
  // Bytes [offset, offset+n) of the tensor, filled piecewise: every piece starts at a multiple of
  // `unit` and is a multiple of it (but for the tensor's end), at most fill_piece bytes (64 MiB
  // by default) unless unit is larger, so writing never holds a whole large tensor in memory.
  using ChunkFillFn = std::function<void(void* dst, uint64_t offset, uint64_t n_bytes)>;
  void add_tensor(std::string name, std::vector<int64_t> ne, Type type, ChunkFillFn fill, uint64_t unit);
  // Writes to path atomically: a temporary file in the same directory, fsync, rename.
  // progress(bytes_done, bytes_total) is called as data are written (may be empty).
  void write(const std::string& path,
             const std::function<void(uint64_t, uint64_t)>& progress = {}) const;
  // Serialized header size (metadata + tensor infos + padding) = offset of the data section.
  uint64_t header_bytes() const;
 private:
  struct PendingTensor {
    std::string name;
    std::vector<int64_t> ne;
    Type type;
    const void* data;
    ChunkFillFn fill;
    uint64_t unit;  // fill pieces are multiples of this
    uint64_t n_bytes;
  };
  // Validates and appends a tensor without data (the caller sets data or fill).
  PendingTensor& declare(std::string name, std::vector<int64_t> ne, Type type);
  // Serialized header (metadata, tensor infos, padding); *data_bytes = padded data section size.
  std::string header_blob(uint64_t* data_bytes) const;
  uint64_t alignment_ = 32;
  uint64_t fill_piece_ = uint64_t(64) << 20;
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
  std::unordered_set<std::string> tensor_names_;  // duplicate detection
};

}  // namespace les::gguf
