#include "les/model/matmul.h"

#include <algorithm>
#include <cstring>

#include "les/quant/kernels.h"
#include "les/util/error.h"

namespace les {

void quantize_acts(Type type, const float* x, int64_t n_tok, int64_t n_in, int64_t x_stride, QuantizedActs& out,
                   ThreadPool* pool) {
  out.type = type;
  out.n_in = n_in;
  out.n_tok = n_tok;
  out.row_bytes = row_bytes(type, n_in);
  const size_t need = out.row_bytes * static_cast<size_t>(n_tok);
  if (out.buf.size() < need) out.buf.resize(need);
  const QuantizeFn q = kernels().quantize[static_cast<uint32_t>(type)];
  LES_ASSERT(q != nullptr);
  auto body = [&](int, int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) q(x + t * x_stride, out.buf.data() + static_cast<size_t>(t) * out.row_bytes, n_in);
  };
  if (pool && n_tok > 1) {
    pool->parallel_for(n_tok, 1, body);
  } else {
    body(0, 0, n_tok);
  }
}

void matmul(const Matrix& W, const QuantizedActs& a, float* y, int64_t y_stride, ThreadPool& pool) {
  LES_ASSERT(a.n_in == W.n_in);
  LES_ASSERT(a.type == act_type(W.type));
  const KernelTable& kt = kernels();
  const int64_t n_tok = a.n_tok;
  // Threads claim chunks of rows; a chunk is cut into row blocks of about kBlockBytes of weights,
  // each multiplied with every token by one gemm (which keeps its rows in cache while blocks of
  // tokens pass over them). Every output is the same vec_dot-equal value whatever the cuts.
  constexpr size_t kBlockBytes = 48 * 1024;
  const int64_t block_rows = std::max<int64_t>(4, static_cast<int64_t>(kBlockBytes / std::max<size_t>(1, W.row_bytes)) & ~int64_t{3});
  pool.parallel_for(W.n_out, 16, [&](int, int64_t r0, int64_t r1) {
    const int64_t step = n_tok == 1 ? r1 - r0 : block_rows;
    for (int64_t rb = r0; rb < r1; rb += step) {
      const int64_t re = std::min(r1, rb + step);
      gemm_rows(kt, W.type, W.n_in, W.row(rb), W.row_bytes, re - rb, a.row(0), a.row_bytes, n_tok, y + rb, y_stride);
    }
  });
}

void matmul(const Matrix& W, const float* x, int64_t n_tok, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool& pool, QuantizedActs& scratch) {
  quantize_acts(act_type(W.type), x, n_tok, W.n_in, x_stride, scratch, &pool);
  matmul(W, scratch, y, y_stride, pool);
}

}  // namespace les
