// Speculative decoding: the acceptance rule keeps the target's distribution (and a wrong rule is
// caught by the same test), greedy speculative output is bit-identical to plain decoding for every
// drafter, depth, schedule and cache size (also with a recurrent model's rollback), the depth
// controller switches speculation off where it does not pay, and bad options are clear errors.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "greedy_hashes.h"
#include "model_edit.h"
#include "les/convert/quantize_model.h"
#include "les/model/context.h"
#include "les/model/model.h"
#include "les/sched/streaming_experts.h"
#include "les/session/generate.h"
#include "les/spec/accept.h"
#include "les/spec/depth.h"
#include "les/spec/draft_model_drafter.h"
#include "les/spec/make_drafter.h"
#include "les/spec/mtp_drafter.h"
#include "les/spec/ngram_drafter.h"
#include "les/spec/oracle_drafter.h"
#include "les/spec/spec_report.h"
#include "les/synth/synth.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"
#include "test_util.h"

using namespace les;

namespace {

// ---- the acceptance rule, statistically ----

std::vector<TokenProb> normalised(std::vector<double> w) {
  double s = 0;
  for (double x : w) s += x;
  std::vector<TokenProb> d;
  for (size_t i = 0; i < w.size(); ++i) {
    if (w[i] > 0) d.push_back({static_cast<int32_t>(i), w[i] / s});
  }
  return d;
}

int32_t draw(const std::vector<TokenProb>& d, Rng& rng) {
  const double u = rng.uniform();
  double c = 0;
  for (const TokenProb& t : d) {
    c += t.p;
    if (u < c) return t.id;
  }
  return d.back().id;
}

using Rule = AcceptResult (*)(const std::vector<TokenProb>&, int32_t, const std::vector<TokenProb>&, Rng&);

// Wrong on purpose: accepts with min(1, p/q) but resamples from p instead of the residual.
AcceptResult resample_from_p(const std::vector<TokenProb>& p, int32_t d, const std::vector<TokenProb>& q, Rng& rng) {
  const double pd = prob_of(p, d), qd = q.empty() ? 1.0 : prob_of(q, d);
  if (rng.uniform() * qd < pd) return {true, d};
  return {false, draw(p, rng)};
}

// Pearson chi-square of the rule's output distribution against p over n trials (draft drawn from q).
double chi_square(Rule rule, const std::vector<TokenProb>& p, const std::vector<TokenProb>& q, int V, int n,
                  uint64_t seed) {
  Rng rng(seed);
  std::vector<double> count(static_cast<size_t>(V), 0);
  for (int i = 0; i < n; ++i) {
    const int32_t d = draw(q, rng);
    count[static_cast<size_t>(rule(p, d, q, rng).token)] += 1;
  }
  double chi = 0;
  for (int v = 0; v < V; ++v) {
    const double e = prob_of(p, v) * n;
    if (e == 0) {
      if (count[static_cast<size_t>(v)] > 0) return 1e9;  // a token p never emits
      continue;
    }
    chi += (count[static_cast<size_t>(v)] - e) * (count[static_cast<size_t>(v)] - e) / e;
  }
  return chi;
}

}  // namespace

TEST(SpecAccept, KeepsTheTargetDistributionAndCatchesAWrongRule) {
  // 6 tokens: chi-square with <= 5 degrees of freedom; 40 is beyond p = 1e-6.
  const int V = 6, N = 200000;
  Rng gen(99);
  int wrong_caught = 0, cases = 0;
  for (int c = 0; c < 12; ++c) {
    std::vector<double> wp(V), wq(V);
    for (int v = 0; v < V; ++v) {
      wp[static_cast<size_t>(v)] = gen.uniform() < 0.2 ? 0 : gen.uniform();
      wq[static_cast<size_t>(v)] = gen.uniform() < 0.2 ? 0 : gen.uniform() * 3;
    }
    wp[static_cast<size_t>(c % V)] += 0.05;  // never all zero
    wq[static_cast<size_t>((c + 1) % V)] += 0.05;
    const auto p = normalised(wp), q = normalised(wq);
    EXPECT_LT(chi_square(accept_or_resample, p, q, V, N, 1000 + static_cast<uint64_t>(c)), 40.0) << "case " << c;
    wrong_caught += chi_square(resample_from_p, p, q, V, N, 1000 + static_cast<uint64_t>(c)) > 40.0;
    ++cases;
  }
  EXPECT_EQ(wrong_caught, cases) << "the test must fail the wrong rule in every case";
}

