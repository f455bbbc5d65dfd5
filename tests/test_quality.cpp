// Quality measurement (src/les/quality): per-token KL divergence and NLL against direct formulas,
// summary statistics on known data, window evaluation against a fresh context, llama.cpp's
// log-probability file (round trip, quantization error, corrupt files), and on the trained model
// the README's perplexity figure and the KLD of a q4_K copy.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "les/convert/quantize_model.h"
#include "les/model/context.h"
#include "les/model/model.h"
#include "les/quality/kld_summary.h"
#include "les/quality/logprob_file.h"
#include "les/quality/measure.h"
#include "les/quality/perplexity_stats.h"
#include "les/quality/token_compare.h"
#include "les/quality/vocab_check.h"
#include "les/quality/window_eval.h"
#include "les/synth/synth.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"
#include "test_util.h"

using namespace les;
using namespace les::quality;
using les::test::file_exists;
using les::test::read_bytes;

namespace {

struct TempDir {
  std::string path = les::test::temp_dir();
  ~TempDir() {
    const std::string cmd = "rm -rf '" + path + "'";
    (void)std::system(cmd.c_str());
  }
  std::string file(const std::string& name) const { return path + "/" + name; }
};

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const les::Error& e) {
    return e.what();
  }
  return "";
}

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<float> random_logits(int n, float spread, std::mt19937& rng) {
  std::normal_distribution<float> d(0.0f, spread);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<int32_t> random_tokens(size_t n, int n_vocab, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int32_t> d(0, n_vocab - 1);
  std::vector<int32_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

// Direct formula in long double: KL(p || q), -log q(tok).
struct Ref {
  long double kld, nll_test, nll_base;
};
Ref reference(const std::vector<float>& b, const std::vector<float>& t, int32_t tok) {
  auto log_softmax = [](const std::vector<float>& x) {
    long double s = 0;
    for (float v : x) s += std::exp(static_cast<long double>(v));
    std::vector<long double> out;
    for (float v : x) out.push_back(static_cast<long double>(v) - std::log(s));
    return out;
  };
  const auto lb = log_softmax(b), lt = log_softmax(t);
  long double k = 0;
  for (size_t i = 0; i < b.size(); ++i) k += std::exp(lb[i]) * (lb[i] - lt[i]);
  return {k, -lt[static_cast<size_t>(tok)], -lb[static_cast<size_t>(tok)]};
}

std::string synth_model(const TempDir& d, const std::string& name, const std::string& shape = "tiny",
                        int n_vocab = 0, uint64_t seed = 1) {
  synth::SynthSpec s = synth::shape_spec(shape);
  if (n_vocab > 0) s.n_vocab = n_vocab;
  s.seed = seed;
  const std::string p = d.file(name);
  synth::write_synth_model(s, p);
  return p;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Per-token comparison

TEST(QualityCompare, IdenticalLogitsGiveExactlyZero) {
  std::mt19937 rng(11);
  for (int n : {1, 2, 7, 1000, 8000}) {
    const auto x = random_logits(n, 4.0f, rng);
    const int32_t tok = n / 2;
    const TokenCompare c = compare_logits(x.data(), x.data(), n, tok);
    EXPECT_EQ(c.kld, 0.0) << n;
    EXPECT_TRUE(c.same_top1);
    EXPECT_EQ(c.nll_test, c.nll_base);
    EXPECT_NEAR(c.nll_test, static_cast<double>(reference(x, x, tok).nll_test), 1e-9);
  }
}

TEST(QualityCompare, MatchesDirectFormula) {
  std::mt19937 rng(12);
  int differing_top = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int n = 3 + trial * 97;
    const float spread = 0.5f + static_cast<float>(trial % 5);
    const auto b = random_logits(n, spread, rng);
    auto t = b;
    const auto noise = random_logits(n, 0.05f * static_cast<float>(1 + trial % 7), rng);
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] += noise[static_cast<size_t>(i)];
    const int32_t tok = static_cast<int32_t>(rng() % static_cast<uint32_t>(n));
    const TokenCompare c = compare_logits(b.data(), t.data(), n, tok);
    const Ref r = reference(b, t, tok);
    EXPECT_GT(c.kld, 0.0);
    EXPECT_NEAR(c.kld, static_cast<double>(r.kld), 1e-12 + 1e-9 * static_cast<double>(r.kld)) << trial;
    EXPECT_NEAR(c.nll_test, static_cast<double>(r.nll_test), 1e-10);
    EXPECT_NEAR(c.nll_base, static_cast<double>(r.nll_base), 1e-10);
    const bool same = std::max_element(b.begin(), b.end()) - b.begin() == std::max_element(t.begin(), t.end()) - t.begin();
    EXPECT_EQ(c.same_top1, same);
    differing_top += same ? 0 : 1;
  }
  EXPECT_GT(differing_top, 0);  // the data exercise both outcomes of same_top1
  EXPECT_LT(differing_top, 40);
}

TEST(QualityCompare, ShiftInvariant) {
  std::mt19937 rng(13);
  // Logits on a 1/64 grid in [-8, 8]: adding 32 is exact in float, so only the softmax's own
  // rounding can differ.
  const int n = 500;
  std::vector<float> b(n), t(n);
  std::uniform_int_distribution<int> g(-512, 512);
  for (int i = 0; i < n; ++i) {
    b[static_cast<size_t>(i)] = static_cast<float>(g(rng)) / 64.0f;
    t[static_cast<size_t>(i)] = static_cast<float>(g(rng)) / 64.0f;
  }
  const TokenCompare c0 = compare_logits(b.data(), t.data(), n, 17);
  auto bs = b, ts = t;
  for (auto& x : bs) x += 32.0f;
  for (auto& x : ts) x -= 16.0f;
  const TokenCompare c1 = compare_logits(bs.data(), ts.data(), n, 17);
  EXPECT_GT(c0.kld, 0.1);
  EXPECT_NEAR(c1.kld, c0.kld, 1e-12);
  EXPECT_NEAR(c1.nll_test, c0.nll_test, 1e-12);
  EXPECT_NEAR(c1.nll_base, c0.nll_base, 1e-12);
  EXPECT_EQ(c1.same_top1, c0.same_top1);
}

TEST(QualityCompare, TwoClassKnownCase) {
  // base p = (1/4, 3/4), test q = (1/2, 1/2).
  const float base[2] = {0.0f, static_cast<float>(std::log(3.0))};
  const float test[2] = {5.0f, 5.0f};
  const TokenCompare c = compare_logits(base, test, 2, 1);
  const double kl_pq = 0.25 * std::log(0.25 / 0.5) + 0.75 * std::log(0.75 / 0.5);  // 0.1308120
  const double kl_qp = 0.5 * std::log(0.5 / 0.25) + 0.5 * std::log(0.5 / 0.75);    // 0.1438410
  EXPECT_NEAR(c.kld, kl_pq, 1e-7);  // log(3) rounded to float moves p by ~1e-8
  EXPECT_NEAR(c.nll_test, std::log(2.0), 1e-12);
  EXPECT_NEAR(c.nll_base, -std::log(0.75), 1e-7);
  EXPECT_FALSE(c.same_top1);  // base argmax 1; test tie -> lowest index 0
  const TokenCompare r = compare_logits(test, base, 2, 0);
  EXPECT_NEAR(r.kld, kl_qp, 1e-7);  // KL is not symmetric: the direction matters
  EXPECT_NEAR(r.nll_base, std::log(2.0), 1e-12);
  EXPECT_NEAR(r.nll_test, -std::log(0.25), 1e-7);
}

// ---------------------------------------------------------------------------------------------
// Summaries

TEST(QualityKld, SummaryPercentilesOnKnownData) {
  std::vector<double> v(101);
  std::iota(v.begin(), v.end(), 0.0);
  std::mt19937 rng(3);
  std::shuffle(v.begin(), v.end(), rng);
  const KldSummary s = summarize_kld(v, 80);
  EXPECT_EQ(s.count, 101u);
  EXPECT_DOUBLE_EQ(s.mean, 50.0);
  double ss = 0;
  for (double x : v) ss += (x - 50.0) * (x - 50.0);
  EXPECT_NEAR(s.mean_se, std::sqrt(ss / 100.0) / std::sqrt(101.0), 1e-12);
  EXPECT_DOUBLE_EQ(s.min, 0.0);
  EXPECT_DOUBLE_EQ(s.median, 50.0);
  EXPECT_DOUBLE_EQ(s.p90, 90.0);
  EXPECT_DOUBLE_EQ(s.p95, 95.0);
  EXPECT_DOUBLE_EQ(s.p99, 99.0);
  EXPECT_NEAR(s.p999, 99.9, 1e-9);
  EXPECT_DOUBLE_EQ(s.max, 100.0);
  EXPECT_DOUBLE_EQ(s.same_top1, 80.0 / 101.0);
  EXPECT_NEAR(s.same_top1_se, std::sqrt(80.0 / 101 * 21.0 / 101 / 100), 1e-12);

  // Interpolation between neighbours: {1, 2, 4, 8}: q at index q*3.
  const std::vector<double> w = {8, 1, 4, 2};
  const KldSummary t = summarize_kld(w, 3);
  EXPECT_DOUBLE_EQ(t.median, 3.0);          // index 1.5
  EXPECT_NEAR(t.p90, 4.0 + 0.7 * 4.0, 1e-12);  // index 2.7
  EXPECT_NEAR(t.p99, 4.0 + 0.97 * 4.0, 1e-12);
  EXPECT_DOUBLE_EQ(t.max, 8.0);
  EXPECT_DOUBLE_EQ(t.mean, 3.75);
  EXPECT_DOUBLE_EQ(t.same_top1, 0.75);

  // The TokenCompare overload counts same_top1 itself.
  std::vector<TokenCompare> tc;
  for (size_t i = 0; i < w.size(); ++i) tc.push_back({w[i], i != 2, 0, 0});
  const KldSummary u = summarize_kld(tc);
  EXPECT_DOUBLE_EQ(u.p90, t.p90);
  EXPECT_DOUBLE_EQ(u.same_top1, 0.75);

  EXPECT_EQ(summarize_kld(std::vector<double>{}, 0).count, 0u);
  const KldSummary one = summarize_kld(std::vector<double>{0.5}, 1);
  EXPECT_DOUBLE_EQ(one.median, 0.5);
  EXPECT_DOUBLE_EQ(one.mean_se, 0.0);
}

TEST(QualityPerplexity, AccumulatorOnKnownData) {
  for (double offset : {0.0, 100.0}) {  // a large common offset must not cost variance accuracy
    PerplexityAccumulator a;
    const double nll[] = {1, 2, 3, 4};
    for (int i = 0; i < 4; ++i) a.add(offset + nll[i], i % 2 == 0);
    const PerplexitySummary s = a.summary();
    EXPECT_EQ(s.count, 4u);
    EXPECT_NEAR(s.mean_nll, offset + 2.5, 1e-12);
    EXPECT_NEAR(s.mean_nll_se, std::sqrt((5.0 / 3.0) / 4.0), 1e-9);
    EXPECT_NEAR(s.ppl, std::exp(offset + 2.5), std::exp(offset + 2.5) * 1e-12);
    EXPECT_NEAR(s.ppl_se, s.ppl * s.mean_nll_se, s.ppl * 1e-12);
    EXPECT_DOUBLE_EQ(s.top1, 0.5);
  }
  EXPECT_EQ(PerplexityAccumulator().summary().count, 0u);
}

// ---------------------------------------------------------------------------------------------
// llama.cpp's log-probability records and files

TEST(QualityLogprob, PackedRecordsHoldLogProbsToHalfAStep) {
  std::mt19937 rng(21);
  for (int n : {1, 5, 64, 8000}) {
    for (float spread : {0.0f, 1.0f, 6.0f}) {  // 6: many logits more than 16 below the max (clamped)
      const auto x = random_logits(n, spread, rng);
      std::vector<uint16_t> rec(static_cast<size_t>(logprob_record_u16(n)), 0xFFFF);
      pack_log_probs(x.data(), n, rec.data());
      float scale;
      std::memcpy(&scale, rec.data(), 4);
      const float mx = *std::max_element(x.begin(), x.end());
      long double s = 0;
      for (float v : x) s += std::exp(static_cast<long double>(v) - mx);
      const double lse = mx + static_cast<double>(std::log(s));
      EXPECT_LE(scale, 16.0f / 65535.0f * 1.0001f);
      int clamped = 0;
      for (int i = 0; i < n; ++i) {
        const double exact = static_cast<double>(x[static_cast<size_t>(i)]) - lse;
        const double got = unpack_log_prob(rec.data(), i);
        if (x[static_cast<size_t>(i)] > mx - 16.0f) {
          EXPECT_NEAR(got, exact, scale / 2 + 2e-6) << n << " " << i;
        } else {
          ++clamped;
          EXPECT_NEAR(got, -16.0 - (lse - mx), 1e-5);  // clamped: read as max - 16
          EXPECT_GT(got, exact);
        }
      }
      if (spread == 6.0f && n >= 64) {
        EXPECT_GT(clamped, 0);
      }
      EXPECT_EQ(packed_argmax(rec.data(), n), argmax(x.data(), n));
      if (n % 2) {
        EXPECT_EQ(rec[static_cast<size_t>(4 + n)], 0) << "padding";
      }
    }
  }
}

// The KLD from a packed base differs from the exact one only by the record's rounding (and the
// dropped log p <= -16 terms); measured here on close distributions as quantized models give.
TEST(QualityLogprob, ComparePackedIsCloseToExact) {
  std::mt19937 rng(22);
  double max_abs = 0, max_rel = 0;
  int unclamped = 0;
  for (int trial = 0; trial < 30; ++trial) {
    const int n = 8000;
    const auto b = random_logits(n, 2.0f + static_cast<float>(trial % 3), rng);
    auto t = b;
    const auto noise = random_logits(n, 0.1f, rng);
    for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] += noise[static_cast<size_t>(i)];
    std::vector<uint16_t> rec(static_cast<size_t>(logprob_record_u16(n)));
    pack_log_probs(b.data(), n, rec.data());
    const int32_t tok = static_cast<int32_t>(rng() % n);
    const TokenCompare exact = compare_logits(b.data(), t.data(), n, tok);
    const TokenCompare packed = compare_packed(rec.data(), t.data(), n, tok);
    max_abs = std::max(max_abs, std::fabs(packed.kld - exact.kld));
    max_rel = std::max(max_rel, std::fabs(packed.kld - exact.kld) / exact.kld);
    EXPECT_EQ(packed.nll_test, exact.nll_test);
    if (exact.nll_base < 16.0) {  // log p > -16 >= max log p - 16: not clamped
      EXPECT_NEAR(packed.nll_base, exact.nll_base, 16.0 / 65535 / 2 + 1e-5);
      ++unclamped;
    } else {
      EXPECT_LT(packed.nll_base, exact.nll_base + 16.0 / 65535 / 2 + 1e-5);  // clamped ones read as more likely
    }
    EXPECT_EQ(packed.same_top1, exact.same_top1);
  }
  EXPECT_LT(max_abs, 1e-4) << max_abs;
  EXPECT_LT(max_rel, 0.02) << max_rel;
  EXPECT_GT(unclamped, 5);
}

