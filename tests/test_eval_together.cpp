// Context::eval_together: several sequences in one forward pass give each the logits, KV cache and
// recurrent state of evaluating it alone, bit for bit (batched serving's exactness).
#include <gtest/gtest.h>

#include <cstring>
#include <span>
#include <vector>

#include "greedy_hashes.h"
#include "les/model/context.h"
#include "les/sched/streaming_experts.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "test_util.h"

namespace les {
namespace {

// Prompts of different lengths: one longer than the n_batch of 16 (it spans passes).
std::vector<std::vector<int32_t>> prompts(int n_vocab) {
  std::vector<std::vector<int32_t>> p(3);
  for (int i = 0; i < 5; ++i) p[0].push_back((i * 131 + 7) % n_vocab);
  for (int i = 0; i < 23; ++i) p[1].push_back((i * 977 + 3) % n_vocab);
  for (int i = 0; i < 1; ++i) p[2].push_back(42 % n_vocab);
  return p;
}

// Greedy decoding of every prompt alone: the logits of each step, per sequence.
std::vector<std::vector<std::vector<float>>> alone(const Model& m, ExpertSource* src, const ContextParams& cp, int steps) {
  const int nv = m.config().n_vocab;
  std::vector<std::vector<std::vector<float>>> out;
  for (const auto& p : prompts(nv)) {
    Context ctx(m, cp, src);
    out.emplace_back();
    ctx.eval(p, false);
    for (int s = 0; s <= steps; ++s) {
      const float* lg = ctx.last_logits();
      out.back().emplace_back(lg, lg + nv);
      const int32_t next = static_cast<int32_t>(std::max_element(lg, lg + nv) - lg);
      if (s < steps) ctx.eval(std::span<const int32_t>(&next, 1), false);
    }
  }
  return out;
}

// The same sequences together: prompts in one step (with the leader's own sequence among them or
// not), then one token each per step; sequence 2 joins a step later, as a request arriving
// during the others' decoding does.
void expect_together_equals_alone(const Model& m, ExpertSource* src, const ContextParams& cp, bool leader_in_batch) {
  const int steps = 4, nv = m.config().n_vocab;
  const auto want = alone(m, src, cp, steps);
  const auto ps = prompts(nv);
  Context leader(m, cp, src);
  std::vector<std::unique_ptr<Context>> own;
  std::vector<Context*> ctx;
  for (size_t i = 0; i < ps.size(); ++i) {
    if (i == 0 && leader_in_batch) {
      ctx.push_back(&leader);
    } else {
      own.push_back(std::make_unique<Context>(m, cp, src));
      ctx.push_back(own.back().get());
    }
  }
  std::vector<int32_t> next(ps.size());
  std::vector<int> step(ps.size(), -1);  // logits compared so far
  for (int round = 0; round <= steps + 1; ++round) {
    std::vector<Context::SeqTokens> batch;
    for (size_t i = 0; i < ps.size(); ++i) {
      const bool joins = (i == 2) ? round == 1 : round == 0;
      if (joins) batch.push_back({ctx[i], ps[i]});
      else if (step[i] >= 0 && step[i] < steps) batch.push_back({ctx[i], std::span<const int32_t>(&next[i], 1)});
    }
    if (batch.empty()) break;
    leader.eval_together(batch);
    for (const auto& b : batch) {
      const size_t i = static_cast<size_t>(std::find(ctx.begin(), ctx.end(), b.ctx) - ctx.begin());
      ++step[i];
      const float* lg = ctx[i]->last_logits();
      ASSERT_EQ(0, std::memcmp(lg, want[i][static_cast<size_t>(step[i])].data(), sizeof(float) * static_cast<size_t>(nv)))
          << "sequence " << i << " step " << step[i];
      next[i] = static_cast<int32_t>(std::max_element(lg, lg + nv) - lg);
    }
  }
  for (size_t i = 0; i < ps.size(); ++i) {
    EXPECT_EQ(step[i], steps) << i;
    EXPECT_EQ(ctx[i]->n_past(), static_cast<int>(ps[i].size()) + steps) << i;
  }
}

TEST(EvalTogether, TrainedModelEqualsEachSequenceAlone) {
  auto m = Model::load(test::tiny_moe_path());
  for (Type t : {Type::F32, Type::Q8_0}) {
    for (bool leader_in : {true, false}) {
      SCOPED_TRACE(std::string(type_name(t)) + (leader_in ? " leader in the batch" : " separate leader"));
      expect_together_equals_alone(*m, nullptr, ContextParams{.n_ctx = 64, .n_threads = 2, .n_batch = 16, .type_k = t, .type_v = t},
                                   leader_in);
    }
  }
}

TEST(EvalTogether, StreamedExpertsEqualResident) {
  auto m = Model::load(test::tiny_moe_path(), LoadOptions{.map_experts = false});
  StreamingExperts ex(*m, test::stream_opts(*m, Schedule::lookahead, storage::IoMode::pread, 48));
  expect_together_equals_alone(*m, &ex, ContextParams{.n_ctx = 64, .n_threads = 2, .n_batch = 16}, true);
}

TEST(EvalTogether, RecurrentLayersKeepTheirStatePerSequence) {
  const std::string dir = test::temp_dir();
  synth::SynthSpec s = synth::shape_spec("qwen35-tiny");
  s.full_attn_interval = 2;
  s.seed = 5;
  const std::string path = dir + "/q35.gguf";
  synth::write_synth_model(s, path);
  auto m = Model::load(path);
  expect_together_equals_alone(*m, nullptr, ContextParams{.n_ctx = 64, .n_threads = 2, .n_batch = 16}, true);
  // Rolling a context back after a step together replays it alone: the same state.
  Context a(*m, ContextParams{.n_ctx = 64, .n_threads = 1}), b(*m, ContextParams{.n_ctx = 64, .n_threads = 1});
  const std::vector<int32_t> pa = {1, 2, 3, 4}, pb = {9, 8};
  a.eval_together(std::vector<Context::SeqTokens>{{&a, pa}, {&b, pb}});
  a.rollback(2);
  a.eval(std::vector<int32_t>{3, 4}, false);
  Context c(*m, ContextParams{.n_ctx = 64, .n_threads = 1});
  c.eval(pa, false);
  EXPECT_EQ(0, std::memcmp(a.last_logits(), c.last_logits(), sizeof(float) * static_cast<size_t>(m->config().n_vocab)));
  (void)std::system(("rm -rf '" + dir + "'").c_str());
}

TEST(EvalTogether, BadBatchesAreErrorsAndChangeNothing) {
  auto m = Model::load(test::tiny_moe_path());
  Context a(*m, ContextParams{.n_ctx = 8, .n_threads = 1}), b(*m, ContextParams{.n_ctx = 8, .n_threads = 1});
  const std::vector<int32_t> ok = {1, 2}, too_long(9, 3), bad = {1, 99999};
  EXPECT_THROW(a.eval_together(std::vector<Context::SeqTokens>{{&a, ok}, {&b, too_long}}), Error);
  EXPECT_THROW(a.eval_together(std::vector<Context::SeqTokens>{{&a, ok}, {&b, bad}}), Error);
  EXPECT_THROW(a.eval_together(std::vector<Context::SeqTokens>{{&a, ok}, {&a, ok}}), Error);
  EXPECT_THROW(a.eval_together(std::vector<Context::SeqTokens>{{&a, ok}, {&b, {}}}), Error);
  EXPECT_EQ(a.n_past(), 0);
  EXPECT_EQ(b.n_past(), 0);
  auto other = Model::load(test::tiny_moe_path());
  Context c(*other, ContextParams{.n_ctx = 8, .n_threads = 1});
  EXPECT_THROW(a.eval_together(std::vector<Context::SeqTokens>{{&c, ok}}), Error);
}

}  // namespace
}  // namespace les