TEST(SpecAccept, DeterministicDraftsAndGreedyTargets) {
  const auto p = normalised({0.1, 0.5, 0.0, 0.4});
  const std::vector<TokenProb> point;  // q = point mass on the draft
  for (int32_t d = 0; d < 4; ++d) {
    Rng rng(5);
    std::vector<double> count(4, 0);
    const int N = 100000;
    for (int i = 0; i < N; ++i) count[static_cast<size_t>(accept_or_resample(p, d, point, rng).token)] += 1;
    for (int v = 0; v < 4; ++v) EXPECT_NEAR(count[static_cast<size_t>(v)] / N, prob_of(p, v), 0.006) << "draft " << d;
  }
  // Greedy: p is a point mass; the draft is kept iff it is p's token, with no randomness used.
  const std::vector<TokenProb> greedy = {{7, 1.0}};
  Rng a(1), b(1);
  EXPECT_TRUE(accept_or_resample(greedy, 7, point, a).accepted);
  const AcceptResult r = accept_or_resample(greedy, 3, point, a);
  EXPECT_FALSE(r.accepted);
  EXPECT_EQ(r.token, 7);
  EXPECT_EQ(a.next(), b.next()) << "greedy acceptance consumed randomness";
}

// ---- the depth controller ----

TEST(SpecDepth, SwitchesOffWhereVerificationIsTooDearAndOnWhereItIsCheap) {
  auto run = [](double accept, double cost_per_extra) {
    DepthParams dp;
    dp.k_max = 6;
    DepthController c(dp);
    Rng rng(3);
    std::vector<int> chosen;
    for (int round = 0; round < 300; ++round) {
      const int k = c.choose();
      chosen.push_back(k);
      int acc = 0;
      while (acc < k && rng.uniform() < accept) ++acc;
      c.record_draft(k, 0.0);
      c.record_verify(k + 1, 1.0 + cost_per_extra * k);
      c.record_round(k, acc);
    }
    int zeros = 0, maxed = 0;
    for (size_t i = 200; i < chosen.size(); ++i) {
      zeros += chosen[i] == 0;
      maxed += chosen[i] == 6;
    }
    return std::make_pair(zeros, maxed);
  };
  // Streaming-like: each extra position costs a whole step's reads; acceptance 0.3 never pays.
  const auto off = run(0.3, 1.0);
  EXPECT_GE(off.first, 92) << "k = 0 should win in nearly every late round (probes excepted)";
  // Compute-bound: extra positions are nearly free and acceptance is high: draft deep.
  const auto on = run(0.9, 0.05);
  EXPECT_GE(on.second, 80);
  EXPECT_LE(on.first, 5) << "only the plain-step probes (one in 24 rounds)";
}

TEST(SpecDepth, ExploresTheShallowestDepthFirst) {
  // Where each extra position costs a whole step (experts streamed at a small cache share), the
  // first speculative round is k = 1, and a full-depth round (7 positions: 7 steps' reads) never
  // comes before the probes; where extra positions are cheap, the full depth follows at once.
  auto first_rounds = [](double cost_per_extra, int n) {
    DepthParams dp;
    dp.k_max = 6;
    DepthController c(dp);
    std::vector<int> chosen;
    for (int round = 0; round < n; ++round) {
      const int k = c.choose();
      chosen.push_back(k);
      c.record_draft(k, 0.0);
      c.record_verify(k + 1, 1.0 + cost_per_extra * k);
      c.record_round(k, k > 0 ? 1 : 0);  // the first draft token is accepted, no more
    }
    return chosen;
  };
  const std::vector<int> dear = first_rounds(1.0, 20);
  EXPECT_EQ(dear[0], 0) << "a plain step is measured first";
  EXPECT_EQ(dear[1], 1);
  for (size_t i = 2; i < dear.size(); ++i) EXPECT_EQ(dear[i], 0) << "round " << i;
  const std::vector<int> cheap = first_rounds(0.02, 4);
  EXPECT_EQ(cheap[1], 1);
  EXPECT_EQ(cheap[2], 6);
}