TEST(QualityLogprob, FileRoundTripAndCorruptFiles) {
  TempDir d;
  const int n_ctx = 8, n_vocab = 5, n_chunk = 2;  // odd vocabulary: one padding uint16 per record
  const int P = logprob_positions(n_ctx);
  ASSERT_EQ(P, 3);
  ASSERT_EQ(logprob_first(n_ctx), 5);
  const std::vector<int32_t> tokens = {0, 1, 2, 3, 4, 0, 1, 2, 4, 4, 3, 3, 2, 2, 1, 0};
  std::mt19937 rng(31);
  std::vector<std::vector<uint16_t>> windows;
  const std::string path = d.file("base.kld");
  {
    LogprobFileWriter w(path, n_ctx, n_vocab, n_chunk, tokens);
    for (int c = 0; c < n_chunk; ++c) {
      std::vector<uint16_t> recs(static_cast<size_t>(P * logprob_record_u16(n_vocab)));
      for (int k = 0; k < P; ++k) {
        const auto x = random_logits(n_vocab, 3.0f, rng);
        pack_log_probs(x.data(), n_vocab, recs.data() + k * logprob_record_u16(n_vocab));
      }
      w.add_window(recs);
      windows.push_back(recs);
    }
    EXPECT_FALSE(file_exists(path)) << "visible before finish()";
    w.finish();
  }
  const std::vector<uint8_t> good = read_bytes(path);
  ASSERT_EQ(good.size(), 8u + 12u + 4u * 16u + 2u * 3u * 10u * 2u);
  {
    const LogprobFile f = LogprobFile::open(path);
    EXPECT_EQ(f.n_ctx(), n_ctx);
    EXPECT_EQ(f.n_vocab(), n_vocab);
    EXPECT_EQ(f.n_chunk(), n_chunk);
    EXPECT_EQ(f.first(), 5);
    EXPECT_EQ(std::vector<int32_t>(f.tokens().begin(), f.tokens().end()), tokens);
    const WindowOptions o = f.window_options();
    EXPECT_EQ(o.n_ctx, n_ctx);
    EXPECT_EQ(o.first, 5);
    for (int c = 0; c < n_chunk; ++c) {
      for (int k = 0; k < P; ++k) {
        const size_t R = static_cast<size_t>(logprob_record_u16(n_vocab));
        EXPECT_EQ(std::memcmp(f.record(c, k), windows[static_cast<size_t>(c)].data() + k * R, R * 2), 0);
      }
    }
  }

  auto corrupt = [&](const std::function<void(std::vector<uint8_t>&)>& edit) {
    std::vector<uint8_t> b = good;
    edit(b);
    const std::string p = d.file("bad.kld");
    write_bytes(p, b);
    return error_of([&] {
      const LogprobFile f = LogprobFile::open(p);
      for (int c = 0; c < f.n_chunk(); ++c) {
        for (int k = 0; k < f.positions(); ++k) f.record(c, k);
      }
    });
  };
  auto set_i32 = [](std::vector<uint8_t>& b, size_t off, int32_t v) { std::memcpy(b.data() + off, &v, 4); };
  EXPECT_NE(error_of([&] { LogprobFile::open(d.file("missing.kld")); }).find("missing.kld"), std::string::npos);
  EXPECT_NE(corrupt([](auto& b) { b[0] = 'X'; }).find("not a log-probability file"), std::string::npos);
  EXPECT_NE(corrupt([](auto& b) { b.resize(12); }).find("truncated"), std::string::npos);
  std::string e = corrupt([](auto& b) { b.pop_back(); });
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find(std::to_string(good.size())), std::string::npos) << e;  // names the expected size
  EXPECT_NE(corrupt([](auto& b) { b.push_back(0); }).find("trailing bytes"), std::string::npos);
  EXPECT_NE(corrupt([&](auto& b) { set_i32(b, 8, 2); }).find("n_ctx"), std::string::npos);
  EXPECT_NE(corrupt([&](auto& b) { set_i32(b, 12, 0); }).find("n_vocab"), std::string::npos);
  EXPECT_NE(corrupt([&](auto& b) { set_i32(b, 12, 7); }).find("truncated"), std::string::npos);  // records of 12 uint16
  EXPECT_NE(corrupt([&](auto& b) { set_i32(b, 16, 3); }).find("truncated"), std::string::npos);
  EXPECT_NE(corrupt([&](auto& b) { set_i32(b, 16, 0); }).find("windows"), std::string::npos);
  e = corrupt([&](auto& b) { set_i32(b, 20 + 4 * 9, 5); });
  EXPECT_NE(e.find("token 5 at index 9"), std::string::npos) << e;
  const size_t rec1_1 = 20 + 4 * 16 + (3 + 1) * 20;  // window 1, position k = 1
  e = corrupt([&](auto& b) {
    const float nan = std::nanf("");
    std::memcpy(b.data() + rec1_1, &nan, 4);
  });
  EXPECT_NE(e.find("corrupt record for window 1, position 5"), std::string::npos) << e;
  e = corrupt([&](auto& b) {
    const float big = 1.0f;  // a scale no record can have (> 16/65535)
    std::memcpy(b.data() + rec1_1, &big, 4);
  });
  EXPECT_NE(e.find("corrupt record"), std::string::npos) << e;

  // A writer that is not finished leaves neither the file nor its temp file.
  const std::string p2 = d.file("unfinished.kld");
  {
    LogprobFileWriter w(p2, n_ctx, n_vocab, n_chunk, tokens);
    w.add_window(windows[0]);
    EXPECT_NE(error_of([&] { w.finish(); }).find("1 of 2 windows"), std::string::npos);
  }
  EXPECT_FALSE(file_exists(p2));
  size_t entries = 0;
  for (const char* name : {"base.kld", "bad.kld"}) entries += file_exists(d.file(name)) ? 1 : 0;
  EXPECT_EQ(entries, 2u);
  const std::string ls = "ls '" + d.path + "' | grep -c tmp > /dev/null";
  EXPECT_NE(std::system(ls.c_str()), 0) << "a temp file was left behind";
  EXPECT_NE(error_of([&] { LogprobFileWriter(p2, n_ctx, n_vocab, n_chunk, std::vector<int32_t>(15)); }).find("15 tokens"),
            std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Windows on synthetic models

namespace {

// Every scored position's logits equal those of a fresh context that evaluated the window alone.
void check_windows_match_fresh_context(const std::string& path, int n_ctx, int first) {
  auto m = Model::load(path);
  const int nv = m->config().n_vocab;
  const auto tokens = random_tokens(static_cast<size_t>(4 * n_ctx + n_ctx / 2), nv, 7);
  WindowOptions o;
  o.n_ctx = n_ctx;
  o.first = first;
  o.n_threads = 2;
  std::vector<std::vector<float>> fresh;  // [window][n_ctx * nv]
  for (int w = 0; w < 4; ++w) {
    ContextParams cp;
    cp.n_ctx = n_ctx;
    cp.n_batch = 7;  // another batch size: logits do not depend on it
    Context ctx(*m, cp);
    ctx.eval(std::span<const int32_t>(tokens).subspan(static_cast<size_t>(w * n_ctx), static_cast<size_t>(n_ctx)), true);
    std::vector<float> all;
    for (int j = 0; j < n_ctx; ++j) all.insert(all.end(), ctx.logits(j), ctx.logits(j) + nv);
    fresh.push_back(std::move(all));
  }
  int calls = 0, last_w = 0, last_j = first - 2, progress_calls = 0;
  eval_windows(
      *m, tokens, o,
      [&](int w, int j, int32_t next, const float* logits) {
        ++calls;
        EXPECT_TRUE(w > last_w || (w == last_w && j == last_j + 1)) << w << " " << j;
        if (w > last_w) {
          EXPECT_EQ(j, first - 1);
        }
        last_w = w;
        last_j = j;
        EXPECT_GE(j, first - 1);
        EXPECT_LE(j, n_ctx - 2);
        EXPECT_EQ(next, tokens[static_cast<size_t>(w * n_ctx + j + 1)]);
        EXPECT_EQ(std::memcmp(logits, fresh[static_cast<size_t>(w)].data() + static_cast<size_t>(j) * nv, sizeof(float) * nv), 0)
            << "window " << w << " position " << j;
      },
      [&](int done, int total) {
        ++progress_calls;
        EXPECT_EQ(done, progress_calls);
        EXPECT_EQ(total, 4);
      });
  EXPECT_EQ(calls, 4 * (n_ctx - first));
  EXPECT_EQ(progress_calls, 4);
}

}  // namespace

TEST(QualityWindows, MatchFreshContextQwen3Moe) {
  TempDir d;
  check_windows_match_fresh_context(synth_model(d, "tiny.gguf"), 24, 5);
}

TEST(QualityWindows, MatchFreshContextRecurrentLayers) {
  TempDir d;  // qwen35moe: DeltaNet state must be reset between windows as well as the KV cache
  check_windows_match_fresh_context(synth_model(d, "q35.gguf", "qwen35-tiny"), 20, 1);
}

TEST(QualityWindows, BosReplacesTheFirstTokenOnly) {
  TempDir d;
  auto m = Model::load(synth_model(d, "tiny.gguf"));
  const int nv = m->config().n_vocab;
  const auto tokens = random_tokens(40, nv, 8);
  WindowOptions o;
  o.n_ctx = 16;
  o.bos = 3;
  o.max_windows = 1;
  std::vector<int32_t> w0(tokens.begin(), tokens.begin() + 16);
  w0[0] = 3;
  Context ctx(*m, ContextParams{16, 1, 16});
  ctx.eval(w0, true);
  int calls = 0;
  eval_windows(*m, tokens, o, [&](int w, int j, int32_t next, const float* logits) {
    ++calls;
    EXPECT_EQ(w, 0);
    EXPECT_EQ(next, tokens[static_cast<size_t>(j + 1)]);
    EXPECT_EQ(std::memcmp(logits, ctx.logits(j), sizeof(float) * nv), 0);
  });
  EXPECT_EQ(calls, 15);
}

TEST(QualityWindows, OptionErrors) {
  WindowOptions o;
  o.n_ctx = 64;
  EXPECT_NE(error_of([&] { check_window_options(63, o); }).find("fewer than one window of 64"), std::string::npos);
  EXPECT_EQ(error_of([&] { check_window_options(64, o); }), "");
  o.first = 0;
  EXPECT_NE(error_of([&] { check_window_options(640, o); }).find("first scored token"), std::string::npos);
  o.first = 64;
  EXPECT_NE(error_of([&] { check_window_options(640, o); }).find("first scored token"), std::string::npos);
  o.first = 1;
  EXPECT_EQ(count_windows(64 * 5 + 63, o), 5);
  o.max_windows = 3;
  EXPECT_EQ(count_windows(64 * 5 + 63, o), 3);
}

// ---------------------------------------------------------------------------------------------
// Measurements on synthetic models

TEST(QualityMeasure, SelfKldIsZeroAndThreadsDoNotMatter) {
  TempDir d;
  auto m = Model::load(synth_model(d, "tiny.gguf"));
  const auto tokens = random_tokens(200, m->config().n_vocab, 9);
  WindowOptions o;
  o.n_ctx = 32;
  o.first = 3;
  const KldResult r = measure_kld(*m, *m, tokens, o);
  EXPECT_EQ(r.n_windows, 6);
  EXPECT_EQ(r.per_token.size(), 6u * 29u);
  EXPECT_EQ(r.kld.max, 0.0);
  EXPECT_EQ(r.kld.min, 0.0);
  EXPECT_EQ(r.kld.mean, 0.0);
  EXPECT_EQ(r.kld.same_top1, 1.0);
  EXPECT_EQ(r.ln_ppl_ratio, 0.0);
  EXPECT_EQ(r.test.mean_nll, r.base.mean_nll);
  const PerplexityResult p1 = measure_perplexity(*m, tokens, o);
  EXPECT_EQ(p1.ppl.count, r.test.count);
  EXPECT_DOUBLE_EQ(p1.ppl.mean_nll, r.test.mean_nll);
  EXPECT_EQ(p1.ppl.top1, r.test.top1);
  o.n_threads = 2;
  const PerplexityResult p2 = measure_perplexity(*m, tokens, o);
  EXPECT_EQ(p2.ppl.mean_nll, p1.ppl.mean_nll);  // bit-identical across thread counts
  EXPECT_EQ(p2.ppl.mean_nll_se, p1.ppl.mean_nll_se);
  EXPECT_GT(p1.ppl.ppl, 1.0);
  EXPECT_TRUE(std::isfinite(p1.ppl.ppl));
  EXPECT_DOUBLE_EQ(p1.ppl.ppl, std::exp(p1.ppl.mean_nll));
}

namespace {

// The KLD against a saved base file equals the KLD against the base model up to the file's
// rounding; returns the largest per-token difference.
double file_vs_direct(const Model& base, const Model& test, const std::vector<int32_t>& tokens, int n_ctx,
                      int max_windows, const std::string& file, KldResult* direct_out = nullptr) {
  WindowOptions o;
  o.n_ctx = n_ctx;
  o.first = logprob_first(n_ctx);
  o.max_windows = max_windows;
  o.n_threads = 2;
  const int n_win = count_windows(tokens.size(), o);
  {
    LogprobFileWriter w(file, n_ctx, base.config().n_vocab, n_win,
                        std::span<const int32_t>(tokens).first(static_cast<size_t>(n_win * n_ctx)));
    measure_perplexity(base, tokens, o, &w);
    w.finish();
  }
  const LogprobFile f = LogprobFile::open(file);
  WindowOptions fo = f.window_options();
  fo.n_threads = 2;
  const KldResult via_file = measure_kld(f, test, fo);
  const KldResult direct = measure_kld(base, test, tokens, o);
  EXPECT_EQ(via_file.per_token.size(), direct.per_token.size());
  double max_diff = 0;
  size_t same_top_disagree = 0;
  for (size_t i = 0; i < direct.per_token.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(via_file.per_token[i].kld - direct.per_token[i].kld));
    EXPECT_EQ(via_file.per_token[i].nll_test, direct.per_token[i].nll_test);
    // The file's NLL of the base: within half a step where log p > -16, else clamped (lower).
    const double nb_file = via_file.per_token[i].nll_base, nb = direct.per_token[i].nll_base;
    if (nb < 16.0) {
      EXPECT_NEAR(nb_file, nb, 16.0 / 65535 / 2 + 1e-5);
    } else {
      EXPECT_LT(nb_file, nb + 16.0 / 65535 / 2 + 1e-5);
    }
    same_top_disagree += via_file.per_token[i].same_top1 != direct.per_token[i].same_top1;
  }
  EXPECT_LE(same_top_disagree, direct.per_token.size() / 100 + 1);  // only near-ties may flip
  EXPECT_NEAR(via_file.kld.mean, direct.kld.mean, 0.01 * direct.kld.mean + 2e-5);
  EXPECT_EQ(via_file.test.mean_nll, direct.test.mean_nll);
  if (direct_out) *direct_out = direct;
  return max_diff;
}

}  // namespace

