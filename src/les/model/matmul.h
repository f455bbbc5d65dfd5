// Matrix products of quantized weights with float activations. The activations are first
// converted to the weight type's activation type (as llama.cpp does), then the product runs as
// batched kernels (gemm: each weight block decoded once for several tokens) whose every output
// element equals one vec_dot of a weight row and an activation row, computed by exactly one
// thread: the result is independent of the thread count and of the number of tokens.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "les/model/weights.h"
#include "les/util/thread_pool.h"

namespace les {

// Activations converted once, reusable for several matrices of the same input width and type.
struct QuantizedActs {
  Type type = Type::F32;
  int64_t n_in = 0;
  int64_t n_tok = 0;
  size_t row_bytes = 0;
  std::vector<uint8_t> buf;
  const uint8_t* row(int64_t t) const { return buf.data() + static_cast<size_t>(t) * row_bytes; }
};

// Converts n_tok rows of n_in floats (row stride x_stride) to `type`.
void quantize_acts(Type type, const float* x, int64_t n_tok, int64_t n_in, int64_t x_stride, QuantizedActs& out,
                   ThreadPool* pool = nullptr);

// y[t * y_stride + r] = W.row(r) . x[t] for t < a.n_tok, r < W.n_out.
void matmul(const Matrix& W, const QuantizedActs& a, float* y, int64_t y_stride, ThreadPool& pool);

// One product of a matmul_many call: y[t * y_stride + r] = W.row(r) . x[t].
struct MatmulJob {
  const Matrix* W;
  float* y;
  int64_t y_stride;
};
// Several matrices times the same activations (e.g. an expert's gate and up) in one pass of the
// threads over all their row blocks: the same results as one matmul per job, with one wait for
// the threads instead of one per matrix. Every W must take a's type and width.
void matmul_many(std::span<const MatmulJob> jobs, const QuantizedActs& a, ThreadPool& pool);

// Convenience: quantize x for W then multiply.
void matmul(const Matrix& W, const float* x, int64_t n_tok, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool& pool, QuantizedActs& scratch);

}  // namespace les
