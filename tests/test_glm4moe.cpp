// glm4moe (GLM-4.5 / GLM-4.5-Air): logits against llama.cpp on synthetic models (a dense lead
// layer, partial RoPE, q/k/v biases, sigmoid routing with a selection bias and routed scaling, a
// shared expert, with and without q/k norms, a NextN block) in F32 and quantized types; greedy
// continuations; batch = token-by-token and thread-count invariance; streamed and packed experts;
// the NextN (MTP) draft head against llama.cpp and in speculative decoding; refused bad files;
// the real-size shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>

#include "les/convert/quantize_model.h"
#include "les/gguf/gguf.h"
#include "les/mixed/mixed_plan.h"
#include "les/mixed/tensor_groups.h"
#include "les/model/context.h"
#include "les/model/matmul.h"
#include "les/model/ops.h"
#include "les/model/router.h"
#include "les/pack/pack.h"
#include "les/quant/kernels.h"
#include "les/sched/streaming_experts.h"
#include "les/session/generate.h"
#include "les/spec/mtp_drafter.h"
#include "les/synth/synth.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"
#include "greedy_hashes.h"
#include "llamacpp_ref.h"
#include "test_util.h"

using namespace les;
using namespace les::test;

namespace glm4moe_test {

// Tiny glm4moe: 4 layers (layer 0 dense), n_embd 128, 4 heads (2 KV) of 32 with RoPE on 16 dims,
// 16 experts (4 used) + 1 shared, routed scaling 2.5, a NextN block with its own embedding and head.
synth::SynthSpec tiny_spec(const std::string& type = "f32", bool qk_norm = false, int n_mtp = 1) {
  synth::SynthSpec s = synth::shape_spec("tiny", Arch::glm4moe);
  s.type = type;
  s.qk_norm = qk_norm;
  s.n_mtp = n_mtp;
  s.seed = 13;
  return s;
}

// Rows of 256 in every matrix, so that K-quants are really used everywhere: 4 heads of 64 (RoPE on
// 32), 8 experts (2 used) of 256, a dense lead layer of 512.
synth::SynthSpec quant_spec(const std::string& type, bool qk_norm = false, int n_mtp = 1) {
  synth::SynthSpec s = tiny_spec(type, qk_norm, n_mtp);
  s.n_embd = 256;
  s.head_dim = 64;
  s.n_rot = 32;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  s.n_ff_shexp = 256;
  s.n_ff_dense = 512;
  s.seed = 17;
  return s;
}

synth::SynthSpec spec_for(const std::string& type, bool qk_norm, int n_mtp = 1) {
  return type == "f32" ? tiny_spec(type, qk_norm, n_mtp) : quant_spec(type, qk_norm, n_mtp);
}

std::string write_model(const synth::SynthSpec& s, const std::string& dir, const std::string& name = "model.gguf") {
  const std::string path = dir + "/" + name;
  synth::write_synth_model(s, path);
  return path;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::vector<int32_t> v;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13; x ^= x >> 7; x ^= x << 17;
    v.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab - 8)));
  }
  return v;
}

int32_t argmax(const float* v, int n) { return static_cast<int32_t>(std::max_element(v, v + n) - v); }

