// deepseek2 (DeepSeek-V2/V3, Kimi-K2): multi-head latent attention with its compressed cache,
// dense lead layers, shared experts, softmax or grouped sigmoid routing with a selection bias.
// Logits against llama.cpp on synthetic V2-Lite-like and V3-like files (F32, Q8_0, Q4_K), greedy
// continuations, batch = token-by-token, thread counts, streamed and packed experts, the real
// shapes' sizes, and refused bad files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <set>

#include "les/convert/quantize_model.h"
#include "les/gguf/gguf.h"
#include "les/mixed/tensor_groups.h"
#include "les/model/context.h"
#include "les/pack/pack.h"
#include "les/sched/budget.h"
#include "les/sched/streaming_experts.h"
#include "les/synth/synth.h"
#include "les/util/error.h"
#include "les/util/mapped_file.h"
#include "greedy_hashes.h"
#include "llamacpp_ref.h"
#include "model_edit.h"
#include "test_util.h"

using namespace les;
using namespace les::test;

namespace deepseek2_test {

// V2-Lite-like: no q LoRA, softmax routing without renormalisation, one dense lead layer, two
// shared experts, V2-Lite's YaRN (factor 40, mscale_all_dim 0.707). n_embd 128, 4 heads of
// nope 32 + rope 16, latent 128, values 32; 16 experts of 64, 4 used.
synth::SynthSpec lite_spec(const std::string& type = "f32") {
  synth::SynthSpec s = synth::shape_spec("tiny", Arch::deepseek2);
  s.n_layer = 3;
  s.n_ff_shexp = 2 * s.n_ff_exp;
  s.yarn_factor = 40.0f;
  s.yarn_orig_ctx = 4096;
  s.yarn_mscale_all_dim = 0.707f;
  s.type = type;
  s.seed = 21;
  return s;
}

// V3-like: q LoRA, sigmoid scores with a selection bias, 4 expert groups of which 2 are eligible,
// weights renormalised and scaled by 2.5, two dense lead layers, V3's YaRN (mscale_all_dim 1).
synth::SynthSpec v3_spec(const std::string& type = "f32") {
  synth::SynthSpec s = synth::shape_spec("tiny", Arch::deepseek2);
  s.n_layer = 4;
  s.n_dense_lead = 2;
  s.q_lora_rank = 64;
  s.gating = Gating::sigmoid;
  s.selection_bias = true;
  s.n_expert_groups = 4;
  s.n_group_used = 2;
  s.norm_topk = true;
  s.expert_weights_scale = 2.5f;
  s.yarn_factor = 40.0f;
  s.yarn_orig_ctx = 4096;
  s.yarn_mscale_all_dim = 1.0f;
  s.type = type;
  s.seed = 22;
  return s;
}

// The same with rows of 256 wherever the shape allows (K-quants are used there; attn_k_b's rows
// of nope 64 fall back as llama-quantize's rules say).
synth::SynthSpec wide(synth::SynthSpec s) {
  s.n_embd = 256;
  s.head_dim = 96;  // nope 64 + rope 32
  s.n_rot = 32;
  s.kv_lora_rank = 256;
  s.v_head_dim = 64;  // 4 heads x 64 = 256
  if (s.q_lora_rank > 0) s.q_lora_rank = 256;
  const int shared = s.n_ff_shexp / s.n_ff_exp;
  s.n_ff_exp = 256;
  s.n_ff_shexp = shared * 256;
  s.n_ff_dense = 512;
  return s;
}

synth::SynthSpec spec_of(const std::string& variant, const std::string& type) {
  const synth::SynthSpec s = variant == "lite" ? lite_spec(type) : v3_spec(type);
  return type == "f32" ? s : wide(s);
}

// For comparing quantized files with llama.cpp: smaller residual updates (0.05 of the stream per
// layer, 0.5 for layer 0 instead of the defaults 0.2 and 1.5). les and llama.cpp sum floats in
// different orders (llama.cpp: tinyBLAS and vec_dot lanes, a polynomial expf), so activations
// differ in their last bits; an 8-bit activation of Q8_0 / Q8_K may then round to the other level,
// and a random network carries that through its layers and the KV cache. At the default updates
// the 3-4 layer files reach mean KLD 2.5e-4 to 8e-4 against llama.cpp (les against itself with
// only the attention's sum over positions reversed: up to 2.5e-4 on Q4_K); every intermediate up
// to the first rounded activation agrees to the last bits, and F32 files agree to 1e-12. With the
// smaller updates, seeds 5, 9, 17, 22, 31 of both files in Q8_0 and Q4_K stay below 1e-4.
synth::SynthSpec compared(synth::SynthSpec s) {
  if (s.type != "f32") {
    s.update = 0.05f;
    s.first_update = 0.5f;
  }
  return s;
}

std::string write_model(const synth::SynthSpec& s, const ScopedDir& d, const std::string& name = "model.gguf") {
  const std::string p = d.file(name);
  synth::write_synth_model(s, p);
  return p;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::vector<int32_t> v;
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    v.push_back(static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab - 3)));
  }
  return v;
}

