// What an architecture's tensor writer (write_<arch>.cpp) asks of the synthetic file's builder
// (write_model.cpp): tensors whose content is a function of (seed, tensor name, row), counted for
// the file size whether or not the data is generated.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "les/synth/design.h"

namespace les::synth {

// A change of one generated matrix row: its element std multiplied by `scale`, then, when col0 is
// finite, its element 0 set to col0 (a quantized row's first block is quantized again around it).
struct RowEdit {
  float scale = 1.0f;
  float col0 = NAN;
};
using RowEditFn = std::function<RowEdit(int64_t row)>;

class TensorSink {
 public:
  virtual ~TensorSink() = default;
  // A weight matrix (2-D or a 3-D stack) in the spec's planned type: i.i.d. values of std
  // sigma.ctx in the output rows (index r % ne[1]) below the design's n_ctx_dims, sigma.tok in the
  // others; edit (may be empty) changes single rows.
  virtual void add_matrix(const std::string& name, std::vector<int64_t> ne, SplitSigma sigma, const RowEditFn& edit) = 0;
  virtual void add_router(const std::string& name, const LayerDesign& L) = 0;  // F32 [n_embd][n_expert]
  virtual void add_vector(const std::string& name, std::vector<float> v) = 0;   // F32
  virtual void add_normal_vector(const std::string& name, int64_t n, float sigma) = 0;
};

}  // namespace les::synth