// KL(p || q) of two logit rows, in double.
double kld(const float* p_logits, const float* q_logits, int n) {
  auto log_softmax = [n](const float* x) {
    std::vector<double> l(static_cast<size_t>(n));
    double mx = x[0];
    for (int i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
    double z = 0;
    for (int i = 0; i < n; ++i) z += std::exp(static_cast<double>(x[i]) - mx);
    for (int i = 0; i < n; ++i) l[static_cast<size_t>(i)] = static_cast<double>(x[i]) - mx - std::log(z);
    return l;
  };
  const std::vector<double> lp = log_softmax(p_logits), lq = log_softmax(q_logits);
  double k = 0;
  for (size_t i = 0; i < lp.size(); ++i) k += std::exp(lp[i]) * (lp[i] - lq[i]);
  return k;
}

struct Agreement {
  double max_abs = 0;    // max |ours - llama.cpp| over all logits
  double mean_kld = 0;   // mean over positions of KL(llama.cpp || ours)
  double max_kld = 0;
  int positions = 0;
  int top1_agree = 0;
  double top1() const { return positions ? static_cast<double>(top1_agree) / positions : 0.0; }
};

// All logits of `tokens` from one eval.
std::vector<float> all_logits(const Model& m, const std::vector<int32_t>& tokens, int threads, int n_batch = 512,
                              ExpertSource* src = nullptr) {
  Context ctx(m, ContextParams{.n_ctx = 256, .n_threads = threads, .n_batch = n_batch}, src);
  ctx.eval(tokens, true);
  const size_t nv = static_cast<size_t>(m.config().n_vocab);
  return std::vector<float>(ctx.logits(0), ctx.logits(0) + nv * tokens.size());
}

// Our logits (1 and 2 threads, which must agree bit for bit) against llama.cpp's on each sequence.
Agreement compare(const std::string& path, const std::vector<std::vector<int32_t>>& seqs, const std::string& dir) {
  Agreement a;
  const std::vector<float> ref = llamacpp_logits(path, seqs, dir);
  auto m = Model::load(path);
  const int nv = m->config().n_vocab;
  size_t total = 0;
  for (const auto& s : seqs) total += s.size();
  EXPECT_EQ(ref.size(), total * static_cast<size_t>(nv)) << "llama.cpp produced no or partial logits";
  if (ref.size() != total * static_cast<size_t>(nv)) return a;
  size_t row = 0;
  for (const auto& s : seqs) {
    const std::vector<float> ours = all_logits(*m, s, 1);
    EXPECT_EQ(all_logits(*m, s, 2), ours) << "logits depend on the thread count";
    for (size_t i = 0; i < s.size(); ++i, ++row) {
      const float* o = ours.data() + i * static_cast<size_t>(nv);
      const float* t = ref.data() + row * static_cast<size_t>(nv);
      for (int v = 0; v < nv; ++v) a.max_abs = std::max(a.max_abs, static_cast<double>(std::fabs(o[v] - t[v])));
      const double k = kld(t, o, nv);
      a.mean_kld += k;
      a.max_kld = std::max(a.max_kld, k);
      ++a.positions;
      a.top1_agree += argmax(o, nv) == argmax(t, nv);
    }
  }
  if (a.positions) a.mean_kld /= a.positions;
  return a;
}

using KvList = std::vector<std::pair<std::string, gguf::Value>>;

// Copies a GGUF file with its metadata passed through `edit` and its tensors through `tensors`
// (which may drop, rename or reshape them: name, shape, type, data).
struct OutTensor {
  std::string name;
  std::vector<int64_t> ne;
  Type type;
  const uint8_t* data;
};
void rewrite(const std::string& in, const std::string& out, const std::function<void(KvList&)>& edit,
             const std::function<void(std::vector<OutTensor>&)>& tensors = {}) {
  const gguf::File f = gguf::read_file(in);
  const MappedFile map = MappedFile::open(in);
  KvList kv = f.kv;
  edit(kv);
  std::vector<OutTensor> ts;
  for (const auto& t : f.tensors) ts.push_back({t.name, t.ne, t.type, map.data() + f.data_offset + t.offset});
  if (tensors) tensors(ts);
  gguf::Writer w;
  w.set_alignment(f.alignment);
  for (auto& [k, v] : kv) {
    if (k != "general.alignment") w.add(k, v);
  }
  for (const auto& t : ts) w.add_tensor(t.name, t.ne, t.type, static_cast<const void*>(t.data));
  w.write(out);
}

void erase_key(KvList& kv, const std::string& key) {
  kv.erase(std::remove_if(kv.begin(), kv.end(), [&](const auto& p) { return p.first == key; }), kv.end());
}

gguf::Value* find_key(KvList& kv, const std::string& key) {
  for (auto& [k, v] : kv) {
    if (k == key) return &v;
  }
  return nullptr;
}

void drop_tensor(std::vector<OutTensor>& ts, const std::string& name) {
  ts.erase(std::remove_if(ts.begin(), ts.end(), [&](const OutTensor& t) { return t.name == name; }), ts.end());
}

void cleanup(const std::string& dir) {
  const std::string cmd = "rm -rf '" + dir + "'";
  (void)std::system(cmd.c_str());
}

// MTP catch-up rows for a target eval of `tokens`: row p is (x_p, h_{p-1}) with h_{-1} = 0.
std::vector<float> shifted_hidden(const Context& ctx, int n, int E) {
  std::vector<float> h(static_cast<size_t>(n) * static_cast<size_t>(E), 0.0f);
  for (int p = 1; p < n; ++p) std::copy(ctx.hidden(p - 1), ctx.hidden(p - 1) + E, h.begin() + std::ptrdiff_t(p) * E);
  return h;
}

}  // namespace glm4moe_test

using namespace glm4moe_test;

TEST(Glm4Moe, ConfigAndTensorTable) {
  const std::string dir = temp_dir();
  for (bool qk : {false, true}) {
    const synth::SynthSpec s = tiny_spec("f32", qk);
    auto m = Model::load(write_model(s, dir, qk ? "qk.gguf" : "plain.gguf"));
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, Arch::glm4moe);
    EXPECT_EQ(c.n_layer, s.n_layer);  // block_count counts the NextN block too
    EXPECT_EQ(c.n_layer_nextn, 1);
    EXPECT_EQ(c.n_rot, s.head_dim / 2);
    EXPECT_EQ(c.rope_type, RopeType::neox);
    EXPECT_EQ(c.qk_norm, qk ? QkNorm::per_head : QkNorm::none);
    EXPECT_EQ(c.gating, Gating::sigmoid);
    EXPECT_TRUE(c.norm_topk);
    EXPECT_FLOAT_EQ(c.expert_weights_scale, 2.5f);
    EXPECT_EQ(c.n_layer_dense_lead, 1);
    EXPECT_EQ(c.n_ff_dense, s.n_ff_dense);
    EXPECT_EQ(c.n_ff_exp, s.n_ff_exp);
    EXPECT_EQ(c.n_ff_shexp, s.n_ff_exp);  // one shared expert of the routed width
    EXPECT_FLOAT_EQ(c.rms_eps, s.rms_eps);
    EXPECT_FALSE(c.has_experts(0));
    EXPECT_TRUE(c.has_experts(1));
    const ModelWeights& w = m->weights();
    EXPECT_TRUE(w.layers[0].ffn_gate.present());
    EXPECT_FALSE(w.layers[0].router.present());
    EXPECT_FALSE(w.layers[0].shexp_gate.present());
    for (int il = 1; il < c.n_layer; ++il) {
      const LayerWeights& L = w.layers[static_cast<size_t>(il)];
      EXPECT_TRUE(L.router.present() && L.exp_probs_b.present() && L.shexp_gate.present()) << il;
    }
    for (const LayerWeights* L : {&w.layers[0], &w.layers[3], &w.mtp.block}) {
      EXPECT_TRUE(L->bq.present() && L->bk.present() && L->bv.present());
      EXPECT_FALSE(L->bo.present());
      EXPECT_EQ(L->q_norm.present(), qk);
    }
    EXPECT_TRUE(w.mtp.runnable());
    // The NextN block's own embedding and head, not the trunk's.
    EXPECT_NE(w.mtp.embed.data, w.tok_embd.data);
    EXPECT_NE(w.mtp.head.data, w.output.data);
    EXPECT_NE(w.mtp.head_norm.data, w.output_norm.data);
  }
  cleanup(dir);
}

