// Routing traces recorded by les (src/les/trace/routing_recorder.h, `les trace`): the files read
// back through the trace reader, their routing against the trained model's published trace (made
// with an independent torch forward pass of the F16 original), and the command's errors.
#include <algorithm>
#include <cmath>
#include <string>

#include <gtest/gtest.h>

#include "les/cache/trace.h"
#include "les/model/context.h"
#include "les/model/model.h"
#include "les/trace/routing_recorder.h"
#include "les/util/error.h"
#include "les/util/fp16.h"
#include "model_edit.h"
#include "test_util.h"

namespace les {
namespace {

// The trained model's published trace's tokens, evaluated by les in the same 4 windows of 512:
// the same experts at nearly every (token, layer) (the bundled file is the Q4_K_M conversion of the
// F16 weights the trace was recorded from; 14% of its (token, layer) pairs are near-ties).
TEST(RoutingTrace, RecordsTheTrainedModelsPublishedRouting) {
  const std::string dir = test::trained_data();
  LES_REQUIRE_FILE(dir + "/tiny-moe-q3m.routing-tokens.npy");
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const cache::NpyArray tok = cache::load_npy(dir + "/tiny-moe-q3m.routing-tokens.npy");
  const cache::RoutingTrace want = cache::load_routing_trace(dir + "/tiny-moe-q3m.routing-experts.npy");
  auto m = Model::load(test::tiny_moe_path());
  Context ctx(*m, ContextParams{.n_ctx = 512, .n_threads = 2, .n_batch = 512});
  RoutingRecorder rec(m->config(), true);
  rec.attach(ctx);
  std::vector<int32_t> ids(tok.count());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(tok.get_i64(i));
  for (int w = 0; w < 4; ++w) {
    const std::span<const int32_t> win(ids.data() + w * 512, 512);
    ctx.rollback(0);
    rec.start_sequence();
    rec.add_tokens(win);
    ctx.eval(win, false);
  }
  test::ScopedDir d;
  const std::string prefix = d.file("t");
  rec.save(prefix);
  const cache::RoutingTrace got = cache::load_routing_trace(prefix + ".routing-experts.npy", prefix + ".routing-probs.npy",
                                                            prefix + ".sequence-starts.npy", 64);
  ASSERT_EQ(got.n_tokens, 2048);
  ASSERT_EQ(got.n_layers, 8);
  ASSERT_EQ(got.top_k, 4);
  EXPECT_EQ(got.starts, (std::vector<int32_t>{0, 512, 1024, 1536}));
  EXPECT_EQ(cache::load_npy(prefix + ".routing-tokens.npy").get_i64(700), ids[700]);
  // The probabilities sum to 1 and the selected experts are the most probable ones.
  uint64_t same_set = 0, same_ids = 0, rows = 0;
  for (int t = 0; t < 2048; ++t) {
    for (int l = 0; l < 8; ++l, ++rows) {
      const float* p = got.router_probs(t, l);
      double sum = 0;
      for (int e = 0; e < 64; ++e) sum += p[e];
      ASSERT_NEAR(sum, 1.0, 0.02);
      const int32_t* g = got.selected(t, l);
      for (int j = 1; j < 4; ++j) ASSERT_GE(p[g[j - 1]], p[g[j]]) << "router order";
      std::vector<int32_t> a(g, g + 4), b(want.selected(t, l), want.selected(t, l) + 4);
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      same_set += a == b;
      std::vector<int32_t> both;
      std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
      same_ids += both.size();
    }
  }
  const double set_share = static_cast<double>(same_set) / static_cast<double>(rows);
  const double id_share = static_cast<double>(same_ids) / static_cast<double>(4 * rows);
  std::printf("les on the bundled Q4_K_M file vs the published (torch, F16) trace: %.4f of (token, layer) sets equal, "
              "%.4f of the experts\n", set_share, id_share);
  EXPECT_GT(set_share, 0.88);  // measured 0.9175
  EXPECT_GT(id_share, 0.96);  // measured 0.979 (random: 0.06)
  // The weights are the router's renormalised top-k: they sum to 1 for this model.
  const cache::NpyArray wts = cache::load_npy(prefix + ".routing-weights.npy");
  ASSERT_EQ(wts.shape, (std::vector<size_t>{2048, 8, 4}));
  EXPECT_NEAR(wts.get_f64(0) + wts.get_f64(1) + wts.get_f64(2) + wts.get_f64(3), 1.0, 2e-3);
}

TEST(RoutingTrace, CommandWritesTheFilesAndRefusesBadInput) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  test::ScopedDir d;
  std::string err;
  ASSERT_EQ(test::run_les("trace -m '" + test::tiny_moe_path() + "' -f '" + test::tiny_val_text_path() + "' -c 128 --windows 3 -o '" +
                          d.file("x") + "'", &err), 0) << err;
  const cache::RoutingTrace tr = cache::load_routing_trace(d.file("x.routing-experts.npy"), "", d.file("x.sequence-starts.npy"));
  EXPECT_EQ(tr.n_tokens, 3 * 128);
  EXPECT_EQ(tr.starts, (std::vector<int32_t>{0, 128, 256}));
  EXPECT_FALSE(test::file_exists(d.file("x.routing-probs.npy")));
  // les run --trace-routing: the prompt (4 tokens) and the generated tokens but the last.
  ASSERT_EQ(test::run_les("run -m '" + test::tiny_moe_path() + "' -p 'And God said,' -n 8 --temp 0 --trace-routing '" +
                          d.file("r") + "'", &err), 0) << err;
  const cache::NpyArray rt = cache::load_npy(d.file("r.routing-tokens.npy"));
  ASSERT_EQ(rt.count(), 4u + 7u);
  EXPECT_EQ(rt.get_i64(0), 3036);
  EXPECT_EQ(rt.get_i64(4), 358);  // the first generated token (models/README.md)
  EXPECT_EQ(cache::load_routing_trace(d.file("r.routing-experts.npy")).n_tokens, 11);
  EXPECT_EQ(test::run_les("run -m '" + test::tiny_moe_path() + "' -p x -n 2 --spec ngram --trace-routing '" + d.file("s") + "'", &err), 1);
  EXPECT_NE(err.find("--trace-routing records plain decoding"), std::string::npos) << err;
  EXPECT_EQ(test::run_les("trace -m '" + test::tiny_moe_path() + "' -p 'too short' -o '" + d.file("y") + "'", &err), 1);
  EXPECT_NE(err.find("fewer than one window"), std::string::npos) << err;
  EXPECT_FALSE(test::file_exists(d.file("y.routing-experts.npy")));
  EXPECT_EQ(test::run_les("trace -m '" + test::tiny_draft_path() + "' -p 'x' -o '" + d.file("z") + "'", &err), 1);
  EXPECT_NE(err.find("mixture-of-experts"), std::string::npos) << err;
}

}  // namespace
}  // namespace les