TEST(QualityMeasure, QuantizedCopyAndLogprobFileRoundTrip) {
  TempDir d;
  synth::SynthSpec s = synth::shape_spec("tiny");
  s.type = "f16";
  const std::string base_path = d.file("f16.gguf"), q_path = d.file("q4k.gguf");
  synth::write_synth_model(s, base_path);
  quantize_model(base_path, q_path, parse_quantize_plan("q4_K"));
  auto base = Model::load(base_path);
  auto q = Model::load(q_path);
  const auto tokens = random_tokens(6 * 64 + 10, base->config().n_vocab, 10);
  KldResult direct;
  const double max_diff = file_vs_direct(*base, *q, tokens, 64, 0, d.file("base.kld"), &direct);
  EXPECT_EQ(direct.n_windows, 6);
  EXPECT_GT(direct.kld.mean, 0.0);
  EXPECT_GT(direct.kld.min, -1e-12);
  EXPECT_LT(direct.kld.mean, 0.2);  // measured 0.049 (random weights are more sensitive than trained ones)
  EXPECT_LT(max_diff, 2e-4) << max_diff;
  EXPECT_GT(direct.kld.same_top1, 0.5);
  std::printf("synthetic f16 -> q4_K: mean KLD %.6f, same top-1 %.4f, largest |file - direct| per-token KLD %.2e\n",
              direct.kld.mean, direct.kld.same_top1, max_diff);
}