TEST(SpecDepth, ConfidenceTrimsABlock) {
  DepthParams dp;
  dp.k_max = 6;
  DepthController c(dp);
  for (int n = 1; n <= 7; ++n) c.record_verify(n, 1.0 + 0.2 * (n - 1));
  EXPECT_EQ(c.trim(6, 0.0, {0.99f, 0.98f, 0.97f, 0.96f, 0.95f, 0.94f}), 6);
  EXPECT_EQ(c.trim(6, 0.0, {0.9f, 0.05f, 0.05f, 0.05f, 0.05f, 0.05f}), 1);
  EXPECT_EQ(c.trim(6, 0.0, {0.01f, 0.9f, 0.9f, 0.9f, 0.9f, 0.9f}), 0);
}

// ---- greedy speculative output equals plain output ----

namespace {

struct GenRun {
  std::vector<int32_t> tokens;
  uint64_t hash = 0;
  SpecStats spec;
};

GenRun generate_run(Context& ctx, const Tokenizer& tok, const std::vector<int32_t>& prompt, int n, Drafter* d, int k_max,
                 bool adaptive) {
  GenerateParams gp;
  gp.n_predict = n;
  gp.sampling.temp = 0;
  gp.drafter = d;
  gp.depth.k_max = k_max;
  gp.depth.adaptive = adaptive;
  GenRun r;
  const GenerateStats st = generate(ctx, tok, prompt, gp, [&](int32_t id, const std::string&) {
    r.tokens.push_back(id);
    return true;
  });
  r.hash = st.final_logits_hash;
  r.spec = st.spec;
  return r;
}

// A tiny F32 qwen35moe (DeltaNet layers 0 and 2), with or without an MTP block.
synth::SynthSpec qwen35_spec(int n_mtp) {
  synth::SynthSpec s = synth::shape_spec("qwen35-tiny");
  s.full_attn_interval = 2;
  s.type = "f32";
  s.seed = 11;
  s.n_mtp = n_mtp;
  return s;
}
const std::vector<int32_t> kQwen35Prompt = {5, 17, 99, 3, 250, 41, 7, 200};

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

TEST(SpecGreedy, IdenticalToPlainForEveryDrafterAndDepth) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  LES_REQUIRE_FILE(test::tiny_draft_path());
  auto m = Model::load(test::tiny_moe_path());
  Tokenizer tok(vocab_from_gguf(m->gguf()));
  const ContextParams cp{.n_ctx = 256, .n_threads = 2};
  const int nv = m->config().n_vocab;
  for (const std::string text : {"The history of the", "int main(int argc, char** argv) { int main"}) {
    const auto prompt = tok.encode(text, true, false);
    Context plain_ctx(*m, cp);
    const GenRun plain = generate_run(plain_ctx, tok, prompt, 48, nullptr, 0, false);
    ASSERT_EQ(plain.tokens.size(), 48u) << text;
    const auto rec = concat(prompt, plain.tokens);

    std::vector<std::unique_ptr<Drafter>> drafters;
    drafters.push_back(std::make_unique<NgramDrafter>());
    drafters.push_back(std::make_unique<DraftModelDrafter>(Model::load(test::tiny_draft_path()), *m,
                                                           ContextParams{.n_ctx = 256}, SamplerParams{.temp = 0}));
    for (double a : {1.0, 0.6, 0.0}) drafters.push_back(std::make_unique<OracleDrafter>(rec, a, nv, 7));
    if (test::file_exists(test::tiny_dspark_path())) {
      drafters.push_back(make_drafter(DrafterOptions{.kind = "dspark", .draft_path = test::tiny_dspark_path(),
                                                     .n_threads = 1, .n_ctx = 256, .sampling = {.temp = 0}}, *m));
    }
    for (auto& d : drafters) {
      for (const auto& [k, adaptive] : std::vector<std::pair<int, bool>>{{1, false}, {3, false}, {6, false}, {6, true}}) {
        Context ctx(*m, cp);
        const GenRun r = generate_run(ctx, tok, prompt, 48, d.get(), k, adaptive);
        EXPECT_EQ(r.tokens, plain.tokens) << d->name() << " k=" << k << " adaptive=" << adaptive << " '" << text << "'";
        EXPECT_EQ(r.hash, plain.hash) << d->name() << " k=" << k << " adaptive=" << adaptive;
        EXPECT_EQ(r.spec.accepted + r.spec.rounds, 47) << "every generated token after the first is one committed";
        if (d.get() == drafters[2].get() && !adaptive) {  // the perfect oracle: every draft kept
          EXPECT_EQ(r.spec.accepted, r.spec.drafted) << "k=" << k;
        }
        if (d.get() == drafters[4].get()) {
          EXPECT_EQ(r.spec.accepted, 0) << "a fully corrupted oracle";
        }
      }
    }
  }
}