// log-softmax in double.
std::vector<double> log_probs(const float* x, int n) {
  double mx = x[0];
  for (int i = 1; i < n; ++i) mx = std::max(mx, static_cast<double>(x[i]));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = static_cast<double>(x[i]) - lse;
  return out;
}

struct Agreement {
  double mean_kld = 0;  // mean over positions of KL(llama.cpp || ours)
  double max_kld = 0;
  double max_abs = 0;   // max |ours - llama.cpp| over all logits
  int positions = 0;
  int top1 = 0;         // positions with the same argmax
};

// All logits of each sequence from one eval (a fresh context each), with n_threads threads.
std::vector<float> our_logits(const Model& m, const std::vector<std::vector<int32_t>>& seqs, int n_threads) {
  std::vector<float> out;
  const size_t nv = static_cast<size_t>(m.config().n_vocab);
  for (const auto& s : seqs) {
    Context ctx(m, ContextParams{.n_ctx = 256, .n_threads = n_threads});
    ctx.eval(s, true);
    out.insert(out.end(), ctx.logits(0), ctx.logits(0) + nv * s.size());
  }
  return out;
}

Agreement agreement(const std::vector<float>& ours, const std::vector<float>& ref, int nv) {
  Agreement a;
  for (size_t row = 0; row * static_cast<size_t>(nv) < ref.size(); ++row) {
    const float* o = ours.data() + row * static_cast<size_t>(nv);
    const float* r = ref.data() + row * static_cast<size_t>(nv);
    const std::vector<double> lo = log_probs(o, nv), lr = log_probs(r, nv);
    double kld = 0;
    for (int v = 0; v < nv; ++v) {
      kld += std::exp(lr[static_cast<size_t>(v)]) * (lr[static_cast<size_t>(v)] - lo[static_cast<size_t>(v)]);
      a.max_abs = std::max(a.max_abs, static_cast<double>(std::fabs(o[v] - r[v])));
    }
    a.mean_kld += kld;
    a.max_kld = std::max(a.max_kld, kld);
    a.top1 += std::max_element(o, o + nv) - o == std::max_element(r, r + nv) - r;
    ++a.positions;
  }
  if (a.positions) a.mean_kld /= a.positions;
  return a;
}

std::vector<float> batch_logits(const Model& m, const std::vector<int32_t>& tokens, int threads) {
  return our_logits(m, {tokens}, threads);
}

// A copy of GGUF `in` with its metadata through edit_kv and each tensor through edit_tensor
// (which may rename it, change its shape to one of the same size, or drop it by returning false).
void rewrite(const std::string& in, const std::string& out, const std::function<void(KvList&)>& edit_kv,
             const std::function<bool(std::string&, std::vector<int64_t>&)>& edit_tensor = {}) {
  const gguf::File f = gguf::read_file(in);
  const MappedFile map = MappedFile::open(in);
  KvList kv = f.kv;
  if (edit_kv) edit_kv(kv);
  gguf::Writer w;
  w.set_alignment(f.alignment);
  for (auto& [k, v] : kv) {
    if (k != "general.alignment") w.add(k, v);
  }
  for (const auto& t : f.tensors) {
    std::string name = t.name;
    std::vector<int64_t> ne = t.ne;
    if (edit_tensor && !edit_tensor(name, ne)) continue;
    w.add_tensor(name, ne, t.type, static_cast<const void*>(map.data() + f.data_offset + t.offset));
  }
  w.write(out);
}