TEST(Glm4Moe, NamedShapesHaveTheRealSizes) {
  // F32 files: 4 bytes a parameter, plus the header and 32-byte tensor alignment (< 0.01%).
  auto params = [](synth::SynthSpec s) {
    s.type = "f32";
    return static_cast<double>(synth::synth_file_bytes(s)) / 4.0;
  };
  const synth::SynthSpec air = synth::shape_spec("glm-4.5-air");
  EXPECT_EQ(air.arch, Arch::glm4moe);
  EXPECT_EQ(air.n_layer, 46);
  EXPECT_EQ(air.n_mtp, 1);
  EXPECT_EQ(air.n_dense_lead, 1);
  EXPECT_EQ(air.n_embd, 4096);
  EXPECT_EQ(air.n_head, 96);
  EXPECT_EQ(air.n_head_kv, 8);
  EXPECT_EQ(air.head_dim, 128);
  EXPECT_EQ(air.n_rot, 64);
  EXPECT_EQ(air.n_expert, 128);
  EXPECT_EQ(air.n_expert_used, 8);
  EXPECT_EQ(air.n_ff_exp, 1408);
  EXPECT_EQ(air.n_ff_shexp, 1408);
  EXPECT_EQ(air.n_ff_dense, 10944);
  EXPECT_EQ(air.n_vocab, 151552);
  EXPECT_FLOAT_EQ(air.expert_weights_scale, 1.0f);
  EXPECT_FALSE(air.qk_norm);
  synth::SynthSpec air_trunk = air;
  air_trunk.n_mtp = 0;
  const double p_air = params(air), p_air_trunk = params(air_trunk);
  const synth::SynthSpec big = synth::shape_spec("glm-4.5");
  EXPECT_EQ(big.n_layer, 92);
  EXPECT_EQ(big.n_dense_lead, 3);
  EXPECT_EQ(big.n_embd, 5120);
  EXPECT_EQ(big.n_expert, 160);
  EXPECT_EQ(big.n_ff_exp, 1536);
  EXPECT_EQ(big.n_ff_dense, 12288);
  EXPECT_TRUE(big.qk_norm);
  EXPECT_FLOAT_EQ(big.expert_weights_scale, 2.5f);
  synth::SynthSpec big_trunk = big;
  big_trunk.n_mtp = 0;
  const double p_big = params(big), p_big_trunk = params(big_trunk);
  std::printf("glm-4.5-air: %.2f B parameters (%.2f B without the NextN block); glm-4.5: %.2f B (%.2f B)\n",
              p_air / 1e9, p_air_trunk / 1e9, p_big / 1e9, p_big_trunk / 1e9);
  // Published: GLM-4.5-Air 106B total (110B with the MTP layer in the release), GLM-4.5 355B.
  EXPECT_NEAR(p_air_trunk / 1e9, 106.0, 1.5);
  EXPECT_NEAR(p_air / 1e9, 110.0, 1.5);
  EXPECT_NEAR(p_big_trunk / 1e9, 355.0, 4.0);
  // The NextN block: one MoE block plus eh_proj, its embedding and head.
  const double nextn_air = 128.0 * 3 * 4096 * 1408 + 3.0 * 4096 * 1408 + 4096.0 * 128 + 128 +
                           4096.0 * (96 * 128) * 2 + 4096.0 * (8 * 128) * 2 + (96 * 128 + 2 * 8 * 128) +
                           2.0 * 4096 * 4096 + 2.0 * 151552 * 4096 + 5 * 4096.0;
  EXPECT_NEAR(p_air - p_air_trunk, nextn_air, 1e-4 * nextn_air);
  // Q8_0 sizes as les quantize would write them: 34 bytes per 32 weights.
  synth::SynthSpec q = air;
  q.type = "q8_0";
  EXPECT_NEAR(static_cast<double>(synth::synth_file_bytes(q)), p_air * 34.0 / 32.0, 0.01 * p_air);
  EXPECT_NO_THROW(synth::validate(synth::shape_spec("tiny", Arch::glm4moe)));
  synth::SynthSpec bad = tiny_spec();
  bad.n_ff_shexp = 40;  // not a whole number of experts
  EXPECT_THROW(synth::validate(bad), Error);
  bad = tiny_spec();
  bad.n_rot = 3;
  EXPECT_THROW(synth::validate(bad), Error);
  bad = tiny_spec();
  bad.n_dense_lead = 9;
  EXPECT_THROW(synth::validate(bad), Error);
  synth::SynthSpec other = synth::shape_spec("tiny");
  other.n_dense_lead = 1;
  EXPECT_THROW(synth::validate(other), Error) << "dense lead layers on qwen3moe";
}

namespace {  // each test file's own TypeCase (one name in several files is an ODR clash)
struct TypeCase {
  const char* type;
  bool qk_norm;
};
}  // namespace

class Glm4MoeVsLlamaCpp : public ::testing::TestWithParam<TypeCase> {};

TEST_P(Glm4MoeVsLlamaCpp, Logits) {
  LES_REQUIRE_LLAMACPP();
  const TypeCase tc = GetParam();
  const std::string dir = temp_dir();
  const synth::SynthSpec s = spec_for(tc.type, tc.qk_norm);
  const std::string path = write_model(s, dir);
  // One prompt longer than 64 tokens, two short ones.
  const std::vector<std::vector<int32_t>> seqs = {random_tokens(80, s.n_vocab, 3), random_tokens(24, s.n_vocab, 4),
                                                  random_tokens(9, s.n_vocab, 5)};
  const Agreement a = compare(path, seqs, dir);
  std::printf("glm4moe %-5s qk_norm %d: mean KLD %.3g (max %.3g), top-1 %d/%d, max|diff| %.3g\n", tc.type, tc.qk_norm,
              a.mean_kld, a.max_kld, a.top1_agree, a.positions, a.max_abs);
  ASSERT_EQ(a.positions, 113);
  EXPECT_LE(a.mean_kld, 2e-4);
  EXPECT_GE(a.top1(), 0.98);
  if (std::string(tc.type) == "f32") {
    EXPECT_LE(a.max_abs, 1e-4);
    EXPECT_EQ(a.top1_agree, a.positions);
  }
  cleanup(dir);
}