TEST(SpecGreedy, IdenticalWhileStreamingForBothSchedulesAndCacheSizes) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  LES_REQUIRE_FILE(test::tiny_draft_path());
  LES_REQUIRE_FILE(test::tiny_dspark_path());
  auto resident = Model::load(test::tiny_moe_path());
  auto streamed = Model::load(test::tiny_moe_path(), LoadOptions{.map_experts = false});
  Tokenizer tok(vocab_from_gguf(resident->gguf()));
  const int nv = resident->config().n_vocab;
  const auto prompt = tok.encode("Once upon a time there was a", true, false);
  Context plain_ctx(*resident, ContextParams{.n_ctx = 128, .n_threads = 2});
  const GenRun plain = generate_run(plain_ctx, tok, prompt, 40, nullptr, 0, false);
  const auto rec = concat(prompt, plain.tokens);
  for (Schedule s : {Schedule::ondemand, Schedule::lookahead}) {
    for (int slots : {8, 256}) {
      OracleDrafter oracle(rec, 0.7, nv, 3);
      DraftModelDrafter draft(Model::load(test::tiny_draft_path()), *resident, ContextParams{.n_ctx = 128},
                              SamplerParams{.temp = 0});
      auto dspark = make_drafter(DrafterOptions{.kind = "dspark", .draft_path = test::tiny_dspark_path(),
                                                .n_threads = 1, .n_ctx = 128, .sampling = {.temp = 0}}, *resident);
      for (Drafter* d : std::initializer_list<Drafter*>{&oracle, &draft, dspark.get()}) {
        StreamingExperts ex(*streamed, test::stream_opts(*streamed, s, storage::IoMode::pread, slots));
        Context ctx(*streamed, ContextParams{.n_ctx = 128, .n_threads = 2}, &ex);
        const GenRun r = generate_run(ctx, tok, prompt, 40, d, 5, false);
        EXPECT_EQ(r.tokens, plain.tokens) << d->name() << " " << schedule_name(s) << " slots=" << slots;
        EXPECT_EQ(r.hash, plain.hash) << d->name() << " " << schedule_name(s) << " slots=" << slots;
        EXPECT_GT(r.spec.accepted, 5) << d->name();
        EXPECT_EQ(r.spec.plain_tokens + r.spec.spec_tokens, 39) << "every token after the first, once";
        EXPECT_GT(r.spec.plain_bytes + r.spec.spec_bytes, 0u) << "streamed rounds read experts";
      }
    }
  }
}

TEST(SpecGreedy, RecurrentModelRollsBackExactly) {
  // qwen35moe: DeltaNet layers cannot truncate their state; rejected drafts are undone by
  // restoring the snapshot and replaying the kept tokens.
  synth::SynthSpec s = qwen35_spec(0);
  const std::string path = test::temp_dir() + "/spec_qwen35.gguf";
  synth::write_synth_model(s, path);
  auto m = Model::load(path);
  Tokenizer tok(vocab_from_gguf(m->gguf()));
  const std::vector<int32_t> prompt = kQwen35Prompt;
  Context plain_ctx(*m, ContextParams{.n_ctx = 128});
  const GenRun plain = generate_run(plain_ctx, tok, prompt, 32, nullptr, 0, false);
  ASSERT_FALSE(plain.tokens.empty());
  const auto rec = concat(prompt, plain.tokens);
  for (double a : {0.5, 0.8}) {
    OracleDrafter oracle(rec, a, m->config().n_vocab, 9);
    Context ctx(*m, ContextParams{.n_ctx = 128});
    const GenRun r = generate_run(ctx, tok, prompt, 32, &oracle, 4, false);
    EXPECT_EQ(r.tokens, plain.tokens) << "acceptance " << a;
    EXPECT_EQ(r.hash, plain.hash) << "acceptance " << a;
    EXPECT_GT(r.spec.accepted, 0);
    EXPECT_LT(r.spec.accepted, r.spec.drafted) << "some drafts must be rejected for the rollback to be tested";
  }
}