void erase_key(KvList& kv, const std::string& key) {
  kv.erase(std::remove_if(kv.begin(), kv.end(), [&](const auto& p) { return p.first == key; }), kv.end());
}

}  // namespace deepseek2_test

using namespace deepseek2_test;

TEST(Deepseek2, ConfigAndCompressedCache) {
  const ScopedDir dir;
  {
    const synth::SynthSpec s = lite_spec();
    auto m = Model::load(write_model(s, dir, "lite.gguf"));
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, Arch::deepseek2);
    EXPECT_TRUE(c.mla());
    EXPECT_EQ(c.n_lora_q, 0);
    EXPECT_EQ(c.n_lora_kv, 128);
    EXPECT_EQ(c.head_dim_k_mla, 48);
    EXPECT_EQ(c.head_dim_v_mla, 32);
    EXPECT_EQ(c.n_rot, 16);
    EXPECT_EQ(c.n_head_kv, 1);
    EXPECT_EQ(c.head_dim_k, 128 + 16);  // the cache row
    EXPECT_EQ(c.rope_type, RopeType::norm);
    EXPECT_EQ(c.n_layer_dense_lead, 1);
    EXPECT_EQ(c.n_ff_dense, 4 * 64);
    EXPECT_EQ(c.n_ff_shexp, 2 * 64);
    EXPECT_EQ(c.gating, Gating::softmax);
    EXPECT_FALSE(c.norm_topk);
    EXPECT_FALSE(c.has_experts(0));
    EXPECT_TRUE(c.has_experts(1));
    EXPECT_TRUE(m->weights().layers[0].wq.present());
    EXPECT_FALSE(m->weights().layers[0].wq_a.present());
    // YaRN with V2-Lite's mscale = mscale_all_dim = 0.707: the rope keeps unit magnitude
    // (attn_factor 1 / (1 + 0.1 ln 40)) and the scores get (1 + 0.1 * 0.707 ln 40)^2 / sqrt(48).
    EXPECT_NEAR(c.yarn_attn_factor, 1.0 / (1.0 + 0.1 * std::log(40.0)), 1e-6);
    const double mscale = 1.0 + 0.1 * 0.707 * std::log(40.0);
    EXPECT_NEAR(c.mla_kq_scale, mscale * mscale / std::sqrt(48.0), 1e-5);
    // The cache holds latent + rope key per position and layer, not per-head K and V.
    const int n_ctx = 40;
    Context ctx(*m, ContextParams{.n_ctx = n_ctx});
    const uint64_t kv = 3ull * n_ctx * (128 + 16) * sizeof(float);
    const uint64_t per_head_kv = 3ull * n_ctx * 4 * (48 + 32) * sizeof(float);
    EXPECT_GE(ctx.state_bytes(), kv);
    EXPECT_LT(ctx.state_bytes(), kv + per_head_kv);
    EXPECT_EQ(plan_budget(*m, 1ull << 30, n_ctx, 1, 1 << 20).kv, kv);
  }
  {
    const synth::SynthSpec s = v3_spec();
    auto m = Model::load(write_model(s, dir, "v3.gguf"));
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.n_lora_q, 64);
    EXPECT_EQ(c.gating, Gating::sigmoid);
    EXPECT_TRUE(c.norm_topk);
    EXPECT_FLOAT_EQ(c.expert_weights_scale, 2.5f);
    EXPECT_EQ(c.n_expert_groups, 4);
    EXPECT_EQ(c.n_group_used, 2);
    EXPECT_EQ(c.n_layer_dense_lead, 2);
    EXPECT_EQ(c.n_ff_shexp, 64);
    const LayerWeights& L3 = m->weights().layers[3];
    EXPECT_TRUE(L3.wq_a.present() && L3.wq_b.present() && L3.q_a_norm.present());
    EXPECT_FALSE(L3.wq.present());
    EXPECT_TRUE(L3.exp_probs_b.present());
    EXPECT_FALSE(m->weights().layers[1].router.present());
    // mscale_all_dim 1: the same factor for both, (1 + 0.1 ln 40)^2 on the scores.
    const double mscale = 1.0 + 0.1 * std::log(40.0);
    EXPECT_NEAR(c.mla_kq_scale, mscale * mscale / std::sqrt(48.0), 1e-5);
  }
}

