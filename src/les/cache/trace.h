// Routing traces for cache experiments: a minimal NumPy .npy reader and the (token, layer, expert)
// trace the expert-cache replays consume.
//
// The .npy reader accepts format versions 1.0, 2.0 and 3.0, C order, little-endian (or
// byte-order-free) integer and float dtypes (u1 i1 u2 i2 u4 i4 u8 i8 f2 f4 f8). Anything else
// (bad magic, truncated header or data, Fortran order, big-endian, unknown dtype, malformed
// header dict, trailing bytes) throws les::Error naming the file and what was wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace les::cache {

enum class NpyType { U8, I8, U16, I16, U32, I32, U64, I64, F16, F32, F64 };

const char* npy_type_name(NpyType t);  // numpy spelling without byte order: "u1", "f2", ...
size_t npy_type_size(NpyType t);

struct NpyArray {
  NpyType type = NpyType::U8;
  std::vector<size_t> shape;   // empty for a 0-d array
  std::vector<uint8_t> data;   // raw little-endian element bytes, C order

  size_t count() const;        // product of shape (1 for 0-d)
  // Element i converted to double / int64 (float types: value; integers: exact).
  double get_f64(size_t i) const;
  int64_t get_i64(size_t i) const;
};

// A .npy image (format 1.0, C order, little-endian) of `data` (raw element bytes, C order) with
// this dtype and shape; throws les::Error when the byte count does not match the shape.
std::vector<uint8_t> encode_npy(NpyType type, const std::vector<size_t>& shape, const void* data, size_t bytes);
// encode_npy written to `path` atomically (a temporary file renamed into place).
void save_npy(const std::string& path, NpyType type, const std::vector<size_t>& shape, const void* data, size_t bytes);

// Parses a whole .npy image held in memory; `name` is used in error messages.
NpyArray parse_npy(const uint8_t* bytes, size_t size, const std::string& name);
// Reads and parses a .npy file; throws les::Error on I/O or format problems.
NpyArray load_npy(const std::string& path);

// Routing decisions of T tokens through L MoE layers, top-K experts each (descending router
// probability), optionally with the full router softmax over E experts.
struct RoutingTrace {
  int n_tokens = 0;
  int n_layers = 0;
  int top_k = 0;
  int n_experts = 0;                 // E: from the probs file, else 1 + the largest expert id seen
  std::vector<int32_t> experts;      // [T][L][K]
  std::vector<float> probs;          // [T][L][E], empty if not loaded
  // The first token of each sequence (prompt, conversation), ascending, starts[0] == 0; empty: one
  // sequence. A cache may keep its contents across sequences, as a chat server would.
  std::vector<int32_t> starts;

  const int32_t* selected(int t, int l) const {
    return experts.data() + (static_cast<size_t>(t) * n_layers + l) * top_k;
  }
  bool has_probs() const { return !probs.empty(); }
  const float* router_probs(int t, int l) const {
    return probs.data() + (static_cast<size_t>(t) * n_layers + l) * n_experts;
  }
  size_t n_accesses() const { return static_cast<size_t>(n_tokens) * n_layers * top_k; }
};

// Builds a trace from an integer array of shape [T][L][K] and, if probs_path is non-empty, a float
// array of shape [T][L][E] (same T and L; every selected id < E), and, if starts_path is
// non-empty, an integer array [S] of sequence starts. n_experts > 0: the model's expert count
// (every id must be below it; without probs the count is otherwise 1 + the largest id seen).
// Throws les::Error naming the file and what is wrong: shape or dtype, negative or out-of-range
// expert ids, an expert selected twice for one token and layer, starts out of order or range.
RoutingTrace load_routing_trace(const std::string& experts_path, const std::string& probs_path = "",
                                const std::string& starts_path = "", int n_experts = 0);
RoutingTrace make_routing_trace(const NpyArray& experts, const NpyArray* probs, const std::string& name,
                                int n_experts = 0);
// Sets trace.starts from an integer array [S]; throws les::Error as above.
void set_sequence_starts(RoutingTrace& trace, const NpyArray& starts, const std::string& name);

}  // namespace les::cache