TEST(QualityMeasure, VocabularyMismatchesAreErrors) {
  TempDir d;
  auto a = Model::load(synth_model(d, "a.gguf"));
  auto b = Model::load(synth_model(d, "b.gguf", "tiny", 600));
  const auto tokens = random_tokens(100, 512, 1);
  WindowOptions o;
  o.n_ctx = 32;
  std::string e = error_of([&] { measure_kld(*a, *b, tokens, o); });
  EXPECT_NE(e.find("vocabulary of 512"), std::string::npos) << e;
  EXPECT_NE(e.find("600"), std::string::npos) << e;

  // A log-probability file made for another vocabulary, and one used with other windows.
  const std::string f = d.file("a.kld");
  o.first = logprob_first(32);
  {
    LogprobFileWriter w(f, 32, 512, 3, std::span<const int32_t>(tokens).first(96));
    measure_perplexity(*a, tokens, o, &w);
    w.finish();
  }
  const LogprobFile lf = LogprobFile::open(f);
  e = error_of([&] { measure_kld(lf, *b, lf.window_options()); });
  EXPECT_NE(e.find("vocabulary of 512"), std::string::npos) << e;
  WindowOptions other = lf.window_options();
  other.first = 1;
  e = error_of([&] { measure_kld(lf, *a, other); });
  EXPECT_NE(e.find("scored from token 17"), std::string::npos) << e;
  o.first = 1;
  LogprobFileWriter w2(d.file("x.kld"), 32, 512, 3, std::span<const int32_t>(tokens).first(96));
  e = error_of([&] { measure_perplexity(*a, tokens, o, &w2); });
  EXPECT_NE(e.find("first = 17"), std::string::npos) << e;
}