TEST(Deepseek2, NamedShapes) {
  // Parameters from the size of an F32 file (4 bytes each; headers and padding are < 0.01%).
  auto params = [](synth::SynthSpec s) {
    s.type = "f32";
    return static_cast<double>(synth::synth_file_bytes(s)) / 4.0;
  };
  const synth::SynthSpec lite = synth::shape_spec("deepseek-v2-lite");
  EXPECT_EQ(lite.arch, Arch::deepseek2);
  EXPECT_EQ(lite.n_layer, 27);
  EXPECT_EQ(lite.q_lora_rank, 0);
  EXPECT_EQ(lite.kv_lora_rank, 512);
  EXPECT_EQ(lite.head_dim, 192);
  EXPECT_EQ(lite.n_rot, 64);
  EXPECT_EQ(lite.n_dense_lead, 1);
  EXPECT_EQ(lite.n_ff_shexp, 2 * 1408);
  EXPECT_EQ(lite.gating, Gating::softmax);
  const double p_lite = params(lite);
  std::printf("deepseek-v2-lite: %.3f B parameters\n", p_lite / 1e9);
  EXPECT_NEAR(p_lite / 1e9, 15.7, 0.1);  // DeepSeek-V2-Lite: 15.7B
  const synth::SynthSpec v3 = synth::shape_spec("deepseek-v3");
  EXPECT_EQ(v3.n_expert_groups, 8);
  EXPECT_EQ(v3.n_group_used, 4);
  EXPECT_EQ(v3.gating, Gating::sigmoid);
  EXPECT_TRUE(v3.selection_bias);
  EXPECT_EQ(v3.n_dense_lead, 3);
  const double p_v3 = params(v3);
  std::printf("deepseek-v3: %.1f B parameters\n", p_v3 / 1e9);
  EXPECT_NEAR(p_v3 / 1e9, 671.0, 2.0);  // DeepSeek-V3: 671B without its MTP module
  const synth::SynthSpec k2 = synth::shape_spec("kimi-k2");
  EXPECT_EQ(k2.n_expert, 384);
  EXPECT_EQ(k2.n_head, 64);
  const double p_k2 = params(k2);
  std::printf("kimi-k2: %.3f T parameters\n", p_k2 / 1e12);
  EXPECT_NEAR(p_k2 / 1e12, 1.03, 0.01);  // Kimi-K2: 1.04T total (1.03T without the MTP layer)
  // Cut with n_layer: the same layers, fewer of them.
  synth::SynthSpec cut = v3;
  cut.n_layer = 5;
  cut.type = "q4_k_m";
  EXPECT_NO_THROW(synth::validate(cut));
  EXPECT_LT(synth::synth_file_bytes(cut), synth::synth_file_bytes(v3) / 8);
  // Any shape can be made deepseek2; bad fields are refused by name.
  EXPECT_NO_THROW(synth::validate(synth::shape_spec("small", Arch::deepseek2)));
  auto refused = [](const std::function<void(synth::SynthSpec&)>& f, const char* needle) {
    synth::SynthSpec s = v3_spec();
    f(s);
    const std::string e = error_of([&] { synth::validate(s); });
    EXPECT_NE(e.find(needle), std::string::npos) << e;
  };
  refused([](auto& s) { s.n_group_used = 4; }, "groups used");
  refused([](auto& s) { s.n_ff_shexp = 100; }, "ff-shared");
  refused([](auto& s) { s.n_rot = s.head_dim; }, "rope-dims");
  refused([](auto& s) { s.n_dense_lead = s.n_layer; }, "dense-lead");
  synth::SynthSpec q = synth::shape_spec("tiny");
  q.kv_lora_rank = 64;
  EXPECT_NE(error_of([&] { synth::validate(q); }).find("deepseek2 fields"), std::string::npos);
  synth::SynthSpec y = synth::shape_spec("tiny");
  y.yarn_factor = 40.0f;  // YaRN: gpt-oss and deepseek2 only
  EXPECT_NE(error_of([&] { synth::validate(y); }).find("yarn"), std::string::npos);
}