TEST(SpecGreedy, MtpDraftsAreVerifiedExactly) {
  synth::SynthSpec s = qwen35_spec(1);
  const std::string path = test::temp_dir() + "/spec_qwen35_mtp.gguf";
  synth::write_synth_model(s, path);
  auto m = Model::load(path);
  Tokenizer tok(vocab_from_gguf(m->gguf()));
  const std::vector<int32_t> prompt = kQwen35Prompt;
  Context plain_ctx(*m, ContextParams{.n_ctx = 128});
  const GenRun plain = generate_run(plain_ctx, tok, prompt, 32, nullptr, 0, false);
  for (const auto& [k, adaptive] : std::vector<std::pair<int, bool>>{{1, false}, {3, false}, {4, true}}) {
    MtpDrafter mtp;
    Context ctx(*m, ContextParams{.n_ctx = 128, .n_threads = 2});
    const GenRun r = generate_run(ctx, tok, prompt, 32, &mtp, k, adaptive);
    EXPECT_EQ(r.tokens, plain.tokens) << "k=" << k;
    EXPECT_EQ(r.hash, plain.hash) << "k=" << k;
    if (!adaptive) {
      EXPECT_GT(r.spec.drafted, 0);
    }
  }
  // Streamed experts (the MTP block's through the same cache as the trunk's): the same tokens and
  // hash on both schedules, with a cache far smaller than the experts and one that holds them all.
  auto streamed = Model::load(path, LoadOptions{.map_experts = false});
  for (Schedule sch : {Schedule::ondemand, Schedule::lookahead}) {
    for (int slots : {8, 256}) {
      StreamingExperts ex(*streamed, test::stream_opts(*streamed, sch, storage::IoMode::pread, slots));
      Context sctx(*streamed, ContextParams{.n_ctx = 128}, &ex);
      MtpDrafter mtp;
      const GenRun r = generate_run(sctx, tok, prompt, 32, &mtp, 3, false);
      EXPECT_EQ(r.tokens, plain.tokens) << schedule_name(sch) << " slots=" << slots;
      EXPECT_EQ(r.hash, plain.hash) << schedule_name(sch) << " slots=" << slots;
      EXPECT_GT(r.spec.drafted, 0);
      EXPECT_GT(ex.stats().layers.at(size_t(m->config().n_layer)).selected, 0u) << "MTP experts never streamed";
    }
  }
  // A model without an MTP block.
  s.n_mtp = 0;
  const std::string plain_path = test::temp_dir() + "/spec_qwen35_nomtp.gguf";
  synth::write_synth_model(s, plain_path);
  auto nm = Model::load(plain_path);
  Context nctx(*nm, ContextParams{.n_ctx = 64});
  MtpDrafter mtp2;
  EXPECT_THROW(generate_run(nctx, tok, prompt, 4, &mtp2, 2, false), Error);
}

TEST(SpecGreedy, NgramDrafterProposesWhatFollowedTheLatestMatch) {
  NgramDrafter ng(1, 3);
  Draft d;
  const std::vector<int32_t> h = {1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3};
  ng.draft(h, 4, d);
  EXPECT_EQ(d.tokens, (std::vector<int32_t>{5, 6, 1, 2}));  // latest earlier "1 2 3" is at index 5
  ng.draft(std::vector<int32_t>{7, 8, 9}, 4, d);
  EXPECT_TRUE(d.tokens.empty());
  EXPECT_THROW(NgramDrafter(0, 2), Error);
}

TEST(SpecCli, BadOptionsAreClearErrors) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const std::string m = " -m " + test::tiny_moe_path() + " -p hi -n 4 --temp 0";
  std::string err;
  EXPECT_NE(test::run_les("run" + m + " --spec draft", &err), 0);
  EXPECT_NE(err.find("--spec draft needs --draft FILE"), std::string::npos) << err;
  EXPECT_NE(test::run_les("run" + m + " --spec nonsense", &err), 0);
  EXPECT_NE(err.find("unknown --spec 'nonsense'"), std::string::npos) << err;
  EXPECT_NE(test::run_les("run" + m + " --draft-max 4", &err), 0);
  EXPECT_NE(err.find("--draft-max needs --spec"), std::string::npos) << err;
  EXPECT_NE(test::run_les("run" + m + " --spec ngram --draft-max 0", &err), 0);
  EXPECT_NE(err.find("--draft-max must be in"), std::string::npos) << err;
  // a draft with another vocabulary
  synth::SynthSpec s = synth::shape_spec("qwen35-tiny");
  s.type = "f32";
  const std::string other = test::temp_dir() + "/spec_other_vocab.gguf";
  synth::write_synth_model(s, other);
  EXPECT_NE(test::run_les("run" + m + " --spec draft --draft " + other, &err), 0);
  EXPECT_NE(err.find("vocab"), std::string::npos) << err;
  // and a working one: same greedy text as plain
  ASSERT_EQ(test::run_les("run" + m + " -n 24 --spec ngram --stats", &err), 0) << err;
  EXPECT_NE(err.find("acceptance by position"), std::string::npos) << err;
}

