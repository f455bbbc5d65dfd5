// Batched matrix products (matmul over gemm kernels) give exactly the per-token results, for every
// kernel ISA this CPU has, any thread count and any batch size: the determinism the model's
// logits hashes rely on (CONTRIBUTING.md), checked on random matrices of every weight type and
// on the trained model (q3_K_M) and the bundled q4_k_m model.

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "les/model/context.h"
#include "les/model/matmul.h"
#include "les/quant/kernels.h"
#include "les/util/hash.h"
#include "les/util/thread_pool.h"
#include "test_util.h"

namespace les {
namespace {

constexpr Type kWeightTypes[] = {Type::Q4_K, Type::Q5_K, Type::Q6_K,   Type::Q3_K,   Type::Q2_K, Type::Q8_0,
                                 Type::Q4_0, Type::Q5_0, Type::Q4_1,   Type::Q5_1,   Type::IQ4_NL, Type::IQ4_XS,
                                 Type::F16,  Type::BF16, Type::F32};

std::vector<Isa> supported_isas() {
  std::vector<Isa> v;
  for (int i = 0; i < kNumIsa; ++i) {
    if (isa_supported(static_cast<Isa>(i))) v.push_back(static_cast<Isa>(i));
  }
  return v;
}

// Restores the active ISA when a test ends.
struct IsaGuard {
  Isa saved = kernels().isa;
  ~IsaGuard() { set_active_isa(saved); }
};

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// A random n_out x n_in matrix of type t (quantized from Gaussian floats, some rows scaled far up
// or down so that block scales vary widely).
std::vector<uint8_t> random_matrix(Type t, int64_t n_out, int64_t n_in, std::mt19937_64& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint8_t> w(row_bytes(t, n_in) * static_cast<size_t>(n_out));
  std::vector<float> x(static_cast<size_t>(n_in));
  for (int64_t r = 0; r < n_out; ++r) {
    const float scale = r % 7 == 0 ? 1e3f : (r % 5 == 0 ? 1e-3f : 1.0f);
    for (auto& v : x) v = nd(rng) * scale;
    quantize_row_ref(t, x.data(), w.data() + static_cast<size_t>(r) * row_bytes(t, n_in), n_in);
  }
  return w;
}

// matmul of a whole batch equals matmul token by token, with 1, 2 and 3 threads, and each output
// equals the active table's vec_dot.
TEST(BatchedProducts, MatmulEqualsPerTokenForEveryIsaAndThreadCount) {
  IsaGuard guard;
  std::mt19937_64 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool1(1), pool2(2), pool3(3);
  for (Type t : kWeightTypes) {
    const int64_t n_in = 512, n_out = 70;
    const std::vector<uint8_t> wb = random_matrix(t, n_out, n_in, rng);
    const Matrix W{t, n_in, n_out, row_bytes(t, n_in), wb.data()};
    const int64_t n_tok = 19;
    std::vector<float> x(static_cast<size_t>(n_tok * n_in));
    for (auto& v : x) v = nd(rng);
    for (Isa isa : supported_isas()) {
      ASSERT_TRUE(set_active_isa(isa));
      const std::string what = std::string(type_name(t)) + " " + isa_name(isa);
      // reference: one token at a time, one thread
      std::vector<float> ref(static_cast<size_t>(n_tok * n_out));
      QuantizedActs qa;
      for (int64_t k = 0; k < n_tok; ++k) {
        matmul(W, x.data() + k * n_in, 1, n_in, ref.data() + k * n_out, n_out, pool1, qa);
      }
      // each output is the table's vec_dot
      quantize_acts(act_type(t), x.data(), n_tok, n_in, n_in, qa);
      const VecDotFn dot = kernels().vec_dot[static_cast<int>(t)];
      for (int64_t k = 0; k < n_tok; k += 5) {
        for (int64_t r = 0; r < n_out; r += 3) {
          ASSERT_EQ(bits(ref[static_cast<size_t>(k * n_out + r)]), bits(dot(n_in, W.row(r), qa.row(k)))) << what;
        }
      }
      for (ThreadPool* pool : {&pool1, &pool2, &pool3}) {
        for (int64_t batch : {int64_t{2}, int64_t{3}, int64_t{7}, n_tok}) {
          std::vector<float> y(static_cast<size_t>(n_tok * n_out), -1.0f);
          for (int64_t k0 = 0; k0 < n_tok; k0 += batch) {
            const int64_t nb = std::min(batch, n_tok - k0);
            matmul(W, x.data() + k0 * n_in, nb, n_in, y.data() + k0 * n_out, n_out, *pool, qa);
          }
          EXPECT_EQ(std::memcmp(y.data(), ref.data(), y.size() * sizeof(float)), 0)
              << what << ", " << pool->size() << " threads, batches of " << batch;
        }
      }
    }
  }
}

// matmul_many (one pass of the threads over several matrices) gives each matrix's matmul.
TEST(BatchedProducts, MatmulManyEqualsOneMatmulPerMatrix) {
  IsaGuard guard;
  std::mt19937_64 rng(11);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  ThreadPool pool(3);
  for (Type t : {Type::Q4_K, Type::Q8_0, Type::F16}) {
    const int64_t n_in = 256;
    const std::vector<uint8_t> w0 = random_matrix(t, 45, n_in, rng), w1 = random_matrix(t, 130, n_in, rng);
    const Matrix W0{t, n_in, 45, row_bytes(t, n_in), w0.data()}, W1{t, n_in, 130, row_bytes(t, n_in), w1.data()};
    for (Isa isa : supported_isas()) {
      ASSERT_TRUE(set_active_isa(isa));
      for (int64_t n_tok : {int64_t{1}, int64_t{6}}) {
        std::vector<float> x(static_cast<size_t>(n_tok * n_in));
        for (auto& v : x) v = nd(rng);
        QuantizedActs qa;
        quantize_acts(act_type(t), x.data(), n_tok, n_in, n_in, qa);
        std::vector<float> a0(static_cast<size_t>(n_tok * 45)), a1(static_cast<size_t>(n_tok * 130));
        std::vector<float> b0(a0.size(), -1.0f), b1(a1.size(), -1.0f);
        matmul(W0, qa, a0.data(), 45, pool);
        matmul(W1, qa, a1.data(), 130, pool);
        const MatmulJob jobs[] = {{&W0, b0.data(), 45}, {&W1, b1.data(), 130}};
        matmul_many(jobs, qa, pool);
        EXPECT_EQ(a0, b0) << type_name(t) << " " << isa_name(isa) << " " << n_tok;
        EXPECT_EQ(a1, b1) << type_name(t) << " " << isa_name(isa) << " " << n_tok;
      }
    }
  }
}

// All positions' logits of a prompt, evaluated in batches of `batch` tokens on `threads` threads.
std::vector<float> prompt_logits(const Model& m, int threads, int batch) {
  const std::vector<int32_t> toks = {785, 3974, 293, 4830, 282, 5131, 7784, 82, 916, 279, 1187, 4246, 13, 50, 977};
  Context ctx(m, ContextParams{.n_ctx = 64, .n_threads = threads, .n_batch = batch});
  ctx.eval(toks, true);
  const int nv = m.config().n_vocab;
  std::vector<float> out;
  for (int i = 0; i < ctx.n_outputs(); ++i) out.insert(out.end(), ctx.logits(i), ctx.logits(i) + nv);
  return out;
}

void expect_logits_invariant(const std::string& path) {
  LES_REQUIRE_FILE(path);
  IsaGuard guard;
  auto m = Model::load(path);
  for (Isa isa : supported_isas()) {
    ASSERT_TRUE(set_active_isa(isa));
    const std::vector<float> base = prompt_logits(*m, 1, 256);
    const uint64_t h = hash64(base.data(), base.size() * sizeof(float));
    for (auto [threads, batch] : {std::pair{2, 256}, std::pair{3, 256}, std::pair{1, 1}, std::pair{2, 5},
                                  std::pair{3, 4}, std::pair{2, 1}}) {
      const std::vector<float> l = prompt_logits(*m, threads, batch);
      EXPECT_EQ(hash64(l.data(), l.size() * sizeof(float)), h)
          << path << " " << isa_name(isa) << ": " << threads << " threads, batches of " << batch;
    }
  }
}

TEST(BatchedProducts, TrainedModelLogitsIdenticalAcrossThreadsAndBatchesForEveryIsa) {
  expect_logits_invariant(test::tiny_moe_path());
}

TEST(BatchedProducts, BundledQ4KMLogitsIdenticalAcrossThreadsAndBatchesForEveryIsa) {
  expect_logits_invariant(test::source_dir() + "/models/tiny-moe-q4_k_m.gguf");
}

}  // namespace
}  // namespace les