struct Case {
  const char* variant;  // "lite" or "v3"
  const char* type;
};

class Deepseek2VsLlamaCpp : public ::testing::TestWithParam<Case> {};

TEST_P(Deepseek2VsLlamaCpp, Logits) {
  LES_REQUIRE_LLAMACPP();
  const Case c = GetParam();
  const ScopedDir dir;
  const synth::SynthSpec s = compared(spec_of(c.variant, c.type));
  const std::string path = write_model(s, dir);
  // One prompt longer than 64 tokens (several batch blocks of the kernels), two short ones.
  const std::vector<std::vector<int32_t>> seqs = {random_tokens(80, s.n_vocab, 3), random_tokens(17, s.n_vocab, 4),
                                                  random_tokens(33, s.n_vocab, 5)};
  const std::vector<float> ref = llamacpp_logits(path, seqs, dir.path);
  auto m = Model::load(path);
  const std::vector<float> ours = our_logits(*m, seqs, 2);
  ASSERT_EQ(ref.size(), ours.size()) << "llama.cpp produced no or partial logits";
  EXPECT_EQ(our_logits(*m, seqs, 1), ours) << "logits depend on the thread count";
  const Agreement a = agreement(ours, ref, s.n_vocab);
  std::printf("deepseek2 %-4s %-5s mean KLD %.3g (max %.3g)  top-1 %d/%d  max|diff| %.3g\n", c.variant, c.type,
              a.mean_kld, a.max_kld, a.top1, a.positions, a.max_abs);
  EXPECT_LE(a.mean_kld, 2e-4);
  EXPECT_GE(a.top1 * 100, 98 * a.positions);
  if (std::string(c.type) == "f32") {
    EXPECT_LE(a.max_abs, 1e-3);
    EXPECT_EQ(a.top1, a.positions);
  }
}

INSTANTIATE_TEST_SUITE_P(Files, Deepseek2VsLlamaCpp,
                         ::testing::Values(Case{"lite", "f32"}, Case{"lite", "q8_0"}, Case{"lite", "q4_K"},
                                           Case{"v3", "f32"}, Case{"v3", "q8_0"}, Case{"v3", "q4_K"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.variant) + "_" + info.param.type;
                         });

TEST(Deepseek2VsLlamaCppGreedy, ContinuationsEqual) {
  LES_REQUIRE_LLAMACPP();
  const ScopedDir dir;
  for (const std::string variant : {"lite", "v3"}) {
    for (const std::string type : {"f32", "q8_0"}) {
      const synth::SynthSpec s = compared(spec_of(variant, type));
      const std::string path = write_model(s, dir, variant + type + ".gguf");
      auto m = Model::load(path);
      const std::vector<int32_t> prompt = random_tokens(6, s.n_vocab, 7);
      const int n_gen = 24;
      const std::vector<int32_t> theirs = llamacpp_greedy(path, prompt, n_gen, dir.path);
      Context ctx(*m, ContextParams{.n_ctx = 64, .n_threads = 2});
      ctx.eval(prompt, false);
      std::vector<int32_t> ours;
      for (int k = 0; k < n_gen; ++k) {
        const float* lg = ctx.last_logits();
        ours.push_back(static_cast<int32_t>(std::max_element(lg, lg + s.n_vocab) - lg));
        ctx.eval(std::span<const int32_t>(&ours.back(), 1), false);
      }
      EXPECT_EQ(ours, theirs) << variant << " " << type;
    }
  }
}