INSTANTIATE_TEST_SUITE_P(Types, Glm4MoeVsLlamaCpp,
                         ::testing::Values(TypeCase{"f32", false}, TypeCase{"f32", true}, TypeCase{"q8_0", false},
                                           TypeCase{"q8_0", true}, TypeCase{"q4_K", false}, TypeCase{"q4_K", true},
                                           TypeCase{"q4_k_m", false}),
                         [](const ::testing::TestParamInfo<TypeCase>& info) {
                           return std::string(info.param.type) + (info.param.qk_norm ? "_qknorm" : "");
                         });

TEST(Glm4MoeVsLlamaCppGreedy, ContinuationsEqual) {
  LES_REQUIRE_LLAMACPP();
  const std::string dir = temp_dir();
  for (const TypeCase tc : {TypeCase{"f32", false}, TypeCase{"q8_0", true}}) {
    const synth::SynthSpec s = spec_for(tc.type, tc.qk_norm);
    const std::string path = write_model(s, dir, std::string(tc.type) + ".gguf");
    auto m = Model::load(path);
    for (uint64_t seed : {5, 6}) {
      const std::vector<int32_t> prompt = random_tokens(seed == 5 ? 6 : 70, s.n_vocab, seed);
      const int n_gen = 24;
      const std::vector<int32_t> theirs = llamacpp_greedy(path, prompt, n_gen, dir);
      Context ctx(*m, ContextParams{.n_ctx = 128});
      ctx.eval(prompt, false);
      std::vector<int32_t> ours;
      for (int k = 0; k < n_gen; ++k) {
        ours.push_back(argmax(ctx.last_logits(), s.n_vocab));
        ctx.eval(std::span<const int32_t>(&ours.back(), 1), false);
      }
      EXPECT_EQ(ours, theirs) << tc.type << " seed " << seed;
    }
  }
  cleanup(dir);
}

TEST(Glm4Moe, PrefillEqualsTokenByTokenAndThreadCounts) {
  const std::string dir = temp_dir();
  for (const TypeCase tc : {TypeCase{"f32", true}, TypeCase{"q4_K", false}}) {
    const synth::SynthSpec s = spec_for(tc.type, tc.qk_norm);
    auto m = Model::load(write_model(s, dir, std::string(tc.type) + ".gguf"));
    const std::vector<int32_t> tokens = random_tokens(100, s.n_vocab, 9);
    const std::vector<float> batch = all_logits(*m, tokens, 1);
    EXPECT_EQ(all_logits(*m, tokens, 3), batch) << tc.type << ": logits depend on the thread count";
    EXPECT_EQ(all_logits(*m, tokens, 2, 7), batch) << tc.type << ": batches of 7 differ";
    Context ctx(*m, ContextParams{.n_ctx = 256, .n_threads = 2});
    const size_t nv = static_cast<size_t>(s.n_vocab);
    for (size_t i = 0; i < tokens.size(); ++i) {
      ctx.eval(std::span<const int32_t>(&tokens[i], 1), false);
      ASSERT_TRUE(std::equal(ctx.last_logits(), ctx.last_logits() + nv, batch.begin() + std::ptrdiff_t(i * nv)))
          << tc.type << ": token-by-token differs from one batch at position " << i;
    }
  }
  cleanup(dir);
}

TEST(Glm4Moe, RoutingUsesTheSelectionBiasAndScaling) {
  // The routing observer sees the trunk's MoE layers only (not the dense lead layer), with
  // weights that sum to expert_weights_scale (normalised, then scaled), chosen by
  // sigmoid + exp_probs_b, weighted by the unbiased sigmoid.
  const std::string dir = temp_dir();
  const synth::SynthSpec s = tiny_spec();
  auto m = Model::load(write_model(s, dir));
  const int K = s.n_expert_used, X = s.n_expert;
  Context ctx(*m, ContextParams{.n_ctx = 64});
  std::map<int, int> seen;
  int differs_from_unbiased = 0, checked = 0;
  ctx.set_routing_observer([&](int layer, int64_t n_tok, const int32_t* ids, const float* w, int k, const float*, int) {
    ++seen[layer];
    ASSERT_EQ(k, K);
    for (int64_t t = 0; t < n_tok; ++t) {
      double sum = 0;
      for (int j = 0; j < k; ++j) sum += w[t * k + j];
      EXPECT_NEAR(sum, 2.5, 1e-5);
      (void)ids;
    }
  });
  std::vector<float> router_in;
  ctx.set_observer([&](int layer, const char* name, const float* data, int64_t n_tok, int64_t width) {
    if (layer != 2 || std::string(name) != "ffn_norm") return;
    router_in.assign(data, data + n_tok * width);
  });
  const std::vector<int32_t> tokens = random_tokens(40, s.n_vocab, 2);
  ctx.eval(tokens, false);
  EXPECT_EQ(seen.count(0), 0u) << "the dense lead layer has no routing";
  EXPECT_EQ(seen[1], 1);
  EXPECT_EQ(seen[3], 1);
  // Layer 2's selection with and without the bias: the bias changes some choices.
  const LayerWeights& L = m->weights().layers[2];
  std::vector<float> logits(static_cast<size_t>(X));
  QuantizedActs acts;
  ThreadPool pool(1);
  for (size_t t = 0; t < tokens.size(); ++t) {
    matmul(L.router, router_in.data() + t * size_t(s.n_embd), 1, s.n_embd, logits.data(), X, pool, acts);
    std::vector<float> a = logits, b = logits;
    std::vector<int32_t> ids_a(static_cast<size_t>(K)), ids_b(static_cast<size_t>(K));
    std::vector<float> w_a(static_cast<size_t>(K)), w_b(static_cast<size_t>(K));
    const RouterParams rp = router_params(m->config());
    route_topk(rp, a.data(), L.exp_probs_b.data, ids_a.data(), w_a.data());
    route_topk(rp, b.data(), nullptr, ids_b.data(), w_b.data());
    std::sort(ids_a.begin(), ids_a.end());
    std::sort(ids_b.begin(), ids_b.end());
    differs_from_unbiased += ids_a != ids_b;
    ++checked;
  }
  std::printf("selection bias changed the experts of %d of %d tokens\n", differs_from_unbiased, checked);
  EXPECT_GT(differs_from_unbiased, 0);
  EXPECT_LT(differs_from_unbiased, checked);
  cleanup(dir);
}

