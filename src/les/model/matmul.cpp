#include "les/model/matmul.h"

#include <algorithm>
#include <atomic>
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
  // Small batches (an expert's few tokens) are not worth waking the other threads for.
  constexpr int64_t kParallelElems = 1 << 15;
  if (pool && n_tok > 1 && n_tok * n_in >= kParallelElems) {
    pool->parallel_for(n_tok, 1, body);
  } else {
    body(0, 0, n_tok);
  }
}

namespace {

// The rows of a product are cut into blocks of about `block_bytes` of weights (a multiple of 4
// rows, the kernels' row tile), which the threads claim one at a time, so that a thread that was
// descheduled or started late holds up the others by one block at most. A block is multiplied
// with every token by one gemm (which keeps its rows in cache while blocks of tokens pass over
// them). Every output is the same vec_dot-equal value whatever the cuts and whoever runs them.
int64_t block_rows(const Matrix& W, size_t block_bytes) {
  return std::max<int64_t>(4, static_cast<int64_t>(block_bytes / std::max<size_t>(1, W.row_bytes)) & ~int64_t{3});
}

// Blocks of a batched product: 40 KiB. Of a matrix-vector product: long, because a block's rows
// are read as a few sequential streams (the kernels' row-strided tiles) that the hardware
// prefetchers must pick up anew in every block (Zen 5, 2 threads: 64 -> 192-384 KiB blocks, 30B-A3B
// shape decode 47 -> 52-57 tok/s), but at least two per thread, so that every thread has work.
size_t block_bytes(std::span<const MatmulJob> jobs, int64_t n_tok, int n_threads) {
  if (n_tok != 1) return 40 * 1024;
  size_t total = 0;
  for (const MatmulJob& j : jobs) total += j.W->row_bytes * static_cast<size_t>(j.W->n_out);
  const size_t per = total / (2 * static_cast<size_t>(std::max(1, n_threads)));
  return std::clamp<size_t>(per, 64 * 1024, 256 * 1024);
}

}  // namespace

void matmul_many(std::span<const MatmulJob> jobs, const QuantizedActs& a, ThreadPool& pool) {
  const KernelTable& kt = kernels();
  const int64_t n_tok = a.n_tok;
  int64_t n_blocks = 0;
  const size_t bb = block_bytes(jobs, n_tok, pool.size());
  for (const MatmulJob& j : jobs) {
    LES_ASSERT(a.n_in == j.W->n_in);
    LES_ASSERT(a.type == act_type(j.W->type));
    const int64_t br = block_rows(*j.W, bb);
    n_blocks += (j.W->n_out + br - 1) / br;
  }
  auto run_block = [&](int64_t b) {
    for (const MatmulJob& j : jobs) {  // find the job of block b
      const Matrix& W = *j.W;
      const int64_t br = block_rows(W, bb);
      const int64_t nb = (W.n_out + br - 1) / br;
      if (b >= nb) {
        b -= nb;
        continue;
      }
      const int64_t r0 = b * br, r1 = std::min(W.n_out, r0 + br);
      gemm_rows(kt, W.type, W.n_in, W.row(r0), W.row_bytes, r1 - r0, a.row(0), a.row_bytes, n_tok, j.y + r0, j.y_stride);
      return;
    }
  };
  if (pool.size() == 1 || n_blocks == 1) {
    // One chunk: runs on this thread (through the pool, so that its on-job hook runs as for
    // every product).
    pool.parallel_for(1, 1, [&](int, int64_t, int64_t) {
      for (int64_t b = 0; b < n_blocks; ++b) run_block(b);
    });
    return;
  }
  std::atomic<int64_t> next{0};
  pool.parallel_for(pool.size(), 1, [&](int, int64_t, int64_t) {
    for (int64_t b = next.fetch_add(1, std::memory_order_relaxed); b < n_blocks;
         b = next.fetch_add(1, std::memory_order_relaxed)) {
      run_block(b);
    }
  });
}

void matmul(const Matrix& W, const QuantizedActs& a, float* y, int64_t y_stride, ThreadPool& pool) {
  const MatmulJob job{&W, y, y_stride};
  matmul_many(std::span<const MatmulJob>(&job, 1), a, pool);
}

void matmul(const Matrix& W, const float* x, int64_t n_tok, int64_t x_stride, float* y, int64_t y_stride,
            ThreadPool& pool, QuantizedActs& scratch) {
  quantize_acts(act_type(W.type), x, n_tok, W.n_in, x_stride, scratch, &pool);
  matmul(W, scratch, y, y_stride, pool);
}

}  // namespace les