TEST(Deepseek2, PrefillEqualsTokenByTokenAndThreadCounts) {
  const ScopedDir dir;
  for (const auto& [variant, type] : {std::pair<std::string, std::string>{"lite", "f32"}, {"v3", "q4_K"}}) {
    const synth::SynthSpec s = spec_of(variant, type);
    auto m = Model::load(write_model(s, dir, variant + type + ".gguf"));
    const std::vector<int32_t> tokens = random_tokens(100, s.n_vocab, 9);
    const std::vector<float> batch = batch_logits(*m, tokens, 1);
    EXPECT_EQ(batch_logits(*m, tokens, 3), batch) << variant << ": logits depend on the thread count";
    {
      Context chunked(*m, ContextParams{.n_ctx = 256, .n_threads = 2, .n_batch = 7});
      chunked.eval(tokens, true);
      EXPECT_TRUE(std::equal(batch.begin(), batch.end(), chunked.logits(0))) << variant << ": batches of 7 differ";
    }
    Context ctx(*m, ContextParams{.n_ctx = 256, .n_threads = 2});
    const size_t nv = static_cast<size_t>(s.n_vocab);
    for (size_t i = 0; i < tokens.size(); ++i) {
      ctx.eval(std::span<const int32_t>(&tokens[i], 1), false);
      ASSERT_TRUE(std::equal(ctx.last_logits(), ctx.last_logits() + nv, batch.begin() + static_cast<std::ptrdiff_t>(i * nv)))
          << variant << ": token-by-token differs from one batch at position " << i;
    }
    // A rollback forgets positions: evaluating other tokens there gives a fresh context's logits.
    ctx.rollback(50);
    const std::vector<int32_t> other = random_tokens(5, s.n_vocab, 10);
    ctx.eval(other, false);
    std::vector<int32_t> ref(tokens.begin(), tokens.begin() + 50);
    ref.insert(ref.end(), other.begin(), other.end());
    Context fresh(*m, ContextParams{.n_ctx = 256, .n_threads = 1});
    fresh.eval(ref, false);
    EXPECT_TRUE(std::equal(ctx.last_logits(), ctx.last_logits() + nv, fresh.last_logits())) << variant << ": rollback";
  }
}

TEST(Deepseek2, StreamedAndPackedExpertsBitIdentical) {
  const ScopedDir dir;
  for (const std::string variant : {"lite", "v3"}) {
    const synth::SynthSpec s = spec_of(variant, "q8_0");
    const std::string path = write_model(s, dir, variant + ".gguf");
    auto resident = Model::load(path);
    auto streamed = Model::load(path, LoadOptions{.map_experts = false});
    const int first_routed = s.n_dense_lead;
    EXPECT_EQ(streamed->weights().layers[static_cast<size_t>(first_routed)].gate.data, nullptr);
    const std::vector<int32_t> prompt = random_tokens(8, s.n_vocab, 4);
    const auto ref = greedy_hashes(*resident, nullptr, prompt, 10, 1);
    const std::string packed_path = dir.file(variant + "-packed.gguf");
    pack::pack_model(path, packed_path);
    auto packed = Model::load(packed_path, LoadOptions{.map_experts = false});
    ASSERT_NE(packed->packed(), nullptr);
    for (const Model* sm : {streamed.get(), packed.get()}) {
      for (Schedule sch : {Schedule::ondemand, Schedule::lookahead}) {
        for (int slots : {4, 24}) {
          StreamingExperts ex(*sm, stream_opts(*sm, sch, storage::IoMode::pread, slots));
          EXPECT_EQ(greedy_hashes(*sm, &ex, prompt, 10, 2), ref)
              << variant << " " << schedule_name(sch) << " slots=" << slots << (sm == packed.get() ? " packed" : "");
          EXPECT_GT(ex.stats().total().selected, 0u);
          for (int il = 0; il < first_routed; ++il) {
            EXPECT_EQ(ex.stats().layers.at(static_cast<size_t>(il)).selected, 0u) << "dense lead layer " << il;
          }
        }
      }
    }
  }
}