// ---------------------------------------------------------------------------------------------
// The trained model (models/tiny-moe-q4_k_m.gguf)

namespace {

std::vector<int32_t> val_tokens(const Model& m, const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  const Tokenizer tok(vocab_from_gguf(m.gguf()));
  return tok.encode(ss.str(), true, false);
}

}  // namespace

// llama.cpp's llama-perplexity on the bundled model (tests/data/trained/README.md has the command):
// PPL 72.9132 on tiny-moe-val.txt, 65985 tokens, 128 windows of 512, the second half of each window
// scored (tokens 257..511). About 20 s on 2 threads.
TEST(QualityTrained, ReproducesLlamaCppPerplexity) {
  const std::string model_path = les::test::tiny_moe_path();
  const std::string text = les::test::tiny_val_text_path();
  LES_REQUIRE_FILE(model_path);
  LES_REQUIRE_FILE(text);
  auto m = Model::load(model_path);
  const auto tokens = val_tokens(*m, text);
  ASSERT_EQ(tokens.size(), 65985u);
  WindowOptions o;
  o.n_ctx = 512;
  o.first = 257;
  o.n_threads = 2;
  const PerplexityResult r = measure_perplexity(*m, tokens, o);
  EXPECT_EQ(r.n_windows, 128);
  EXPECT_EQ(r.ppl.count, 128u * 255u);
  EXPECT_NEAR(r.ppl.ppl, 72.9132, 0.01);
  EXPECT_NEAR(r.ppl.mean_nll, std::log(72.9132), 1.5e-4);
}

