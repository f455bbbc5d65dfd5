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
  const VecDotFn dot = kernels().vec_dot[static_cast<uint32_t>(W.type)];
  LES_ASSERT(dot != nullptr);
  const int64_t n_tok = a.n_tok;
  // Row blocks keep a few weight rows in cache while all tokens pass over them.
  const int64_t row_block = n_tok == 1 ? 1 : 8;
  const int64_t grain = n_tok == 1 ? 16 : row_block;
  pool.parallel_for(W.n_out, grain, [&](int, int64_t r0, int64_t r1) {
    for (int64_t rb = r0; rb < r1; rb += row_block) {
      const int64_t re = std::min(r1, rb + row_block);
      for (int64_t t = 0; t < n_tok; ++t) {
        const uint8_t* xa = a.row(t);
        float* yt = y + t * y_stride;
        for (int64_t r = rb; r < re; ++r) yt[r] = dot(W.n_in, W.row(r), xa);
      }
    }
  });
}

void matmul(const Matrix& W, const float* x, int64_t n_tok, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool& pool, QuantizedActs& scratch) {
  quantize_acts(act_type(W.type), x, n_tok, W.n_in, x_stride, scratch, &pool);
  matmul(W, scratch, y, y_stride, pool);
}

}  // namespace les