TEST(Deepseek2, MixedPrecisionGroupsAndReplacedTensors) {
  const ScopedDir dir;
  const std::string path = write_model(v3_spec("q8_0"), dir);
  const gguf::File f = gguf::read_file(path);
  std::set<std::string> kinds;
  for (const mixed::TensorGroup& g : mixed::tensor_groups(f)) {
    if (g.layer == 3) kinds.insert(g.kind);
    EXPECT_EQ(g.routed_experts, g.kind == "ffn_gate_up" || g.kind == "ffn_down" ? g.layer >= 2 : false) << g.id();
  }
  for (const char* k : {"attn_q_a", "attn_q_b", "attn_kv_a_mqa", "attn_k_b", "attn_v_b", "attn_output", "router",
                        "shexp", "ffn_gate_up", "ffn_down"}) {
    EXPECT_TRUE(kinds.count(k)) << k;
  }
  // Mixed precision measures a group by swapping its tensors in memory: each MLA matrix and each
  // dense lead FFN matrix is reached (the logits change), and restoring gives the same bits.
  auto m = Model::load(path, LoadOptions{.resident = ResidentMemory::read});
  const std::vector<int32_t> toks = random_tokens(12, m->config().n_vocab, 8);
  const std::vector<float> before = batch_logits(*m, toks, 1);
  const MappedFile map = MappedFile::open(path);
  ThreadPool pool(1);
  for (const char* name : {"blk.3.attn_q_a.weight", "blk.3.attn_q_b.weight", "blk.2.attn_kv_a_mqa.weight",
                           "blk.2.attn_k_b.weight", "blk.3.attn_v_b.weight", "blk.0.ffn_gate.weight",
                           "blk.1.ffn_up.weight", "blk.1.ffn_down.weight"}) {
    const gguf::TensorInfo* t = m->gguf().find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    const int64_t rows = t->n_elements() / t->ne[0];
    std::vector<uint8_t> q(row_bytes(Type::Q4_0, t->ne[0]) * static_cast<size_t>(rows));
    convert_rows(map.data() + m->gguf().data_offset + t->offset, t->type, Type::Q4_0, t->ne, 0, rows, q.data(), name,
                 {}, pool);
    m->replace_tensor(name, Type::Q4_0, q);
    EXPECT_NE(batch_logits(*m, toks, 1), before) << name;
    m->restore_tensor(name);
    EXPECT_EQ(batch_logits(*m, toks, 1), before) << name;
  }
}