TEST(Glm4Moe, NextNBlockIsNotRunByTheMainPass) {
  const std::string dir = temp_dir();
  const std::string plain = write_model(tiny_spec("f32", false, 0), dir, "plain.gguf");
  const std::string with_mtp = write_model(tiny_spec("f32", false, 1), dir, "mtp.gguf");
  auto a = Model::load(plain);
  auto b = Model::load(with_mtp);
  EXPECT_FALSE(a->weights().mtp.present());
  EXPECT_TRUE(b->weights().mtp.present());
  EXPECT_EQ(a->config().n_layer, b->config().n_layer);
  const std::vector<int32_t> tokens = random_tokens(20, a->config().n_vocab, 8);
  EXPECT_EQ(all_logits(*a, tokens, 1), all_logits(*b, tokens, 1));
  cleanup(dir);
}

// The NextN head's logits against a reference composed of existing parts: a one-layer glm4moe
// model made of the NextN block's tensors (its embedding, head norm and head as the model's),
// evaluated from layer 0 on eh_proj . [RMSNorm(embed[x]) * enorm ; RMSNorm(h) * hnorm] computed
// here with ops::rms_norm and matmul. Then: batch == row by row, thread counts, rollback, and
// streamed / packed MTP experts bit-identical.
TEST(Glm4Moe, NextNDraftHead) {
  const std::string dir = temp_dir();
  for (const TypeCase tc : {TypeCase{"f32", false}, TypeCase{"q8_0", true}}) {
    const synth::SynthSpec s = spec_for(tc.type, tc.qk_norm);
    const std::string path = write_model(s, dir, std::string(tc.type) + ".gguf");
    auto m = Model::load(path);
    const int E = s.n_embd, V = s.n_vocab, N = 12, L = s.n_layer;
    const std::vector<int32_t> tokens = random_tokens(N, V, 21);
    Context ctx(*m, ContextParams{.n_ctx = 64, .n_threads = 2});
    ASSERT_TRUE(ctx.has_mtp());
    ctx.eval(tokens, true);
    const std::vector<float> h_prev = shifted_hidden(ctx, N, E);
    ctx.mtp_eval(tokens, h_prev.data());
    EXPECT_EQ(ctx.mtp_n_past(), N);
    const std::vector<float> batch(ctx.mtp_logits(0), ctx.mtp_logits(0) + size_t(V) * N);
    const std::vector<float> batch_h(ctx.mtp_hidden(0), ctx.mtp_hidden(0) + size_t(E) * N);

    // The one-layer reference model.
    const std::string ref_path = dir + "/ref_" + tc.type + ".gguf";
    const std::string b = "blk." + std::to_string(L) + ".";
    rewrite(path, ref_path, [&](KvList& kv) {
      find_key(kv, "glm4moe.block_count")->u64 = 1;
      find_key(kv, "glm4moe.leading_dense_block_count")->u64 = 0;
      erase_key(kv, "glm4moe.nextn_predict_layers");
    }, [&](std::vector<OutTensor>& ts) {
      std::vector<OutTensor> out;
      for (const OutTensor& t : ts) {
        if (t.name.rfind(b, 0) != 0) continue;
        const std::string rest = t.name.substr(b.size());
        if (rest == "nextn.embed_tokens.weight") out.push_back({"token_embd.weight", t.ne, t.type, t.data});
        else if (rest == "nextn.shared_head_norm.weight") out.push_back({"output_norm.weight", t.ne, t.type, t.data});
        else if (rest == "nextn.shared_head_head.weight") out.push_back({"output.weight", t.ne, t.type, t.data});
        else if (rest.rfind("nextn.", 0) != 0) out.push_back({"blk.0." + rest, t.ne, t.type, t.data});
      }
      ts = out;
    });
    auto ref = Model::load(ref_path);
    const MtpWeights& w = m->weights().mtp;
    std::vector<float> cat(size_t(N) * 2 * E), emb(static_cast<size_t>(E)), h_in(size_t(N) * E);
    for (int p = 0; p < N; ++p) {
      kernels().dequantize[static_cast<uint32_t>(w.embed.type)](w.embed.row(tokens[size_t(p)]), emb.data(), E);
      ops::rms_norm(emb.data(), w.enorm.data, cat.data() + size_t(p) * 2 * E, E, m->config().rms_eps);
      ops::rms_norm(h_prev.data() + size_t(p) * E, w.hnorm.data, cat.data() + size_t(p) * 2 * E + E, E, m->config().rms_eps);
    }
    ThreadPool pool(1);
    QuantizedActs acts;
    matmul(w.eh_proj, cat.data(), N, 2 * E, h_in.data(), E, pool, acts);
    Context rc(*ref, ContextParams{.n_ctx = 64, .n_threads = 1});
    rc.eval_from_layer(tokens, 0, h_in.data());
    EXPECT_TRUE(std::equal(batch.begin(), batch.end(), rc.logits(0))) << tc.type << ": NextN logits != composed reference";
    EXPECT_TRUE(std::equal(batch_h.begin(), batch_h.end(), rc.hidden(0))) << tc.type << ": NextN hidden != composed reference";

    // Row by row equals one batch, with another thread count.
    Context one(*m, ContextParams{.n_ctx = 64, .n_threads = 1});
    for (int p = 0; p < N; ++p) {
      one.mtp_eval(std::span<const int32_t>(&tokens[size_t(p)], 1), h_prev.data() + size_t(p) * E);
      ASSERT_TRUE(std::equal(one.mtp_logits(0), one.mtp_logits(0) + V, batch.begin() + std::ptrdiff_t(p) * V))
          << tc.type << ": NextN row " << p;
    }
    // Rollback and a repeated row.
    ctx.mtp_rollback(N - 3);
    ctx.mtp_eval(std::span<const int32_t>(&tokens[size_t(N - 3)], 1), h_prev.data() + size_t(N - 3) * E);
    EXPECT_TRUE(std::equal(ctx.mtp_logits(0), ctx.mtp_logits(0) + V, batch.begin() + std::ptrdiff_t(N - 3) * V));
    EXPECT_THROW(ctx.mtp_rollback(100), Error);

    // Streamed experts: the NextN block's are expert layer n_layer of the same cache, from the
    // GGUF and from its packed form, both schedules, a cache smaller than one token's experts.
    auto streamed = Model::load(path, LoadOptions{.map_experts = false});
    const std::string packed_path = dir + "/packed_" + tc.type + ".gguf";
    pack::pack_model(path, packed_path);
    auto packed = Model::load(packed_path, LoadOptions{.map_experts = false});
    for (const Model* sm : {streamed.get(), packed.get()}) {
      for (Schedule sch : {Schedule::ondemand, Schedule::lookahead}) {
        for (int slots : {4, 40}) {
          const std::string what = std::string(tc.type) + (sm == packed.get() ? " packed " : " gguf ") +
                                   schedule_name(sch) + " slots=" + std::to_string(slots);
          StreamingExperts ex(*sm, stream_opts(*sm, sch, storage::IoMode::pread, slots));
          Context sc(*sm, ContextParams{.n_ctx = 64, .n_threads = 2}, &ex);
          ASSERT_TRUE(sc.has_mtp()) << what;
          sc.eval(tokens, true);
          EXPECT_EQ(ex.stats().layers.at(size_t(L)).selected, 0u) << what << ": the trunk touched the NextN experts";
          sc.mtp_eval(tokens, h_prev.data());
          EXPECT_TRUE(std::equal(sc.mtp_logits(0), sc.mtp_logits(0) + size_t(V) * N, batch.begin())) << what;
          EXPECT_GT(ex.stats().layers.at(size_t(L)).selected, 0u) << what;
        }
      }
    }
  }
  cleanup(dir);
}