TEST(SpecBench, ClearedExpertCacheRunsLikeANewOne) {
  // bench_spec reuses one expert cache per budget and clears it before each run: a cleared cache
  // must behave as a new one (ondemand: the same reads, hits and logits).
  LES_REQUIRE_FILE(test::tiny_moe_path());
  auto streamed = Model::load(test::tiny_moe_path(), LoadOptions{.map_experts = false});
  const std::vector<int32_t> prompt = {785, 3974, 293, 4830, 282, 5131, 7784, 82};
  const StreamingOptions o = test::stream_opts(*streamed, Schedule::ondemand, storage::IoMode::pread, 40);
  StreamingExperts fresh(*streamed, o);
  const auto want = test::greedy_hashes(*streamed, &fresh, prompt, 12);
  const LayerStreamStats ws = fresh.stats().total();
  StreamingExperts reused(*streamed, o);
  test::greedy_hashes(*streamed, &reused, {9, 8, 7, 6, 5, 4, 3, 2, 1}, 20);  // fill it with other experts
  reused.clear();
  EXPECT_EQ(reused.stats().total().bytes_demand, 0u);
  const auto got = test::greedy_hashes(*streamed, &reused, prompt, 12);
  EXPECT_EQ(got, want);
  const LayerStreamStats rs = reused.stats().total();
  EXPECT_EQ(rs.bytes_demand, ws.bytes_demand);
  EXPECT_EQ(rs.hits, ws.hits);
}

TEST(SpecRelease, WithheldSlotsStayOutOfUseUntilReleased) {
  // A cache built with withheld bytes uses fewer slots (ondemand: the same reads as a cache of
  // that many slots), computes the same logits, and puts every slot in use on release. On a copy
  // of the trained model whose experts are all Q8_0: one slot size, so slot counts are exact (the
  // bundled file's down projections are Q8_0 in some layers and Q5_0 in others).
  LES_REQUIRE_FILE(test::tiny_moe_path());
  test::ScopedDir dir;
  const std::string path = dir.file("experts-q8_0.gguf");
  QuantizePlan plan;
  plan.recipe = Recipe::pure;
  plan.keep_unlisted = true;
  plan.n_threads = 2;
  for (int l = 0; l < 8; ++l) {
    for (const char* t : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      plan.overrides["blk." + std::to_string(l) + "." + t + ".weight"] = Type::Q8_0;
    }
  }
  quantize_model(test::tiny_moe_path(), path, plan);
  auto streamed = Model::load(path, LoadOptions{.map_experts = false});
  const std::vector<int32_t> prompt = {785, 3974, 293, 4830, 282, 5131, 7784, 82};
  const StreamingOptions small = test::stream_opts(*streamed, Schedule::ondemand, storage::IoMode::pread, 40);
  StreamingOptions big = test::stream_opts(*streamed, Schedule::ondemand, storage::IoMode::pread, 100);
  big.withheld_bytes = big.cache_bytes - small.cache_bytes;
  StreamingExperts ref(*streamed, small);
  const auto want = test::greedy_hashes(*streamed, &ref, prompt, 12);
  StreamingExperts ex(*streamed, big);
  EXPECT_EQ(ex.n_slots(), 100);
  EXPECT_EQ(ex.active_slots(), 40);
  EXPECT_EQ(ex.withheld_bytes(), big.withheld_bytes);
  EXPECT_EQ(test::greedy_hashes(*streamed, &ex, prompt, 12), want);
  EXPECT_EQ(ex.stats().total().bytes_demand, ref.stats().total().bytes_demand) << "a 40-slot cache's reads";
  EXPECT_EQ(ex.stats().n_slots, 40);
  EXPECT_EQ(ex.release_withheld(), big.withheld_bytes);
  EXPECT_EQ(ex.active_slots(), 100);
  EXPECT_EQ(ex.withheld_bytes(), 0u);
  EXPECT_EQ(ex.release_withheld(), 0u);
  // In use now: the same prompt again reads less than from 40 slots (more of it stays), same logits.
  StreamingExperts full(*streamed, test::stream_opts(*streamed, Schedule::ondemand, storage::IoMode::pread, 100));
  ex.clear();
  EXPECT_EQ(test::greedy_hashes(*streamed, &ex, prompt, 12), want);
  EXPECT_EQ(test::greedy_hashes(*streamed, &full, prompt, 12), want);
  EXPECT_EQ(ex.stats().total().bytes_demand, full.stats().total().bytes_demand) << "a 100-slot cache's reads";
  EXPECT_LT(ex.stats().total().bytes_demand, ref.stats().total().bytes_demand);
  // Withholding more than the cache, or so much that a layer cannot be computed, is handled.
  StreamingOptions too_much = big;
  too_much.withheld_bytes = big.cache_bytes + 1;
  EXPECT_THROW(StreamingExperts(*streamed, too_much), Error);
  StreamingOptions all = big;
  all.withheld_bytes = big.cache_bytes;
  StreamingExperts minimal(*streamed, all);
  EXPECT_EQ(minimal.active_slots(), streamed->config().n_expert_used) << "never below one layer's experts";
  EXPECT_EQ(test::greedy_hashes(*streamed, &minimal, prompt, 4), test::greedy_hashes(*streamed, &ref, prompt, 4));
}

