// The KV cache types (-ctk / -ctv): row conversion, attention over quantized rows read in place
// against a direct evaluation, bit-identity across batching and threads, and the budget's count.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "les/engine/memory_choice.h"
#include "les/model/attention_core.h"
#include "les/model/context.h"
#include "les/model/kv_cache.h"
#include "les/quant/kernels.h"
#include "les/sched/budget.h"
#include "les/util/error.h"
#include "test_util.h"

namespace les {
namespace {

const Type kTypedKv[] = {Type::F16, Type::BF16, Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::IQ4_NL};

std::vector<float> random_rows(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = nd(rng);
  return v;
}

TEST(KvCacheTypes, NamesParseAndBadOnesAreNamed) {
  for (Type t : kTypedKv) EXPECT_EQ(parse_kv_type(kv_type_name(t)), t);
  EXPECT_EQ(parse_kv_type("Q8_0"), Type::Q8_0);
  EXPECT_EQ(parse_kv_type("f32"), Type::F32);
  try {
    parse_kv_type("q4_k", "-ctk");
    FAIL() << "q4_k is no cache type";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("-ctk: unknown KV cache type 'q4_k'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("iq4_nl"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_kv_head_dim(Type::Q8_0, 48, "K"), Error);  // heads must start a 32-value block
  EXPECT_NO_THROW(check_kv_head_dim(Type::F16, 48, "K"));
  EXPECT_NO_THROW(check_kv_head_dim(Type::Q4_1, 64, "K"));
}

// Rows are stored as llama.cpp's set_rows stores them: f16/bf16/q8_0 by the activation
// converters, the other types by the reference quantizer, and read back as their dequantization.
TEST(KvCacheTypes, RowsAreConvertedOnWrite) {
  const int64_t width = 256;
  const std::vector<float> x = random_rows(3 * width, 7);
  for (Type t : kTypedKv) {
    KvRows rows;
    rows.allocate(2, 5, width, 64, t);
    EXPECT_EQ(rows.row_bytes(), row_bytes(t, width));
    EXPECT_EQ(rows.bytes(), 2u * 5u * row_bytes(t, width));
    rows.write(1, 2, x.data(), 3);
    std::vector<uint8_t> want(row_bytes(t, width));
    for (int i = 0; i < 3; ++i) {
      if (t == Type::F16 || t == Type::BF16 || t == Type::Q8_0) {
        kernels().quantize[static_cast<uint32_t>(t)](x.data() + i * width, want.data(), width);
      } else {
        quantize_row_ref(t, x.data() + i * width, want.data(), width);
      }
      EXPECT_EQ(0, std::memcmp(want.data(), rows.row(1, 2 + i), want.size())) << type_name(t) << " row " << i;
    }
    // Untouched rows stay zero.
    const std::vector<uint8_t> zero(rows.row_bytes(), 0);
    EXPECT_EQ(0, std::memcmp(zero.data(), rows.row(0, 2), zero.size()));
  }
}

struct TypedCase {
  int n_head, n_head_kv, hd, n, pos0, window;
  bool sinks;
};

// Attention over typed rows against a double-precision evaluation of the same arithmetic: the
// dequantized keys and values, the query as K's activation type holds it.
TEST(KvCacheTypes, AttentionMatchesADirectEvaluation) {
  const TypedCase cases[] = {
      {8, 2, 64, 3, 600, 0, false},   // decoding-like: few tokens, positions beyond two pieces
      {4, 4, 32, 40, 5, 0, false},    // a prompt from near the start, one head per KV head
      {8, 1, 64, 9, 300, 100, true},  // one KV head, a window and sinks
  };
  ThreadPool pool(2);
  const KernelTable& kt = kernels();
  for (const TypedCase& c : cases) {
    const int n_kv = c.pos0 + c.n;
    const int64_t width = int64_t(c.n_head_kv) * c.hd;
    const std::vector<float> kf = random_rows(size_t(n_kv) * width, 11), vf = random_rows(size_t(n_kv) * width, 12);
    const std::vector<float> q = random_rows(size_t(c.n) * c.n_head * c.hd, 13, 0.3f);
    std::vector<float> sinks = random_rows(size_t(c.n_head), 14);
    for (Type t : kTypedKv) {
      KvRows k, v;
      k.allocate(1, n_kv, width, c.hd, t);
      v.allocate(1, n_kv, width, c.hd, t);
      k.write(0, 0, kf.data(), n_kv);
      v.write(0, 0, vf.data(), n_kv);
      AttentionShape s{c.n_head, c.n_head_kv, c.hd, c.hd, 1.0f / std::sqrt(float(c.hd))};
      s.window = c.window;
      s.sinks = c.sinks ? sinks.data() : nullptr;
      std::vector<float> out(size_t(c.n) * c.n_head * c.hd);
      causal_attention(s, q.data(), c.n_head * c.hd, k.view(0), v.view(0), c.n, c.pos0, out.data(), pool);
      // The reference: dequantized rows, the query through K's activation type.
      std::vector<float> kd(kf.size()), vd(vf.size());
      for (int p = 0; p < n_kv; ++p) {
        dequantize_row(t, k.row(0, p), kd.data() + size_t(p) * width, width);
        dequantize_row(t, v.row(0, p), vd.data() + size_t(p) * width, width);
      }
      const Type at = act_type(t);
      std::vector<uint8_t> qa(row_bytes(at, c.hd));
      std::vector<float> qd(size_t(c.hd));
      double max_err = 0, max_ref = 0;
      for (int i = 0; i < c.n; ++i) {
        const int pos = c.pos0 + i, first = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
        for (int h = 0; h < c.n_head; ++h) {
          const int g = h / (c.n_head / c.n_head_kv);
          kt.quantize[static_cast<uint32_t>(at)](q.data() + (size_t(i) * c.n_head + h) * c.hd, qa.data(), c.hd);
          dequantize_row(at, qa.data(), qd.data(), c.hd);
          std::vector<double> sc;
          double mx = c.sinks ? sinks[size_t(h)] : -INFINITY;
          for (int j = first; j <= pos; ++j) {
            double dot = 0;
            for (int d = 0; d < c.hd; ++d) dot += double(qd[size_t(d)]) * kd[(size_t(j) * c.n_head_kv + g) * c.hd + d];
            sc.push_back(dot * s.scale);
            mx = std::max(mx, sc.back());
          }
          double z = c.sinks ? std::exp(sinks[size_t(h)] - mx) : 0.0;
          for (double& x : sc) z += x = std::exp(x - mx);
          for (int d = 0; d < c.hd; ++d) {
            double o = 0;
            for (int j = first; j <= pos; ++j) o += sc[size_t(j - first)] * vd[(size_t(j) * c.n_head_kv + g) * c.hd + d];
            o /= z;
            max_ref = std::max(max_ref, std::fabs(o));
            max_err = std::max(max_err, std::fabs(o - out[(size_t(i) * c.n_head + h) * c.hd + d]));
          }
        }
      }
      // q4_1 / q5_1 keys take the query as q8_1, whose block sum is kept in fp16: the key's minimum
      // meets that rounded sum (llama.cpp's arithmetic), not the exact one the reference uses.
      const double tol = (t == Type::Q4_1 || t == Type::Q5_1) ? 4e-4 : 2e-5;
      EXPECT_LE(max_err, tol * std::max(1.0, max_ref)) << type_name(t) << " case n=" << c.n << " pos0=" << c.pos0;
    }
  }
}

// A token's attention depends only on its position and the cache: one call for n tokens equals n
// calls of one token, bit for bit, at 1, 2 and 3 threads (one task per token and KV head, or one
// per piece of positions when few tokens leave threads idle).
TEST(KvCacheTypes, AttentionIsIndependentOfBatchingAndThreads) {
  const int n_head = 8, n_head_kv = 2, hd = 64, pos0 = 700, n = 6;
  const int n_kv = pos0 + n;
  const int64_t width = int64_t(n_head_kv) * hd;
  const std::vector<float> kf = random_rows(size_t(n_kv) * width, 21), vf = random_rows(size_t(n_kv) * width, 22);
  const std::vector<float> q = random_rows(size_t(n) * n_head * hd, 23, 0.5f);
  for (Type t : {Type::F16, Type::Q8_0, Type::Q4_1, Type::IQ4_NL}) {
    KvRows k, v;
    k.allocate(1, n_kv, width, hd, t);
    v.allocate(1, n_kv, width, hd, t);
    k.write(0, 0, kf.data(), n_kv);
    v.write(0, 0, vf.data(), n_kv);
    const AttentionShape s{n_head, n_head_kv, hd, hd, 0.125f};
    std::vector<float> batched(size_t(n) * n_head * hd);
    ThreadPool pool2(2);
    causal_attention(s, q.data(), n_head * hd, k.view(0), v.view(0), n, pos0, batched.data(), pool2);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      for (int i = 0; i < n; ++i) {
        std::vector<float> one(size_t(n_head) * hd);
        causal_attention(s, q.data() + size_t(i) * n_head * hd, n_head * hd, k.view(0), v.view(0), 1, pos0 + i,
                         one.data(), pool);
        EXPECT_EQ(0, std::memcmp(one.data(), batched.data() + size_t(i) * n_head * hd, one.size() * sizeof(float)))
            << type_name(t) << " token " << i << " threads " << threads;
      }
    }
  }
}

// The trained model with quantized caches: a prompt evaluated in one batch, in batches of 7 and
// token by token gives the same logits bit for bit; the text stays close to the f32 cache's.
TEST(KvCacheTypes, ContextLogitsDoNotDependOnBatching) {
  auto model = Model::load(test::tiny_moe_path());
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back((i * 37 + 11) % 7900);
  const int n_vocab = model->config().n_vocab;
  for (Type t : {Type::F16, Type::Q8_0, Type::Q4_0}) {
    std::vector<float> whole;
    for (int n_batch : {256, 7, 1}) {
      Context ctx(*model, ContextParams{.n_ctx = 64, .n_threads = 2, .n_batch = n_batch, .type_k = t, .type_v = t});
      if (n_batch == 1) {
        for (int32_t tok : prompt) ctx.eval(std::span<const int32_t>(&tok, 1), false);
      } else {
        ctx.eval(prompt, false);
      }
      const std::vector<float> lg(ctx.last_logits(), ctx.last_logits() + n_vocab);
      if (whole.empty()) {
        whole = lg;
      } else {
        EXPECT_EQ(0, std::memcmp(whole.data(), lg.data(), lg.size() * sizeof(float))) << type_name(t) << " n_batch " << n_batch;
      }
      EXPECT_EQ(ctx.type_k(), t);
    }
  }
}

TEST(KvCacheTypes, BudgetCountsTheTypes) {
  auto model = Model::load(test::tiny_moe_path());
  const ModelConfig& c = model->config();
  const uint64_t f32 = state_bytes(c, false, 512, 64).kv;
  EXPECT_EQ(f32, uint64_t(c.n_layer) * 512u * (row_bytes(Type::F32, c.n_kv_k()) + row_bytes(Type::F32, c.n_kv_v())));
  for (Type t : kTypedKv) {
    const uint64_t kv = state_bytes(c, false, 512, 64, t, t).kv;
    EXPECT_EQ(kv, uint64_t(c.n_layer) * 512u * 2u * row_bytes(t, c.n_kv_k())) << type_name(t);
    EXPECT_LT(kv, f32);
  }
  // A context allocates what the budget counts.
  Context ctx(*model, ContextParams{.n_ctx = 512, .n_threads = 1, .type_k = Type::Q8_0, .type_v = Type::Q4_0});
  const uint64_t want = uint64_t(c.n_layer) * 512u * (row_bytes(Type::Q8_0, c.n_kv_k()) + row_bytes(Type::Q4_0, c.n_kv_v()));
  EXPECT_GE(ctx.state_bytes(), want);
  EXPECT_LT(ctx.state_bytes(), want + state_bytes(c, false, 512, 256).work + (8u << 20));
}

// The default context: the trained one where it fits; a smaller cache type fits a longer one
// within the same streaming budget.
TEST(KvCacheTypes, DefaultContextGrowsWithASmallerCacheType) {
  ModelFootprint fp;
  fp.config.n_layer = 48;
  fp.config.n_head = 32;
  fp.config.n_head_kv = 4;
  fp.config.head_dim_k = fp.config.head_dim_v = 128;
  fp.config.n_embd = 2048;
  fp.config.n_vocab = 151936;
  fp.config.n_expert = 128;
  fp.config.n_expert_used = 8;
  fp.config.n_ff_exp = 768;
  fp.config.moe = true;
  fp.config.n_ctx_train = 40960;
  fp.dense_bytes = 1300ull << 20;
  fp.expert_bytes = 16ull << 30;
  fp.layer_expert_bytes.assign(48, (16ull << 30) / 48 / 128);
  MemoryFacts facts;
  facts.mem_available = 24ull << 30;
  MemoryRequest r;
  r.mem = 8ull << 30;
  r.type_k = r.type_v = Type::F16;
  const MemoryChoice f16 = choose_memory(fp, r, facts);
  r.type_k = r.type_v = Type::Q4_0;
  const MemoryChoice q4 = choose_memory(fp, r, facts);
  EXPECT_GT(f16.n_ctx, 4096);  // no longer capped at 4096
  EXPECT_GT(q4.n_ctx, f16.n_ctx);
  EXPECT_LE(q4.n_ctx, 40960);
  // Within the rule: the KV cache at most a quarter of what is left for it and the experts.
  EXPECT_NE(f16.why.find("f16"), std::string::npos) << f16.why;
  r.mem = 64ull << 30;  // room for everything: the trained context
  EXPECT_EQ(choose_memory(fp, r, facts).n_ctx, 40960);
}

}  // namespace
}  // namespace les