// llama.cpp's NextN head (tools/llamacpp-mtp, linked against the reference libllama): the target's
// logits and hidden states, then the MTP context's catch-up batch.
TEST(Glm4MoeVsLlamaCppMtp, DraftLogitsAndHidden) {
#ifndef LES_MTP_REF
  LES_SKIP_OPTIONAL("llama.cpp MTP reference not built (configure with -DLES_LLAMACPP_SRC=<llama.cpp tree>)");
#else
  LES_REQUIRE_LLAMACPP();
  const std::string dir = temp_dir();
  for (const TypeCase tc : {TypeCase{"f32", false}, TypeCase{"f32", true}, TypeCase{"q8_0", false}, TypeCase{"q4_K", true}}) {
    const synth::SynthSpec s = spec_for(tc.type, tc.qk_norm);
    const std::string path = write_model(s, dir, std::string(tc.type) + ".gguf");
    const std::vector<int32_t> tokens = random_tokens(64, s.n_vocab, 31);
    std::string cmd = LES_MTP_REF;
    cmd.append(" '").append(path).append("' '").append(dir).append("/mtp.f32'");
    for (int32_t t : tokens) cmd.append(" ").append(std::to_string(t));
    cmd.append(" > '").append(dir).append("/mtp.log' 2>&1");
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
    const auto bytes = read_bytes(dir + "/mtp.f32");
    const size_t N = tokens.size(), V = size_t(s.n_vocab), E = size_t(s.n_embd);
    ASSERT_EQ(bytes.size(), (2 * N * V + 2 * N * E) * sizeof(float));
    std::vector<float> ref(bytes.size() / sizeof(float));
    std::memcpy(ref.data(), bytes.data(), bytes.size());
    const float* ref_logits = ref.data();
    const float* ref_h = ref_logits + N * V;
    const float* ref_mtp = ref_h + N * E;
    const float* ref_mtp_h = ref_mtp + N * V;

    auto m = Model::load(path);
    Context ctx(*m, ContextParams{.n_ctx = 128, .n_threads = 2});
    ctx.eval(tokens, true);
    double d_h = 0, d_mtp_h = 0, k_target = 0, k_mtp = 0, d_mtp = 0;
    int agree = 0;
    for (size_t p = 0; p < N; ++p) {
      for (size_t j = 0; j < E; ++j) d_h = std::max(d_h, double(std::fabs(ctx.hidden(int(p))[j] - ref_h[p * E + j])));
      k_target += kld(ref_logits + p * V, ctx.logits(int(p)), int(V));
    }
    // The head on llama.cpp's hidden states (the inputs llama.cpp's head had): the head alone.
    std::vector<float> h_prev(N * E, 0.0f);
    std::copy(ref_h, ref_h + (N - 1) * E, h_prev.begin() + std::ptrdiff_t(E));
    ctx.mtp_eval(tokens, h_prev.data());
    for (size_t p = 0; p < N; ++p) {
      const float* ours = ctx.mtp_logits(int(p));
      const float* theirs = ref_mtp + p * V;
      for (size_t j = 0; j < V; ++j) d_mtp = std::max(d_mtp, double(std::fabs(ours[j] - theirs[j])));
      k_mtp += kld(theirs, ours, int(V));
      agree += argmax(ours, int(V)) == argmax(theirs, int(V));
      for (size_t j = 0; j < E; ++j) d_mtp_h = std::max(d_mtp_h, double(std::fabs(ctx.mtp_hidden(int(p))[j] - ref_mtp_h[p * E + j])));
    }
    k_target /= double(N);
    k_mtp /= double(N);
    std::printf("glm4moe NextN %-5s qk_norm %d: target mean KLD %.3g, hidden max|diff| %.3g | NextN mean KLD %.3g, "
                "max|diff| logits %.3g hidden %.3g, top-1 %d/%zu\n", tc.type, tc.qk_norm, k_target, d_h, k_mtp, d_mtp,
                d_mtp_h, agree, N);
    EXPECT_LE(k_target, 2e-4);
    EXPECT_LE(k_mtp, 2e-4);
    EXPECT_GE(agree, int(N) - int(N) / 50) << "top-1 below 98%";
    if (std::string(tc.type) == "f32") {
      EXPECT_LE(d_h, 1e-4);
      EXPECT_LE(d_mtp, 1e-4);
      EXPECT_LE(d_mtp_h, 1e-4);
      EXPECT_EQ(agree, int(N));
    }
  }
  cleanup(dir);
#endif
}