TEST(SpecRelease, ControllerGivesUpAfterLostProbes) {
  DepthParams dp;
  dp.k_max = 4;
  dp.give_up_after = 3;
  DepthController c(dp);
  int rounds = 0, probes = 0;
  while (!c.gave_up() && rounds < 2000) {
    const int k = c.choose();
    probes += k > 0;
    c.record_draft(k, 0.0);
    c.record_verify(k + 1, 1.0 + 1.0 * k);  // every extra position costs a whole step
    c.record_round(k, 0);                    // and nothing is ever accepted
    ++rounds;
  }
  ASSERT_TRUE(c.gave_up());
  // The first speculative round (k = 1), then probes at intervals 24, 48, 96; the 4th lost probe
  // gives up.
  EXPECT_EQ(probes, 4);
  EXPECT_GT(rounds, 24 + 48 + 96);
  EXPECT_LT(rounds, 24 + 48 + 96 + 192 + 10);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(c.choose(), 0);
  // A controller that never gives up, and one where speculation pays, keep going.
  dp.give_up_after = 0;
  DepthController never(dp);
  dp.give_up_after = 3;
  DepthController pays(dp);
  for (int r = 0; r < 1000; ++r) {
    int k = never.choose();
    never.record_verify(k + 1, 1.0 + k);
    never.record_round(k, 0);
    k = pays.choose();
    pays.record_verify(k + 1, 1.0 + 0.05 * k);
    pays.record_round(k, k);
  }
  EXPECT_FALSE(never.gave_up());
  EXPECT_FALSE(pays.gave_up());
}

