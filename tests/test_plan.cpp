// `les plan` (src/les/plan): the speed model on hand-made calibrations and traces, the whole plan
// on the bundled model (memory split, calibration, predictions, JSON), and its errors.
#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "les/plan/plan.h"
#include "les/plan/speed_model.h"
#include "les/util/error.h"
#include "model_edit.h"
#include "test_util.h"

namespace les::plan {
namespace {

constexpr uint64_t MiB = uint64_t{1} << 20;

// A routing trace of `tokens` tokens over `layers` layers of `experts` experts, top-k, from a
// seeded generator: each token keeps each of the previous token's experts with probability
// `reuse`, draws the rest uniformly.
cache::RoutingTrace make_trace(int tokens, int layers, int experts, int k, double reuse, uint64_t seed) {
  cache::RoutingTrace t;
  t.n_tokens = tokens;
  t.n_layers = layers;
  t.top_k = k;
  t.n_experts = experts;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  auto next = [&] {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return x;
  };
  std::vector<std::vector<int32_t>> prev(static_cast<size_t>(layers));
  for (int i = 0; i < tokens; ++i) {
    for (int l = 0; l < layers; ++l) {
      std::vector<int32_t> ids;
      for (int32_t e : prev[static_cast<size_t>(l)]) {
        if (static_cast<double>(next() % 10000) / 10000.0 < reuse) ids.push_back(e);
      }
      while (static_cast<int>(ids.size()) < k) {
        const int32_t e = static_cast<int32_t>(next() % static_cast<uint64_t>(experts));
        if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
      }
      ids.resize(static_cast<size_t>(k));
      prev[static_cast<size_t>(l)] = ids;
      t.experts.insert(t.experts.end(), ids.begin(), ids.end());
    }
  }
  return t;
}

TEST(PlanSpeedModel, ReplayedMissesFallAsTheCacheGrows) {
  const cache::RoutingTrace t = make_trace(96, 8, 64, 4, 0.2, 3);
  double prev = 1e9;
  for (uint64_t slots : {4u, 32u, 128u, 256u, 384u, 512u}) {
    const double m = replay_misses_per_token(t, 0, slots);
    EXPECT_LE(m, prev + 1e-9) << slots;
    EXPECT_GE(m, 0.0);
    EXPECT_LE(m, 8.0 * 4.0);
    prev = m;
  }
  // Every expert fits: after the warm-up half, only experts never seen before miss.
  EXPECT_LT(replay_misses_per_token(t, 0, 512), replay_misses_per_token(t, 0, 64) / 4);
  // The smallest cache misses nearly every selection the previous token did not make.
  EXPECT_GT(replay_misses_per_token(t, 0, 4), 0.7 * 32);
}

TEST(PlanSpeedModel, FitsTheCalibrationAndMovesWithTheCache) {
  const cache::RoutingTrace t = make_trace(64, 8, 64, 4, 0.2, 5);
  const double expert = 1e6;  // bytes
  Calibration cal;
  cal.tokens = 63;
  cal.cache_slots = 128;
  // What the calibration measured: its replayed misses over the decoded tokens, read at 1 GB/s,
  // 4 ms of compute per token of which 2 ms hide reads.
  const double per_token = replay_misses_per_token(t, 0, 128);  // steady state, for the checks
  cal.bytes_read = static_cast<uint64_t>(per_token * expert * cal.tokens * 1.1);
  cal.io_bytes = cal.bytes_read;
  cal.io_busy_s = static_cast<double>(cal.bytes_read) / 1e9;
  const double t_io = static_cast<double>(cal.bytes_read) / cal.tokens / 1e9;
  const double t_c = 4e-3, hidden = 2e-3;
  cal.stall_s = std::max(0.0, t_io - hidden) * cal.tokens;
  cal.seconds = t_c * cal.tokens + cal.stall_s;
  cal.expert_compute_s = 1e-3 * cal.tokens;
  const SpeedModel m = fit_speed_model(cal, t, 0, expert, 512);
  EXPECT_NEAR(m.t_compute, t_c, 1e-9);
  EXPECT_NEAR(m.t_expert, 1e-3, 1e-9);
  EXPECT_NEAR(m.read_rate, 1e9, 1);
  ASSERT_GT(t_io, hidden) << "the calibration must stall for h to be fitted";
  EXPECT_NEAR(m.hide, hidden / t_c, 1e-6);
  EXPECT_GT(m.read_overhead, 0.5);
  // Larger caches: fewer reads, faster, never faster than compute alone; every expert: compute.
  double prev = 0;
  for (uint64_t slots : {64u, 128u, 256u, 512u}) {
    const SpeedAt s = predict(m, slots, 1000);
    EXPECT_GE(s.tok_s, prev - 1e-9) << slots;
    EXPECT_LE(s.tok_s, 1.0 / t_c + 1e-6);
    EXPECT_LE(s.steady_tok_s, 1.0 / t_c + 1e-6);
    prev = s.tok_s;
  }
  const SpeedAt all = predict(m, 512, 1000);
  const SpeedAt small = predict(m, 64, 1000);
  EXPECT_TRUE(small.disk_bound);
  EXPECT_GT(small.stall, 0.0);
  // The compute-bound cache: no stall there, a stall just below it.
  const uint64_t cb = compute_bound_slots(m);
  if (cb > 0) {
    EXPECT_EQ(predict(m, cb, 1).stall, 0.0);
    EXPECT_GT(predict(m, cb - std::max<uint64_t>(1, 512 / 200) - 1, 1).stall, 0.0);
    EXPECT_LE(all.stall, 0.0);
  }
  // Fewer bits per weight: fewer bytes per miss, less expert compute, faster at the same slots.
  EXPECT_GT(predict(m, 128, 1000, 0.75).tok_s, predict(m, 128, 1000).tok_s);
  // A short generation pays the cold cache: slower than a long one.
  EXPECT_LT(predict(m, 256, 16).tok_s, predict(m, 256, 100000).tok_s);
  EXPECT_NEAR(predict(m, 256, 100000).tok_s, predict(m, 256, 100000).steady_tok_s, 0.01 * predict(m, 256, 100000).steady_tok_s);
  // A calibration that decoded nothing is an error.
  Calibration none;
  EXPECT_THROW(fit_speed_model(none, t, 0, expert, 512), Error);
}

// The whole plan on the bundled model: at --mem 40M the experts stream; the calibration runs; the
// JSON carries decode_tok_s; the table's larger budgets are no slower.
TEST(Plan, BundledModelAtASmallBudget) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  PlanOptions o;
  o.model = test::tiny_moe_path();
  o.mem = 40 * MiB;
  o.quick_probe = true;
  o.calib_tokens = 32;
  const PlanReport r = make_plan(o);
  EXPECT_EQ(r.choice.mode, MemoryMode::stream);
  EXPECT_EQ(r.budget.total, 40 * MiB);
  EXPECT_EQ(r.budget.fixed() + r.budget.cache <= r.budget.total, true);
  EXPECT_GT(r.cache_share, 0.1);
  EXPECT_LT(r.cache_share, 0.6);
  ASSERT_TRUE(r.calibrated);
  EXPECT_EQ(r.calib_tokens, 31);
  EXPECT_GT(r.decode_tps, 0);
  EXPECT_GT(r.compute_only_tps, 0);
  EXPECT_LE(r.decode_tps, r.compute_only_tps * 1.0001);
  EXPECT_GT(r.hit_rate, 0.0);
  EXPECT_LT(r.hit_rate, 1.0);
  EXPECT_GT(r.prefill_tps, 0);
  EXPECT_TRUE(r.decode_bound == "disk" || r.decode_bound == "compute");
  ASSERT_EQ(r.table.size(), 3u);
  for (size_t i = 1; i < r.table.size(); ++i) {
    if (!r.table[i].note.empty() || !r.table[i - 1].note.empty()) continue;
    EXPECT_GE(r.table[i].at.tok_s, r.table[i - 1].at.tok_s * 0.999) << i;
  }
  // A cache of every expert misses only experts the replay meets for the first time.
  ASSERT_TRUE(r.table.front().note.empty() && r.table.back().note.empty());
  EXPECT_LT(r.table.back().at.misses_per_token, 0.5 * r.table.front().at.misses_per_token);
  EXPECT_LE(r.table.back().at.steady_tok_s, r.compute_only_tps * 1.0001);
  EXPECT_GE(r.table.back().at.steady_tok_s, r.table.front().at.steady_tok_s);
  EXPECT_GT(r.mixed_bpw, 0);
  EXPECT_GT(r.mixed.tok_s, 0);
  const nlohmann::json j = nlohmann::json::parse(plan_json(r));
  EXPECT_DOUBLE_EQ(j["decode_tok_s"].get<double>(), r.decode_tps);
  EXPECT_EQ(j["mode"], "streaming");
  EXPECT_EQ(j["memory"]["budget"].get<uint64_t>(), 40 * MiB);
  EXPECT_EQ(j["budgets"].size(), 3u);
  const std::string text = plan_text(r);
  for (const char* part : {"Memory", "expert cache", "Speed (calibration", "decode", "prefill", "What would raise it",
                           "File type", "--target-bpw 3.50"}) {
    EXPECT_NE(text.find(part), std::string::npos) << part << "\n" << text;
  }
}

TEST(Plan, ResidentAndDenseModelsAndErrors) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  LES_REQUIRE_FILE(test::tiny_draft_path());
  PlanOptions o;
  o.model = test::tiny_moe_path();
  o.calib_tokens = 16;
  MemoryFacts plenty;
  plenty.mem_available = uint64_t{8} << 30;
  o.facts = plenty;
  const PlanReport res = make_plan(o);
  EXPECT_EQ(res.choice.mode, MemoryMode::read);
  EXPECT_TRUE(res.calibrated);
  EXPECT_GT(res.decode_tps, 0);
  EXPECT_EQ(res.decode_bound, "compute");
  // A dense model that does not fit: mapped, and no speed promised.
  PlanOptions d = o;
  d.model = test::tiny_draft_path();
  MemoryFacts little;
  little.mem_available = 300 * MiB;
  d.facts = little;
  const PlanReport dense = make_plan(d);
  EXPECT_EQ(dense.choice.mode, MemoryMode::map);
  EXPECT_FALSE(dense.calibrated);
  EXPECT_NE(plan_text(dense).find("dense model"), std::string::npos) << plan_text(dense);
  // Errors, one clear line each.
  PlanOptions bad = o;
  bad.model = "/nonexistent/model.gguf";
  EXPECT_NE(test::error_of([&] { make_plan(bad); }).find("/nonexistent/model.gguf"), std::string::npos);
  bad = o;
  bad.mem = 10 * MiB;
  EXPECT_NE(test::error_of([&] { make_plan(bad); }).find("is too small: this model needs at least"), std::string::npos);
  bad = o;
  MemoryFacts cgroup;
  cgroup.mem_available = uint64_t{8} << 30;
  cgroup.cgroup_headroom = 150 * MiB;
  bad.facts = cgroup;
  EXPECT_NE(test::error_of([&] { make_plan(bad); }).find("(memory cgroup limit)"), std::string::npos);
  bad = o;
  bad.spec = "draft";
  EXPECT_NE(test::error_of([&] { make_plan(bad); }).find("--spec draft needs --draft FILE"), std::string::npos);
}

TEST(Plan, CommandWritesTheTableAndJson) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  test::ScopedDir d;
  std::string err;
  ASSERT_EQ(test::run_les("plan -m '" + test::tiny_moe_path() + "' --mem 40M --calib-tokens 16 --quick-probe --json '" +
                          d.file("p.json") + "'", &err), 0) << err;
  const auto j = nlohmann::json::parse(test::read_bytes(d.file("p.json")));
  EXPECT_GT(j["decode_tok_s"].get<double>(), 0);
  EXPECT_EQ(test::run_les("plan -m '" + test::tiny_moe_path() + "' --mem 5M", &err), 1);
  EXPECT_NE(err.find("too small"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("plan -m /nonexistent.gguf", &err), 1);
  EXPECT_NE(err.find("/nonexistent.gguf"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("plan -m '" + test::tiny_moe_path() + "' --bpw 0", &err), 1);
  EXPECT_NE(err.find("--bpw"), std::string::npos) << err;
}

}  // namespace
}  // namespace les::plan