namespace glm4moe_test {

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

}  // namespace glm4moe_test

// --spec mtp on glm4moe: the NextN head drafts, the target verifies; the tokens and the final
// logits equal plain greedy decoding, resident and with streamed experts.
TEST(Glm4Moe, SpeculativeDecodingWithTheNextNHeadEqualsGreedy) {
  const std::string dir = temp_dir();
  const synth::SynthSpec s = tiny_spec("f32", true);
  const std::string path = write_model(s, dir);
  auto m = Model::load(path);
  Tokenizer tok(vocab_from_gguf(m->gguf()));
  const std::vector<int32_t> prompt = random_tokens(8, s.n_vocab, 44);
  Context plain_ctx(*m, ContextParams{.n_ctx = 128});
  const GenRun plain = generate_run(plain_ctx, tok, prompt, 32, nullptr, 0, false);
  ASSERT_EQ(plain.tokens.size(), 32u);
  for (const auto& [k, adaptive] : std::vector<std::pair<int, bool>>{{1, false}, {3, false}, {4, true}}) {
    MtpDrafter mtp;
    Context ctx(*m, ContextParams{.n_ctx = 128, .n_threads = 2});
    const GenRun r = generate_run(ctx, tok, prompt, 32, &mtp, k, adaptive);
    EXPECT_EQ(r.tokens, plain.tokens) << "k=" << k;
    EXPECT_EQ(r.hash, plain.hash) << "k=" << k;
    if (!adaptive) {
      EXPECT_GT(r.spec.drafted, 0) << "k=" << k;
    }
    std::printf("glm4moe --spec mtp k=%d%s: %d of %d drafts accepted\n", k, adaptive ? " adaptive" : "", r.spec.accepted,
                r.spec.drafted);
  }
  auto streamed = Model::load(path, LoadOptions{.map_experts = false});
  for (Schedule sch : {Schedule::ondemand, Schedule::lookahead}) {
    StreamingExperts ex(*streamed, stream_opts(*streamed, sch, storage::IoMode::pread, 8));
    Context sctx(*streamed, ContextParams{.n_ctx = 128}, &ex);
    MtpDrafter mtp;
    const GenRun r = generate_run(sctx, tok, prompt, 32, &mtp, 3, false);
    EXPECT_EQ(r.tokens, plain.tokens) << schedule_name(sch);
    EXPECT_EQ(r.hash, plain.hash) << schedule_name(sch);
    EXPECT_GT(ex.stats().layers.at(size_t(s.n_layer)).selected, 0u) << "NextN experts never streamed";
  }
  cleanup(dir);
}

TEST(Glm4Moe, StreamedAndPackedExpertsBitIdentical) {
  const std::string dir = temp_dir();
  const synth::SynthSpec s = tiny_spec("q8_0", true);
  const std::string path = write_model(s, dir);
  auto resident = Model::load(path);
  auto streamed = Model::load(path, LoadOptions{.map_experts = false});
  EXPECT_EQ(streamed->weights().layers[1].gate.data, nullptr);
  const std::vector<int32_t> prompt = random_tokens(8, s.n_vocab, 4);
  const auto ref = greedy_hashes(*resident, nullptr, prompt, 10, 1);
  const std::string packed_path = dir + "/packed.gguf";
  pack::pack_model(path, packed_path);
  // Resident packed file: the same logits.
  EXPECT_EQ(greedy_hashes(*Model::load(packed_path), nullptr, prompt, 10, 2), ref) << "resident packed";
  auto packed = Model::load(packed_path, LoadOptions{.map_experts = false});
  ASSERT_NE(packed->packed(), nullptr);
  for (const Model* sm : {streamed.get(), packed.get()}) {
    for (Schedule sch : {Schedule::ondemand, Schedule::lookahead}) {
      for (int slots : {4, 24}) {
        StreamingExperts ex(*sm, stream_opts(*sm, sch, storage::IoMode::pread, slots));
        EXPECT_EQ(greedy_hashes(*sm, &ex, prompt, 10, 2), ref)
            << schedule_name(sch) << " slots=" << slots << (sm == packed.get() ? " packed" : "");
        EXPECT_GT(ex.stats().total().selected, 0u);
      }
    }
  }
  cleanup(dir);
}