// KLD of the model against itself and against a q4_K copy (les quantize), and the log-probability
// file round trip, on 4 windows of the validation text.
TEST(QualityTrained, KldAgainstQuantizedCopy) {
  const std::string model_path = les::test::tiny_moe_path();
  const std::string text = les::test::tiny_val_text_path();
  LES_REQUIRE_FILE(model_path);
  LES_REQUIRE_FILE(text);
  TempDir d;
  const std::string q_path = d.file("q4_K.gguf");
  QuantizePlan plan = parse_quantize_plan("q4_K");
  plan.n_threads = 2;
  quantize_model(model_path, q_path, plan);
  auto base = Model::load(model_path);
  auto q = Model::load(q_path);
  check_same_vocabulary(*base, *q);
  const auto tokens = val_tokens(*base, text);

  WindowOptions o;
  o.n_ctx = 512;
  o.max_windows = 2;
  o.n_threads = 2;
  const KldResult self = measure_kld(*base, *base, tokens, o);
  EXPECT_EQ(self.kld.max, 0.0);
  EXPECT_EQ(self.kld.same_top1, 1.0);

  KldResult direct;
  const double max_diff = file_vs_direct(*base, *q, tokens, 512, 4, d.file("base.kld"), &direct);
  EXPECT_EQ(direct.kld.count, 4u * 255u);
  // Measured: mean 0.0032 nats, same top-1 95% over 64 windows (les perplexity, docs/quality.md).
  EXPECT_GT(direct.kld.mean, 5e-4);
  EXPECT_LT(direct.kld.mean, 0.02);
  EXPECT_GT(direct.kld.same_top1, 0.85);
  EXPECT_GT(direct.ln_ppl_ratio, -0.01);
  EXPECT_LT(direct.ln_ppl_ratio, 0.03);
  EXPECT_LT(max_diff, 2e-4) << max_diff;
  std::printf("trained f16 -> q4_K, 4 windows: mean KLD %.6f, same top-1 %.4f, largest |file - direct| per-token KLD %.2e\n",
              direct.kld.mean, direct.kld.same_top1, max_diff);
}