TEST(Deepseek2, BadFilesAreRefused) {
  const ScopedDir dir;
  const synth::SynthSpec s = v3_spec();
  const std::string good = write_model(s, dir, "good.gguf");
  const std::string bad = dir.file("bad.gguf");
  auto expect_error = [&](const std::string& what, const std::string& needle) {
    const std::string e = error_of([&] { Model::load(bad); });
    EXPECT_NE(e.find(needle), std::string::npos) << what << ": " << (e.empty() ? "loaded" : e);
  };
  const std::string p = "deepseek2.";
  for (const char* key : {"attention.kv_lora_rank", "rope.dimension_count", "expert_feed_forward_length",
                          "expert_shared_count", "attention.layer_norm_rms_epsilon"}) {
    rewrite(good, bad, [&](KvList& kv) { erase_key(kv, p + key); });
    expect_error(key, p + key);
  }
  // Inconsistent keys.
  rewrite(good, bad, [&](KvList& kv) { find_kv(kv, p + "attention.key_length")->u64 = 48; });
  expect_error("key_length not the cache row", "key_length");
  rewrite(good, bad, [&](KvList& kv) { find_kv(kv, p + "attention.head_count_kv")->u64 = 4; });
  expect_error("several kv heads", "head_count_kv");
  rewrite(good, bad, [&](KvList& kv) { find_kv(kv, p + "attention.key_length_mla")->u64 = 16; });
  expect_error("no nope part", "key_length_mla");
  rewrite(good, bad, [&](KvList& kv) { find_kv(kv, p + "attention.q_lora_rank")->u64 = 0; });
  expect_error("q LoRA tensors but q_lora_rank 0", "attn_q.weight");
  rewrite(good, bad, [&](KvList& kv) { find_kv(kv, p + "expert_group_used_count")->u64 = 4; });
  expect_error("groups used >= groups", "expert_group_used_count");
  // An older conversion (unsplit attn_kv_b, no *_length_mla keys) and unsupported variants.
  rewrite(good, bad, [&](KvList& kv) {
    erase_key(kv, p + "attention.key_length_mla");
    erase_key(kv, p + "attention.value_length_mla");
  });
  expect_error("old conversion", "convert the model again");
  rewrite(good, bad, [&](KvList& kv) {
    gguf::Value v;
    v.type = gguf::ValueType::UINT32;
    v.u64 = 1;
    kv.emplace_back(p + "nextn_predict_layers", v);
  });
  expect_error("MTP blocks", "nextn_predict_layers");
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>&) {
    if (name == "blk.3.attn_v_b.weight") name = "blk.3.attn_kv_b.weight";
    return true;
  });
  expect_error("attn_kv_b tensor", "attn_kv_b");
  // Tensors: missing, of the wrong shape.
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>&) { return name != "blk.2.attn_kv_a_mqa.weight"; });
  expect_error("missing tensor", "blk.2.attn_kv_a_mqa.weight");
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>& ne) {
    if (name == "blk.1.attn_k_b.weight") std::swap(ne[1], ne[2]);  // [nope, heads, latent]
    return true;
  });
  expect_error("attn_k_b of the wrong shape", "blk.1.attn_k_b.weight");
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>&) { return name != "blk.0.ffn_up.weight"; });
  expect_error("dense lead layer without its FFN", "blk.0.ffn_up.weight");
  // The good file loads.
  EXPECT_NO_THROW(Model::load(good));
}

TEST(Deepseek2, SynthAttentionIsLocal) {
  // MLA has no q/k biases: the locality comes through a constant stream coordinate that the rope
  // rows of the query and of attn_kv_a_mqa weigh by the bias profile. Then an attention output is
  // an average over recent tokens: close to the previous token's, far from one 24 tokens back.
  // Without it (--attn-window 0) attention averages the whole past: both alike.
  const ScopedDir dir;
  auto similarity = [&](const synth::SynthSpec& s, const std::string& name) {
    auto m = Model::load(write_model(s, dir, name));
    const int64_t E = s.n_embd;
    std::vector<float> out;
    Context ctx(*m, ContextParams{.n_ctx = 128, .n_threads = 2});
    ctx.set_observer([&](int layer, const char* what, const float* x, int64_t n, int64_t w) {
      if (layer == 2 && std::string(what) == "mixer_out") out.assign(x, x + n * w);
    });
    ctx.eval(random_tokens(96, s.n_vocab, 12), false);
    auto cosine = [&](int a, int b) {
      double ab = 0, aa = 0, bb = 0;
      for (int64_t j = 0; j < E; ++j) {
        const double x = out[static_cast<size_t>(a * E + j)], y = out[static_cast<size_t>(b * E + j)];
        ab += x * y;
        aa += x * x;
        bb += y * y;
      }
      return ab / std::sqrt(aa * bb);
    };
    double near = 0, far = 0;
    for (int t = 48; t < 96; ++t) {
      near += cosine(t, t - 1) / 48;
      far += cosine(t, t - 24) / 48;
    }
    return std::pair<double, double>{near, far};
  };
  for (const std::string variant : {"lite", "v3"}) {
    synth::SynthSpec s = spec_of(variant, "f32");
    const auto [near, far] = similarity(s, variant + "-local.gguf");
    s.attn_window = 0.0f;
    const auto [flat_near, flat_far] = similarity(s, variant + "-flat.gguf");
    std::printf("deepseek2 %s synth attention output similarity to t-1 / t-24: local %.3f / %.3f, no locality %.3f / %.3f\n",
                variant.c_str(), near, far, flat_near, flat_far);
    EXPECT_GT(near, far + 0.2) << variant;
    EXPECT_LT(flat_near - flat_far, 0.1) << variant;
  }
}