TEST(Glm4Moe, MixedPrecisionQuantizes) {
  const std::string dir = temp_dir();
  synth::SynthSpec s = quant_spec("f16", true);
  const std::string in = write_model(s, dir, "in.gguf");
  const gguf::File f = gguf::read_file(in);
  // Every matrix is in one group; the NextN tensors have kinds of their own.
  std::map<std::string, int> kinds;
  for (const auto& g : mixed::tensor_groups(f)) {
    for (const auto& t : g.tensors) EXPECT_EQ(t.name.find("_norm.weight"), std::string::npos) << g.id();
    ++kinds[g.kind];
  }
  EXPECT_GT(kinds["mtp_eh_proj"], 0);
  EXPECT_GT(kinds["mtp_embed"], 0);
  EXPECT_GT(kinds["mtp_head"], 0);
  mixed::MixedOptions mo;
  mo.calib_tokens = random_tokens(64, s.n_vocab, 9);
  mo.sensitivity.n_ctx = 32;
  mo.sensitivity.n_windows = 1;
  mo.sensitivity.n_threads = 2;
  mo.target_bytes = f.file_size * 45 / 100;
  const mixed::MixedRecipe r = mixed::plan_mixed(in, mo);
  EXPECT_LE(r.predicted_bytes, mo.target_bytes);
  const std::string out = dir + "/out.gguf";
  quantize_model(in, out, mixed::plan_from_recipe(r, f, 2));
  EXPECT_LE(gguf::read_file(out).file_size, mo.target_bytes);
  auto m = Model::load(out);
  EXPECT_TRUE(m->weights().mtp.runnable());
  const std::vector<float> l = all_logits(*m, random_tokens(16, s.n_vocab, 3), 2);
  for (float x : l) ASSERT_TRUE(std::isfinite(x));
  cleanup(dir);
}

TEST(Glm4Moe, BadFilesAreRefused) {
  const std::string dir = temp_dir();
  const synth::SynthSpec s = tiny_spec("f32", true);
  const std::string good = write_model(s, dir, "good.gguf");
  const std::string bad = dir + "/bad.gguf";
  auto expect_error = [&](const std::string& what, const std::string& needle) {
    try {
      Model::load(bad);
      ADD_FAILURE() << what << ": loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
  };
  for (const char* key : {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length", "expert_shared_count"}) {
    const std::string k = std::string("glm4moe.") + key;
    rewrite(good, bad, [&](KvList& kv) { erase_key(kv, k); });
    expect_error(k, k);
  }
  // Missing tensors: a dense lead layer's FFN, a selection bias, a q norm of a later layer, the
  // NextN block's eh_proj and experts.
  for (const char* t : {"blk.0.ffn_gate.weight", "blk.2.exp_probs_b.bias", "blk.3.attn_q_norm.weight",
                        "blk.4.nextn.eh_proj.weight", "blk.4.ffn_down_exps.weight"}) {
    rewrite(good, bad, [](KvList&) {}, [&](std::vector<OutTensor>& ts) { drop_tensor(ts, t); });
    expect_error(std::string("missing ") + t, t);
  }
  // A wrong shape: a q bias of half the width.
  rewrite(good, bad, [](KvList&) {}, [](std::vector<OutTensor>& ts) {
    for (OutTensor& t : ts) {
      if (t.name == "blk.1.attn_q.bias") t.ne[0] /= 2;
    }
  });
  expect_error("short q bias", "blk.1.attn_q.bias");
  // Inconsistent keys.
  rewrite(good, bad, [](KvList& kv) { find_key(kv, "glm4moe.leading_dense_block_count")->u64 = 2; });
  expect_error("dense lead count beyond the dense layers", "blk.1.ffn_gate.weight");
  rewrite(good, bad, [](KvList& kv) { find_key(kv, "glm4moe.expert_shared_count")->u64 = 2; });
  expect_error("shared expert count", "ffn_gate_shexp");
  rewrite(good, bad, [](KvList& kv) { erase_key(kv, "glm4moe.nextn_predict_layers"); });
  expect_error("NextN block counted as a trunk layer", "nextn_predict_layers");
  rewrite(good, bad, [](KvList& kv) { find_key(kv, "glm4moe.nextn_predict_layers")->u64 = 2; });
  expect_error("two NextN blocks", "only one");
  rewrite(good, bad, [](KvList& kv) { find_key(kv, "glm4moe.attention.value_length")->u64 = 16; });
  expect_error("value length", "value_length");
  rewrite(good, bad, [](KvList& kv) {
    gguf::Value arr;
    arr.type = gguf::ValueType::ARRAY;
    arr.elem_type = gguf::ValueType::INT32;
    for (int v : {8, 4, 4, 0}) {
      gguf::Value x;
      x.type = gguf::ValueType::INT32;
      x.i64 = v;
      arr.arr.push_back(x);
    }
    kv.emplace_back("glm4moe.rope.dimension_sections", arr);
  });
  expect_error("M-RoPE sections", "M-RoPE");
  rewrite(good, bad, [](KvList& kv) { find_key(kv, "glm4moe.expert_gating_func")->u64 = 3; });
  expect_error("gating function", "expert_gating_func");
  // Without expert_gating_func the gating is sigmoid, as llama.cpp defaults it for glm4moe.
  const std::string no_gating = dir + "/no_gating.gguf";
  rewrite(good, no_gating, [](KvList& kv) { erase_key(kv, "glm4moe.expert_gating_func"); });
  const std::vector<int32_t> toks = random_tokens(12, s.n_vocab, 6);
  EXPECT_EQ(all_logits(*Model::load(no_gating), toks, 1), all_logits(*Model::load(good), toks, 1));
  // Without its own embedding, head norm and head, the NextN block uses the trunk's.
  const std::string shared = dir + "/shared_head.gguf";
  rewrite(good, shared, [](KvList&) {}, [](std::vector<OutTensor>& ts) {
    for (const char* t : {"blk.4.nextn.embed_tokens.weight", "blk.4.nextn.shared_head_head.weight",
                          "blk.4.nextn.shared_head_norm.weight"}) drop_tensor(ts, t);
  });
  auto m = Model::load(shared);
  EXPECT_EQ(m->weights().mtp.embed.data, m->weights().tok_embd.data);
  EXPECT_EQ(m->weights().mtp.head.data, m->weights().output.data);
  EXPECT_EQ(m->weights().mtp.head_norm.data, m->weights().output_norm.data);
  EXPECT_TRUE(m->weights().mtp.runnable());
  cleanup(dir);
}
