// Tensor groups of mixed-precision allocation: every weight matrix of a model belongs to exactly
// one group (a layer's attention q, k, v or output, its router, shared expert, expert gate+up,
// expert down, DeltaNet projections; the embeddings; the output head), and a group takes one
// tensor type. Vectors (norms, biases) and the 2-D tensors read as floats (DeltaNet convolution
// taps, norm weights) are never in a group and keep their type.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/quant/types.h"

namespace les::mixed {

struct GroupTensor {
  std::string name;
  std::vector<int64_t> ne;   // ne[0] = row length
  Type src_type = Type::F32;
  uint64_t n_elements = 0;
};

struct TensorGroup {
  int layer = -1;             // -1: token_embd / output
  std::string kind;           // "attn_q", "ffn_down", "token_embd", ...
  bool routed_experts = false;  // streamed per expert (ffn_*_exps)
  std::vector<GroupTensor> tensors;
  std::string id() const;     // "blk.3.ffn_down", "token_embd"
  uint64_t n_elements() const;
  // Bytes of the group's tensors as type t (t must divide every row).
  uint64_t bytes(Type t) const;
  uint64_t src_bytes() const;
  // Whether t can hold every row of the group (block size divides the row length).
  bool fits(Type t) const;
  // Largest source bits per weight among the group's tensors.
  double src_bpw() const;
};

// The groups of a GGUF model's tensors, in file order of their first tensor. Routers
// (ffn_gate_inp) form groups of their own; 1-D tensors belong to none.
std::vector<TensorGroup> tensor_groups(const gguf::File& f);

// Bits per weight of a type (bytes per block * 8 / block size).
double type_bpw(Type t);

// Weight types les runs (quantizers, kernels), in increasing bits per weight.
std::vector<Type> weight_types();

}  // namespace les::mixed