TEST(SpecRelease, AReleasedDrafterFreesItsMemoryAndTheOutputStaysExact) {
  // A drafter whose speculation never pays (a fully corrupted oracle would cost nothing, so use the
  // dense draft on a budget where verification is dear): the controller gives up, the drafter is
  // released (weights freed, observers gone), the withheld slots go in use, and the tokens and hash
  // equal plain decoding's; a later request with the same controller decodes plainly.
  LES_REQUIRE_FILE(test::tiny_moe_path());
  LES_REQUIRE_FILE(test::tiny_dspark_path());
  auto resident = Model::load(test::tiny_moe_path());
  auto streamed = Model::load(test::tiny_moe_path(), LoadOptions{.map_experts = false});
  Tokenizer tok(vocab_from_gguf(resident->gguf()));
  const auto prompt = tok.encode("The history of the", true, false);
  Context plain_ctx(*resident, ContextParams{.n_ctx = 512, .n_threads = 2});
  const GenRun plain = generate_run(plain_ctx, tok, prompt, 300, nullptr, 0, false);
  auto dspark = make_drafter(DrafterOptions{.kind = "dspark", .draft_path = test::tiny_dspark_path(),
                                            .n_threads = 1, .n_ctx = 512, .sampling = {.temp = 0}}, *resident);
  ASSERT_GT(dspark->resident_bytes(), 0u);
  StreamingOptions so = test::stream_opts(*streamed, Schedule::lookahead, storage::IoMode::pread, 120);
  so.withheld_bytes = so.cache_bytes / 2;
  StreamingExperts ex(*streamed, so);
  Context ctx(*streamed, ContextParams{.n_ctx = 512, .n_threads = 2}, &ex);
  GenerateParams gp;
  gp.n_predict = 300;
  gp.sampling.temp = 0;
  gp.drafter = dspark.get();
  gp.depth.k_max = 6;
  gp.depth.probe_every = 4;      // give up quickly: 4 + 8 + 16 + 32 rounds
  // Verification made to look dear: the controller is told a plain step always wins.
  DepthController dc(gp.depth);
  for (int n = 1; n <= 7; ++n) {
    dc.record_verify(n, 1.0 * n * n);
    dc.record_verify(n, 1.0 * n * n);
  }
  gp.depth_state = &dc;
  uint64_t released = 0;
  int calls = 0;
  gp.on_drafter_released = [&](uint64_t b) {
    released = b;
    ++calls;
    ex.release_withheld();
  };
  std::vector<int32_t> got;
  const GenerateStats st = generate(ctx, tok, prompt, gp, [&](int32_t id, const std::string&) {
    got.push_back(id);
    return true;
  });
  EXPECT_EQ(got, plain.tokens);
  EXPECT_EQ(st.final_logits_hash, plain.hash);
  ASSERT_TRUE(dc.gave_up());
  EXPECT_EQ(calls, 1);
  EXPECT_GT(st.spec.released_at, 0);
  EXPECT_GT(released, 7u << 20) << "the Q8_0 drafter's 7.2 MiB of weights";
  EXPECT_EQ(st.spec.released_bytes, released);
  EXPECT_TRUE(dspark->released());
  EXPECT_EQ(dspark->resident_bytes(), 0u);
  EXPECT_EQ(ex.withheld_bytes(), 0u);
  EXPECT_EQ(ex.active_slots(), ex.n_slots());
  EXPECT_NE(format_spec_stats(st, 1).find("given up"), std::string::npos);
  // The next request: plain decoding with the released drafter, the same output.
  Context ctx2(*streamed, ContextParams{.n_ctx = 512, .n_threads = 2}, &ex);
  gp.n_predict = 40;
  std::vector<int32_t> again;
  const GenerateStats st2 = generate(ctx2, tok, prompt, gp, [&](int32_t id, const std::string&) {
    again.push_back(id);
    return true;
  });
  EXPECT_EQ(again, std::vector<int32_t>(plain.tokens.begin(), plain.tokens.begin() + 40));
  EXPECT_EQ(st2.spec.drafted, 0);
  EXPECT_EQ(calls, 1);
}

TEST(SpecRelease, WithheldMemoryRaisesTheBarForSpeculation) {
  // Speculation that gains about 20% over a plain step (acceptance 0.6 at k = 1, a 2-position pass
  // costing 1.3 steps) is chosen when the drafter withholds nothing, and not when it withholds a
  // third of the expert cache (plain steps on the full cache would gain more), where it is given up.
  auto run = [](double memory_cost) {
    DepthParams dp;
    dp.k_max = 1;
    DepthController c(dp);
    c.set_memory_cost(memory_cost);
    Rng rng(5);
    int spec = 0;
    for (int r = 0; r < 400 && !c.gave_up(); ++r) {
      const int k = c.choose();
      const int acc = k > 0 && rng.uniform() < 0.6 ? 1 : 0;
      c.record_verify(k + 1, k > 0 ? 1.3 : 1.0);
      c.record_round(k, acc);
      if (r >= 100) spec += k > 0;
    }
    return std::make_pair(spec, c.gave_up());
  };
  const auto free_memory = run(0.0);
  EXPECT_GT(free_memory.first, 200);
  EXPECT_FALSE(free_memory.second);
  const auto withheld = run(0.33);
  EXPECT_LT(withheld.first, 10);
  EXPECT_TRUE(withheld.second);
}
