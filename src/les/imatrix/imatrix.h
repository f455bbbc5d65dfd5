// Importance matrices in llama.cpp's formats: per weight matrix, the sum over the rows that entered
// its products of each input column's square (in_sum2) and the number of those rows (counts).
// in_sum2 / counts is the mean squared activation of each input column, the weight an
// importance-aware quantizer gives to each column's rounding error.
//
// GGUF form (what llama-imatrix writes and llama-quantize reads; docs/imatrix.md):
//   general.type = "imatrix", imatrix.datasets (string array), imatrix.chunk_count (u32),
//   imatrix.chunk_size (u32, tokens per chunk)
//   per weight tensor NAME, sorted by name: "NAME.in_sum2" F32 [n_in, n_mat] and "NAME.counts" F32
//   [1, n_mat] (trailing dimensions of 1 dropped), n_mat = n_expert for a routed-expert stack
//   ([n_in, n_out, n_expert]), else 1. Counts are rows: tokens for a dense matrix, (token, slot)
//   pairs routed to the expert for an expert's matrix.
// Legacy .dat form (read only): int32 n_entries; per entry int32 name length, name, int32 ncall,
//   int32 nval, float[nval] = (in_sum2 / count) * ncall; then optionally int32 chunk count, int32
//   length and the dataset name. A 3-D tensor's entry is flat there ([n_expert * n_in] values, one
//   ncall), and stays flat in a GGUF file that llama-imatrix converted from it: fit_imatrix_to_model()
//   splits such entries per expert.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"

namespace les {

struct ImatrixEntry {
  int64_t n_in = 0, n_mat = 0;
  std::vector<float> in_sum2;  // [n_mat][n_in]
  std::vector<float> counts;   // [n_mat]
};

struct ImportanceMatrix {
  std::map<std::string, ImatrixEntry> entries;  // keyed by weight tensor name
  std::vector<std::string> datasets;
  int chunk_count = 0;
  int chunk_size = 0;  // 0 when unknown (legacy form)
  // Read from the legacy form: in_sum2 holds mean * ncall and counts ncall (the same means), and
  // 3-D tensors' entries are flat (n_mat 1) until fit_imatrix_to_model().
  bool legacy = false;

  // Mean squared activation of each input column for matrix `expert` of tensor `name` (expert 0 for
  // a 2-D tensor): [n_in] floats (in scratch), or nullptr when the tensor is absent or that matrix was
  // never used. Throws les::Error for expert > 0 of a single-matrix entry (a flat entry of an expert
  // stack that fit_imatrix_to_model() has not split).
  const float* column_weights(const std::string& name, int expert, std::vector<float>& scratch) const;
};

// Reads llama.cpp's GGUF imatrix form or its legacy .dat form (told apart by the GGUF magic).
// Throws les::Error naming the file and the entry or tensor for a missing, truncated or malformed
// file: sums without counts, a non-F32 tensor, sizes that do not divide, negative or non-finite
// counts, non-finite sums, no entries.
ImportanceMatrix read_imatrix(const std::string& path);
// The same over the bytes [data, data + size) of a whole file; `what` names it in messages.
ImportanceMatrix parse_imatrix(const uint8_t* data, size_t size, const std::string& what);

// Writes the GGUF form atomically (temporary file, fsync, rename). Throws les::Error on an entry
// whose sizes disagree or a file that cannot be written.
void write_imatrix(const ImportanceMatrix& m, const std::string& path);

// Splits flat entries (one matrix of n_expert * ne[0] values) of the model's 3-D expert stacks into
// [n_expert][ne[0]], each matrix with the entry's count. Other entries are left as they are.
void fit_imatrix_to_model(ImportanceMatrix& m, const gguf::File& model);

// Throws les::Error naming the first mismatch when the matrix was made for another model: an entry
// naming a tensor the model does not have or whose shape differs ([n_in] x n_mat against the tensor's
// ne[0] and expert count; a flat entry of ne[0] * n_expert values is accepted, as llama-quantize
// does), or a weight tensor of the model's trunk layers whose products llama-imatrix
// collects (attention and DeltaNet projections, router, experts, shared expert) with no entry.
// A packed file's expert stacks count under their original ffn_{gate,up,down}_exps names.
void check_imatrix_matches(const ImportanceMatrix& m, const gguf::File& model);

// Shapes of the model's tensors by name, with a packed file's expert stacks under their original
// names and shapes (blk.N.ffn_{gate,up,down}_exps.weight [n_in, n_out, n_expert]).
std::map<std::string, std::vector<int64_t>> model_tensor_shapes(const gguf::File& model);

}  // namespace les
