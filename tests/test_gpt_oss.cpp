// gpt-oss (sliding-window layers, attention sinks, q/k/v/o biases, YaRN, softmax-weight routing
// with router and expert biases, clamped SwiGLU, MXFP4 experts): logits against llama.cpp on
// synthetic models (mean KLD, top-1), greedy continuations, batch = token-by-token, thread-count
// invariance, streamed and packed experts, the configuration keys, refused bad files, the real
// shapes' sizes, every synth type and mixed precision.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>

#include "les/convert/quantize_model.h"
#include "les/gguf/gguf.h"
#include "les/mixed/mixed_plan.h"
#include "les/mixed/tensor_groups.h"
#include "les/model/attention_core.h"
#include "les/model/context.h"
#include "les/pack/pack.h"
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

namespace {

// A small gpt-oss whose rows are 256 wide everywhere (every K-quant fits): 4 layers (0 and 2
// sliding, window 8), 8 heads of 64 over n_embd 256 (heads x head_dim != n_embd, as in the real
// model), 2 KV heads, 8 experts of 256 (4 used), YaRN 32x over 4096 positions.
synth::SynthSpec gpt_oss_spec(const std::string& type = "f32") {
  synth::SynthSpec s = synth::shape_spec("tiny", Arch::gpt_oss);
  s.n_layer = 4;
  s.n_embd = 256;
  s.n_head = 8;
  s.n_head_kv = 2;
  s.head_dim = 64;
  s.n_expert = 8;
  s.n_expert_used = 4;
  s.n_ff_exp = 256;
  s.n_vocab = 512;
  s.sliding_window = 8;
  s.type = type;
  s.seed = 5;
  return s;
}

std::string write_model(const synth::SynthSpec& s, const ScopedDir& d, const std::string& name = "model.gguf") {
  const std::string path = d.file(name);
  synth::write_synth_model(s, path);
  return path;
}

std::vector<int32_t> random_tokens(int n, int n_vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(n_vocab - 3));  // no control tokens
  return v;
}

// log-softmax in double.
std::vector<double> log_probs(const float* logits, int n) {
  const double mx = *std::max_element(logits, logits + n);
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> lp(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) lp[static_cast<size_t>(i)] = static_cast<double>(logits[i]) - lse;
  return lp;
}

struct Agreement {
  double mean_kld = 0, max_kld = 0;  // KL(llama.cpp || ours) per position
  double max_abs = 0;                // max |ours - llama.cpp| over all logits
  int positions = 0, top1_agree = 0;
  double top1() const { return positions ? static_cast<double>(top1_agree) / positions : 0.0; }
};

// Every position of each sequence: llama.cpp (one batch from an empty context) against ours
// (batches of n_batch, two threads).
Agreement compare(const std::string& path, const std::vector<std::vector<int32_t>>& seqs, const ScopedDir& d,
                  int n_batch = 32) {
  Agreement a;
  const std::vector<float> ref = llamacpp_logits(path, seqs, d.path);
  auto m = Model::load(path);
  const int nv = m->config().n_vocab;
  size_t total = 0;
  for (const auto& s : seqs) total += s.size();
  EXPECT_EQ(ref.size(), total * static_cast<size_t>(nv)) << "llama.cpp produced no or partial logits";
  if (ref.size() != total * static_cast<size_t>(nv)) return a;
  size_t row = 0;
  for (const auto& s : seqs) {
    Context ctx(*m, ContextParams{.n_ctx = 256, .n_threads = 2, .n_batch = n_batch});
    ctx.eval(s, true);
    for (int i = 0; i < ctx.n_outputs(); ++i, ++row) {
      const float* ours = ctx.logits(i);
      const float* theirs = ref.data() + row * static_cast<size_t>(nv);
      const std::vector<double> lo = log_probs(ours, nv), lt = log_probs(theirs, nv);
      double kld = 0;
      for (int v = 0; v < nv; ++v) {
        kld += std::exp(lt[static_cast<size_t>(v)]) * (lt[static_cast<size_t>(v)] - lo[static_cast<size_t>(v)]);
        a.max_abs = std::max(a.max_abs, static_cast<double>(std::fabs(ours[v] - theirs[v])));
      }
      a.mean_kld += kld;
      a.max_kld = std::max(a.max_kld, kld);
      ++a.positions;
      a.top1_agree += std::max_element(ours, ours + nv) - ours == std::max_element(theirs, theirs + nv) - theirs;
    }
  }
  if (a.positions) a.mean_kld /= a.positions;
  return a;
}

// The prompts of the comparisons: 20, 80 and 60 tokens (the window of 8 and batches of 32 matter).
std::vector<std::vector<int32_t>> prompts(int n_vocab) {
  return {random_tokens(20, n_vocab, 3), random_tokens(80, n_vocab, 4), random_tokens(60, n_vocab, 5)};
}

// All logits of `tokens` evaluated in one call.
std::vector<float> batch_logits(const Model& m, const std::vector<int32_t>& tokens, int threads = 1, int n_batch = 512) {
  Context ctx(m, ContextParams{.n_ctx = 256, .n_threads = threads, .n_batch = n_batch});
  ctx.eval(tokens, true);
  const size_t nv = static_cast<size_t>(m.config().n_vocab);
  return std::vector<float>(ctx.logits(0), ctx.logits(0) + nv * tokens.size());
}

// Copies a GGUF file with its metadata through edit_kv and each tensor through edit_tensor, which
// may rename, reshape or retype it (with new bytes) or return false to leave it out.
using TensorRewrite = std::function<bool(std::string& name, std::vector<int64_t>& ne, Type& type, std::vector<uint8_t>& bytes)>;
void rewrite(const std::string& in, const std::string& out, const std::function<void(KvList&)>& edit_kv,
             const TensorRewrite& edit_tensor = {}) {
  const gguf::File f = gguf::read_file(in);
  const MappedFile map = MappedFile::open(in);
  KvList kv = f.kv;
  if (edit_kv) edit_kv(kv);
  gguf::Writer w;
  w.set_alignment(f.alignment);
  for (auto& [k, v] : kv) {
    if (k != "general.alignment") w.add(k, v);
  }
  std::vector<std::vector<uint8_t>> keep;
  keep.reserve(f.tensors.size());
  for (const auto& t : f.tensors) {
    const uint8_t* src = map.data() + f.data_offset + t.offset;
    std::string name = t.name;
    std::vector<int64_t> ne = t.ne;
    Type type = t.type;
    std::vector<uint8_t> bytes(src, src + t.n_bytes);
    if (edit_tensor && !edit_tensor(name, ne, type, bytes)) continue;
    keep.push_back(std::move(bytes));
    w.add_tensor(name, ne, type, static_cast<const void*>(keep.back().data()));
  }
  w.write(out);
}

void erase_key(KvList& kv, const std::string& key) {
  kv.erase(std::remove_if(kv.begin(), kv.end(), [&](const auto& p) { return p.first == key; }), kv.end());
}

gguf::Value u32_value(uint64_t x) {
  gguf::Value v;
  v.type = gguf::ValueType::UINT32;
  v.u64 = x;
  return v;
}

gguf::Value f32_value(double x) {
  gguf::Value v;
  v.type = gguf::ValueType::FLOAT32;
  v.f64 = x;
  return v;
}

void set_key(KvList& kv, const std::string& key, const gguf::Value& v) {
  if (gguf::Value* old = find_kv(kv, key)) {
    *old = v;
  } else {
    kv.emplace_back(key, v);
  }
}

gguf::Value bool_array(const std::vector<bool>& flags) {
  gguf::Value arr;
  arr.type = gguf::ValueType::ARRAY;
  arr.elem_type = gguf::ValueType::BOOL;
  for (bool b : flags) {
    gguf::Value e;
    e.type = gguf::ValueType::BOOL;
    e.u64 = b;
    arr.arr.push_back(e);
  }
  return arr;
}

}  // namespace

TEST(GptOss, ConfigFromFile) {
  ScopedDir d;
  const synth::SynthSpec s = gpt_oss_spec();
  auto m = Model::load(write_model(s, d));
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.arch, Arch::gpt_oss);
  EXPECT_EQ(c.head_dim_k, 64);
  EXPECT_EQ(c.head_dim_v, 64);
  EXPECT_EQ(c.n_rot, 64);
  EXPECT_EQ(c.n_q(), 512);
  EXPECT_EQ(c.rope_type, RopeType::neox);
  EXPECT_EQ(c.n_swa, 8);
  for (int il = 0; il < 4; ++il) EXPECT_EQ(c.is_swa(il), il % 2 == 0) << il;
  EXPECT_EQ(c.rope_base(0), c.rope_freq_base);  // no freq_base_swa key: the SWA layers share the base
  EXPECT_EQ(c.n_ff_exp, 256);
  EXPECT_EQ(c.gating, Gating::softmax_weight);
  EXPECT_EQ(c.expert_act, ExpertAct::swiglu_oai);
  EXPECT_FALSE(c.norm_topk);
  EXPECT_EQ(c.expert_weights_scale, 1.0f);
  // YaRN: factor 32 over 4096 positions, ext_factor 1, attention factor cancelling the kernel's
  // magnitude scaling (llama_context), betas 32 / 1.
  EXPECT_FLOAT_EQ(c.rope_freq_scale, 1.0f / 32.0f);
  EXPECT_EQ(c.n_ctx_orig_yarn, 4096);
  EXPECT_EQ(c.yarn_ext_factor, 1.0f);
  EXPECT_NEAR(c.yarn_attn_factor, 1.0f, 1e-6f);
  EXPECT_EQ(c.yarn_beta_fast, 32.0f);
  EXPECT_EQ(c.yarn_beta_slow, 1.0f);
  // Every layer has its sinks, biases and expert biases.
  for (const LayerWeights& L : m->weights().layers) {
    EXPECT_EQ(L.attn_sinks.n, 8);
    EXPECT_TRUE(L.bq.present() && L.bk.present() && L.bv.present() && L.bo.present());
    EXPECT_TRUE(L.router_bias.present() && L.gate_exps_b.present() && L.up_exps_b.present() && L.down_exps_b.present());
  }
}

// Keys llama.cpp reads differently for gpt-oss: the SWA pattern (an array, or a period with
// layer il sliding when il % n < n - 1), the SWA RoPE base; keys it ignores: YaRN betas, the
// expert weights scale.
TEST(GptOss, LayerPatternAndIgnoredKeys) {
  ScopedDir d;
  const std::string good = write_model(gpt_oss_spec(), d, "good.gguf");
  const std::string alt = d.file("alt.gguf");
  auto swa_of = [&](const std::function<void(KvList&)>& edit) {
    rewrite(good, alt, edit);
    const ModelConfig c = Model::load(alt)->config();
    std::vector<bool> v;
    for (int il = 0; il < c.n_layer; ++il) v.push_back(c.is_swa(il));
    return v;
  };
  const std::string key = "gpt-oss.attention.sliding_window_pattern";
  EXPECT_EQ(swa_of([&](KvList& kv) { set_key(kv, key, u32_value(3)); }), (std::vector<bool>{true, true, false, true}));
  EXPECT_EQ(swa_of([&](KvList& kv) { set_key(kv, key, u32_value(0)); }), (std::vector<bool>{true, true, true, true}));
  EXPECT_EQ(swa_of([&](KvList& kv) { set_key(kv, key, u32_value(1)); }), (std::vector<bool>{false, false, false, false}));
  EXPECT_EQ(swa_of([&](KvList& kv) { set_key(kv, key, bool_array({false, true, true, false})); }),
            (std::vector<bool>{false, true, true, false}));

  rewrite(good, alt, [](KvList& kv) {
    set_key(kv, "gpt-oss.rope.freq_base_swa", f32_value(5000.0));
    set_key(kv, "gpt-oss.rope.scaling.yarn_beta_fast", f32_value(8.0));
    set_key(kv, "gpt-oss.rope.scaling.yarn_beta_slow", f32_value(2.0));
    set_key(kv, "gpt-oss.expert_weights_scale", f32_value(2.5));
  });
  auto m = Model::load(alt);
  const ModelConfig& c = m->config();
  EXPECT_EQ(c.rope_base(0), 5000.0f);
  EXPECT_EQ(c.rope_base(1), c.rope_freq_base);
  EXPECT_EQ(c.yarn_beta_fast, 32.0f);
  EXPECT_EQ(c.yarn_beta_slow, 1.0f);
  EXPECT_EQ(c.expert_weights_scale, 1.0f);
  // Only the SWA base changes the logits: the same file with just that key gives the same logits.
  const std::string base_only = d.file("base_only.gguf");
  rewrite(good, base_only, [](KvList& kv) { set_key(kv, "gpt-oss.rope.freq_base_swa", f32_value(5000.0)); });
  const std::vector<int32_t> toks = random_tokens(24, 512, 8);
  const std::vector<float> with_all = batch_logits(*m, toks);
  EXPECT_EQ(batch_logits(*Model::load(base_only), toks), with_all);
  EXPECT_NE(batch_logits(*Model::load(good), toks), with_all);
  if (llamacpp_available()) {  // llama.cpp reads the SWA base and ignores the other three keys too
    const Agreement a = compare(alt, {toks}, d);
    std::printf("gpt-oss f32, freq_base_swa 5000 + ignored keys: mean KLD %.3g, top-1 %d/%d, max|diff| %.3g\n",
                a.mean_kld, a.top1_agree, a.positions, a.max_abs);
    EXPECT_LE(a.mean_kld, 2e-4);
    EXPECT_EQ(a.top1_agree, a.positions);
  }
}

// The clamped SwiGLU's limits (gate <= 7, |up| <= 7) against llama.cpp: expert biases of +-9 and
// +-12 put a large share of the gate and up values beyond them.
TEST(GptOss, ClampedSwigluMatchesLlamaCpp) {
  LES_REQUIRE_LLAMACPP();
  ScopedDir d;
  const std::string good = write_model(gpt_oss_spec(), d, "good.gguf");
  const std::string clamped = d.file("clamped.gguf");
  rewrite(good, clamped, {}, [](std::string& name, auto&, Type& type, std::vector<uint8_t>& bytes) {
    const bool gate = name.find("ffn_gate_exps.bias") != std::string::npos;
    if ((gate || name.find("ffn_up_exps.bias") != std::string::npos) && type == Type::F32) {
      float* b = reinterpret_cast<float*>(bytes.data());
      const size_t n = bytes.size() / sizeof(float);
      for (size_t i = 0; i < n; ++i) {
        if (i % 3 == 0) b[i] += (i % 2 ? 1.0f : -1.0f) * (gate ? 9.0f : 12.0f);
      }
    }
    return true;
  });
  auto m = Model::load(clamped);
  // The edited file computes something else than the original, and stays finite.
  const std::vector<int32_t> toks = random_tokens(30, 512, 6);
  const std::vector<float> a = batch_logits(*m, toks);
  EXPECT_NE(a, batch_logits(*Model::load(good), toks));
  for (float x : a) ASSERT_TRUE(std::isfinite(x));
  const Agreement ag = compare(clamped, {toks}, d);
  std::printf("gpt-oss f32, clamped SwiGLU: mean KLD %.3g, top-1 %d/%d, max|diff| %.3g\n", ag.mean_kld, ag.top1_agree,
              ag.positions, ag.max_abs);
  EXPECT_LE(ag.mean_kld, 1e-6);
  EXPECT_EQ(ag.top1_agree, ag.positions);
}

// The attention core with sinks and a window against a direct double-precision evaluation.
TEST(GptOssAttention, SinksAndWindowMatchADirectEvaluation) {
  const int n_head = 4, n_head_kv = 2, hd = 16, pos0 = 5, n = 14;
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int n_kv = pos0 + n;
  std::vector<float> q(static_cast<size_t>(n * n_head * hd)), kc(static_cast<size_t>(n_kv * n_head_kv * hd)),
      vc(static_cast<size_t>(n_kv * n_head_kv * hd));
  for (auto* v : {&q, &kc, &vc}) {
    for (float& x : *v) x = 2.0f * nd(rng);
  }
  const std::vector<float> sinks = {-1.0f, 0.5f, 3.0f, -20.0f};
  ThreadPool pool(2);
  for (int window : {0, 1, 4, 30}) {
    for (bool with_sinks : {false, true}) {
      AttentionShape as{n_head, n_head_kv, hd, hd, 0.25f};
      as.sinks = with_sinks ? sinks.data() : nullptr;
      as.window = window;
      std::vector<float> out(static_cast<size_t>(n * n_head * hd));
      causal_attention(as, q.data(), n_head * hd, kc.data(), vc.data(), n, pos0, out.data(), pool);
      double max_err = 0;
      for (int i = 0; i < n; ++i) {
        const int pos = pos0 + i;
        const int first = window > 0 ? std::max(0, pos - window + 1) : 0;
        for (int h = 0; h < n_head; ++h) {
          const int g = h / (n_head / n_head_kv);
          std::vector<double> sc;
          double mx = with_sinks ? sinks[static_cast<size_t>(h)] : -INFINITY;
          for (int j = first; j <= pos; ++j) {
            double dot = 0;
            for (int k = 0; k < hd; ++k) dot += double(q[size_t((i * n_head + h) * hd + k)]) * kc[size_t((j * n_head_kv + g) * hd + k)];
            sc.push_back(0.25 * dot);
            mx = std::max(mx, sc.back());
          }
          double z = with_sinks ? std::exp(sinks[static_cast<size_t>(h)] - mx) : 0.0;
          for (double& x : sc) z += x = std::exp(x - mx);
          for (int k = 0; k < hd; ++k) {
            double o = 0;
            for (int j = first; j <= pos; ++j) o += sc[size_t(j - first)] / z * vc[size_t((j * n_head_kv + g) * hd + k)];
            max_err = std::max(max_err, std::fabs(o - out[size_t((i * n_head + h) * hd + k)]));
          }
        }
      }
      EXPECT_LE(max_err, 2e-5) << "window " << window << " sinks " << with_sinks;
      // A window covering every position is no window, bit for bit.
      if (window == 30) {
        AttentionShape full = as;
        full.window = 0;
        std::vector<float> out_full(out.size());
        causal_attention(full, q.data(), n_head * hd, kc.data(), vc.data(), n, pos0, out_full.data(), pool);
        EXPECT_EQ(out_full, out);
      }
    }
  }
}

namespace {
struct GptOssType {
  const char* type;
};
}  // namespace

class GptOssVsLlamaCpp : public ::testing::TestWithParam<GptOssType> {};

TEST_P(GptOssVsLlamaCpp, Logits) {
  LES_REQUIRE_LLAMACPP();
  const std::string type = GetParam().type;
  ScopedDir d;
  const synth::SynthSpec s = gpt_oss_spec(type);
  const std::string path = write_model(s, d);
  const Agreement a = compare(path, prompts(s.n_vocab), d);
  std::printf("gpt-oss %-9s mean KLD %.3g (max %.3g)  top-1 %d/%d  max|diff| %.3g\n", type.c_str(), a.mean_kld,
              a.max_kld, a.top1_agree, a.positions, a.max_abs);
  ASSERT_EQ(a.positions, 160);
  EXPECT_LE(a.mean_kld, 2e-4);
  EXPECT_GE(a.top1(), 0.98);
  if (type == "f32") {
    EXPECT_LE(a.max_abs, 1e-3);
    EXPECT_EQ(a.top1_agree, a.positions);
  }
}

INSTANTIATE_TEST_SUITE_P(Types, GptOssVsLlamaCpp,
                         ::testing::Values(GptOssType{"f32"}, GptOssType{"f16"}, GptOssType{"q8_0"},
                                           GptOssType{"mxfp4_moe"}, GptOssType{"q4_K"}, GptOssType{"q4_k_m"}),
                         [](const ::testing::TestParamInfo<GptOssType>& info) { return std::string(info.param.type); });

TEST(GptOssVsLlamaCppGreedy, ContinuationsEqual) {
  LES_REQUIRE_LLAMACPP();
  ScopedDir d;
  for (const std::string type : {"f32", "mxfp4_moe"}) {
    const synth::SynthSpec s = gpt_oss_spec(type);
    const std::string path = write_model(s, d, type + ".gguf");
    auto m = Model::load(path);
    for (uint64_t seed : {5, 6}) {
      const std::vector<int32_t> prompt = random_tokens(6, s.n_vocab, seed);
      const int n_gen = 24;  // well past the window of 8
      const std::vector<int32_t> theirs = llamacpp_greedy(path, prompt, n_gen, d.path);
      Context ctx(*m, ContextParams{.n_ctx = 64});
      ctx.eval(prompt, false);
      std::vector<int32_t> ours;
      for (int k = 0; k < n_gen; ++k) {
        const float* lg = ctx.last_logits();
        const int32_t next = static_cast<int32_t>(std::max_element(lg, lg + s.n_vocab) - lg);
        ours.push_back(next);
        ctx.eval(std::span<const int32_t>(&next, 1), false);
      }
      EXPECT_EQ(ours, theirs) << type << " seed " << seed;
    }
  }
}

// The window limits what the sliding layers see: a wider window changes no position that the
// window of 8 already covers whole (positions 0..7), and changes the later ones.
TEST(GptOss, WindowLimitsTheSlidingLayers) {
  ScopedDir d;
  const std::string narrow = write_model(gpt_oss_spec(), d, "narrow.gguf");
  const std::string wide = d.file("wide.gguf");
  rewrite(narrow, wide, [](KvList& kv) { set_key(kv, "gpt-oss.attention.sliding_window", u32_value(1000)); });
  const std::vector<int32_t> toks = random_tokens(30, 512, 2);
  const std::vector<float> a = batch_logits(*Model::load(narrow), toks), b = batch_logits(*Model::load(wide), toks);
  const size_t nv = 512;
  for (size_t p = 0; p < toks.size(); ++p) {
    const bool same = std::equal(a.begin() + std::ptrdiff_t(p * nv), a.begin() + std::ptrdiff_t((p + 1) * nv),
                                 b.begin() + std::ptrdiff_t(p * nv));
    EXPECT_EQ(same, p < 8) << "position " << p;
  }
}

TEST(GptOss, PrefillEqualsTokenByTokenAndThreadCounts) {
  ScopedDir d;
  for (const std::string type : {"f32", "mxfp4_moe", "q4_K"}) {
    const synth::SynthSpec s = gpt_oss_spec(type);
    auto m = Model::load(write_model(s, d, type + ".gguf"));
    const std::vector<int32_t> tokens = random_tokens(100, s.n_vocab, 9);
    const std::vector<float> batch = batch_logits(*m, tokens, 1);
    EXPECT_EQ(batch_logits(*m, tokens, 3), batch) << type << ": logits depend on the thread count";
    EXPECT_EQ(batch_logits(*m, tokens, 2, 7), batch) << type << ": batches of 7 differ";
    Context ctx(*m, ContextParams{.n_ctx = 256, .n_threads = 2});
    const size_t nv = static_cast<size_t>(s.n_vocab);
    for (size_t i = 0; i < tokens.size(); ++i) {
      ctx.eval(std::span<const int32_t>(&tokens[i], 1), false);
      ASSERT_TRUE(std::equal(ctx.last_logits(), ctx.last_logits() + nv, batch.begin() + static_cast<std::ptrdiff_t>(i * nv)))
          << type << ": token-by-token differs from one batch at position " << i;
    }
  }
}

TEST(GptOss, StreamedAndPackedExpertsBitIdentical) {
  ScopedDir d;
  for (const std::string type : {"mxfp4_moe", "q8_0"}) {
    const std::string path = write_model(gpt_oss_spec(type), d, type + ".gguf");
    auto resident = Model::load(path);
    auto streamed = Model::load(path, LoadOptions{.map_experts = false});
    EXPECT_EQ(streamed->weights().layers[0].gate.data, nullptr);
    const std::vector<int32_t> prompt = random_tokens(12, 512, 4);
    const auto ref = greedy_hashes(*resident, nullptr, prompt, 14, 1);  // 26 positions: past the window
    const std::string packed_path = d.file(type + "-packed.gguf");
    pack::pack_model(path, packed_path);
    auto packed = Model::load(packed_path, LoadOptions{.map_experts = false});
    ASSERT_NE(packed->packed(), nullptr);
    EXPECT_EQ(greedy_hashes(*Model::load(packed_path), nullptr, prompt, 14, 2), ref) << type << " packed, resident";
    for (const Model* sm : {streamed.get(), packed.get()}) {
      for (Schedule sch : {Schedule::ondemand, Schedule::lookahead}) {
        for (int slots : {4, 24}) {
          StreamingExperts ex(*sm, stream_opts(*sm, sch, storage::IoMode::pread, slots));
          EXPECT_EQ(greedy_hashes(*sm, &ex, prompt, 14, 2), ref)
              << type << " " << schedule_name(sch) << " slots=" << slots << (sm == packed.get() ? " packed" : "");
          EXPECT_GT(ex.stats().total().selected, 0u);
        }
      }
    }
  }
}

TEST(GptOss, BadFilesAreRefused) {
  ScopedDir d;
  const std::string good = write_model(gpt_oss_spec(), d, "good.gguf");
  const std::string bad = d.file("bad.gguf");
  auto expect_error = [&](const std::string& what, const std::vector<std::string>& needles) {
    const std::string e = error_of([&] { Model::load(bad); });
    EXPECT_FALSE(e.empty()) << what << ": loaded";
    for (const auto& n : needles) EXPECT_NE(e.find(n), std::string::npos) << what << ": " << e;
  };
  auto drop = [&](const std::string& tensor) {
    rewrite(good, bad, {}, [&](std::string& name, auto&, auto&, auto&) { return name != tensor; });
  };
  for (const char* key : {"attention.sliding_window", "expert_feed_forward_length", "attention.layer_norm_rms_epsilon"}) {
    const std::string k = std::string("gpt-oss.") + key;
    rewrite(good, bad, [&](KvList& kv) { erase_key(kv, k); });
    expect_error(k, {k, "missing"});
  }
  rewrite(good, bad, [](KvList& kv) { set_key(kv, "gpt-oss.attention.sliding_window", u32_value(0)); });
  expect_error("window 0", {"sliding_window", "out of range"});
  rewrite(good, bad, [](KvList& kv) { set_key(kv, "gpt-oss.attention.key_length", u32_value(128)); });
  expect_error("key head dim != rope dims", {"key_length 128", "rope.dimension_count 64"});
  rewrite(good, bad, [](KvList& kv) { set_key(kv, "gpt-oss.attention.value_length", u32_value(32)); });
  expect_error("value head dim != rope dims", {"value_length 32", "rope.dimension_count 64"});
  rewrite(good, bad, [](KvList& kv) { set_key(kv, "gpt-oss.attention.sliding_window_pattern", bool_array({true, false})); });
  expect_error("pattern array of the wrong length", {"sliding_window_pattern", "2 entries"});
  rewrite(good, bad, [](KvList& kv) { set_key(kv, "gpt-oss.rope.freq_base_swa", f32_value(-1.0)); });
  expect_error("negative SWA base", {"freq_base_swa"});
  for (const char* t : {"blk.1.attn_sinks.weight", "blk.0.attn_output.bias", "blk.2.ffn_gate_inp.bias",
                        "blk.3.ffn_down_exps.bias", "blk.0.ffn_up_exps.bias", "output.weight"}) {
    drop(t);
    expect_error(std::string("missing ") + t, {t, "missing tensor"});
  }
  // Sinks of the wrong shape or type.
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>& ne, Type&, std::vector<uint8_t>& bytes) {
    if (name == "blk.0.attn_sinks.weight") {
      ne = {9};
      bytes.resize(9 * sizeof(float));
    }
    return true;
  });
  expect_error("9 sinks for 8 heads", {"blk.0.attn_sinks.weight", "[9]", "[8]"});
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>& ne, Type&, std::vector<uint8_t>& bytes) {
    if (name == "blk.2.attn_sinks.weight") {
      ne = {4, 2};
    }
    (void)bytes;
    return true;
  });
  expect_error("sinks as a matrix", {"blk.2.attn_sinks.weight", "[4, 2]"});
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>& ne, Type& type, std::vector<uint8_t>& bytes) {
    if (name == "blk.0.attn_sinks.weight") {
      ne = {32};
      type = Type::Q8_0;
      bytes.assign(34, 0);
    }
    return true;
  });
  expect_error("quantized sinks", {"blk.0.attn_sinks.weight"});
  rewrite(good, bad, {}, [](std::string& name, std::vector<int64_t>& ne, Type&, std::vector<uint8_t>& bytes) {
    if (name == "blk.1.ffn_gate_exps.bias") {
      ne = {256, 4};
      bytes.resize(256 * 4 * sizeof(float));
    }
    return true;
  });
  expect_error("expert bias for 4 of 8 experts", {"blk.1.ffn_gate_exps.bias", "[256, 4]"});
  // A NaN sink.
  rewrite(good, bad, {}, [](std::string& name, auto&, auto&, std::vector<uint8_t>& bytes) {
    if (name == "blk.3.attn_sinks.weight") {
      const float nan = std::nanf("");
      std::memcpy(bytes.data(), &nan, sizeof nan);
    }
    return true;
  });
  expect_error("NaN sink", {"blk.3.attn_sinks.weight"});
}

// The real sizes: gpt-oss-20b has 20.9B parameters and gpt-oss-120b 116.8B (OpenAI's model card:
// 20.91B and 116.83B), computed from the specs without writing anything.
TEST(GptOss, NamedShapesHaveThePublishedSizes) {
  struct Case { const char* shape; int n_layer, n_expert; double params_b; };
  for (const Case& cs : {Case{"gpt-oss-20b", 24, 32, 20.91}, Case{"gpt-oss-120b", 36, 128, 116.83}}) {
    synth::SynthSpec s = synth::shape_spec(cs.shape);
    EXPECT_EQ(s.arch, Arch::gpt_oss);
    EXPECT_EQ(s.n_layer, cs.n_layer);
    EXPECT_EQ(s.n_embd, 2880);
    EXPECT_EQ(s.n_head, 64);
    EXPECT_EQ(s.n_head_kv, 8);
    EXPECT_EQ(s.head_dim, 64);
    EXPECT_EQ(s.n_expert, cs.n_expert);
    EXPECT_EQ(s.n_expert_used, 4);
    EXPECT_EQ(s.n_ff_exp, 2880);
    EXPECT_EQ(s.n_vocab, 201088);
    EXPECT_EQ(s.n_ctx, 131072);
    EXPECT_EQ(s.rope_freq_base, 150000.0f);
    EXPECT_EQ(s.sliding_window, 128);
    EXPECT_EQ(s.yarn_factor, 32.0f);
    EXPECT_EQ(s.yarn_orig_ctx, 4096);
    EXPECT_EQ(s.context_focus, cs.n_expert == 128 ? 0.30f : 0.9f);  // real routing's reuse (docs/synth.md)
    s.type = "f32";
    const uint64_t f32_bytes = synth::synth_file_bytes(s);
    const double params = static_cast<double>(f32_bytes) / 4.0 / 1e9;  // header and padding: < 1e-4 B
    std::printf("%s: %.3f B parameters", cs.shape, params);
    EXPECT_NEAR(params, cs.params_b, 0.01) << cs.shape;
    s.type = "mxfp4_moe";
    const uint64_t mx = synth::synth_file_bytes(s);
    std::printf(", mxfp4_moe %.2f GB\n", static_cast<double>(mx) / 1e9);
    // Experts MXFP4 (17 bytes per 32), routers and vectors F32, every other matrix Q8_0 (34 per 32).
    const double E = 2880, X = cs.n_expert, L = cs.n_layer, nq = 64 * 64, nkv = 8 * 64;
    const double n_exp = 3 * E * E * X * L, n_router = E * X * L;
    const double n_vec = L * (2 * E + nq + 2 * nkv + E + 64 + X + 2 * E * X + E * X) + E;
    const double n_q8 = static_cast<double>(f32_bytes) / 4 - n_exp - n_router - n_vec;
    const double expect = n_exp * 17 / 32 + n_q8 * 34 / 32 + (n_router + n_vec) * 4;
    // (The header, about 5 MB of vocabulary, is counted in n_q8 at a quarter of its size.)
    EXPECT_NEAR(static_cast<double>(mx), expect, 6e6) << cs.shape;
  }
  // `--arch gpt-oss` on the tiny default and any other shape gives test-sized windows.
  const synth::SynthSpec t = synth::shape_spec("tiny", Arch::gpt_oss);
  EXPECT_EQ(t.sliding_window, 16);
  EXPECT_EQ(t.yarn_factor, 32.0f);
  EXPECT_NO_THROW(synth::validate(t));
  synth::SynthSpec bad = t;
  bad.sliding_window = 0;
  EXPECT_THROW(synth::validate(bad), Error);
  synth::SynthSpec other = synth::shape_spec("tiny");
  other.sliding_window = 8;
  EXPECT_THROW(synth::validate(other), Error);  // a window on qwen3moe
}

// `les synth --arch gpt-oss` with every type and recipe: the file loads and evaluates to finite,
// spread logits.
TEST(GptOss, EveryTypeAndRecipe) {
  ScopedDir d;
  // Every weight type, every recipe, and llama.cpp ftype names (upper case: their recipes).
  const char* types[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q2_K", "q3_K", "q4_K", "q5_K",
                         "q6_K", "iq4_nl", "iq4_xs", "iq2_xxs", "iq2_xs", "iq2_s", "iq3_xxs", "iq3_s", "iq1_s", "iq1_m",
                         "tq1_0", "tq2_0", "mxfp4", "nvfp4", "q2_k_s", "q3_k_s", "q3_k_m", "q3_k_l", "q4_k_s",
                         "q4_k_m", "q5_k_s", "q5_k_m", "iq2_m", "iq3_xs", "iq3_m", "mxfp4_moe", "Q2_K", "Q6_K",
                         "IQ4_XS", "IQ2_XXS", "IQ2_S", "IQ1_M", "TQ1_0"};
  for (const char* type : types) {
    const std::string p = d.file("t.gguf");
    std::string err;
    ASSERT_EQ(run_les(std::string("synth --arch gpt-oss --layers 2 --embd 256 --ff-exp 256 --type ") + type +
                          " --gen-tokens 4 --force -o '" + p + "'", &err), 0) << type << ": " << err;
    auto m = Model::load(p);
    EXPECT_EQ(m->config().arch, Arch::gpt_oss);
    Context ctx(*m, ContextParams{.n_ctx = 64, .n_threads = 2});
    ctx.eval(random_tokens(24, m->config().n_vocab, 1), true);
    float lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < ctx.n_outputs(); ++i) {
      for (int v = 0; v < m->config().n_vocab; ++v) {
        const float x = ctx.logits(i)[v];
        ASSERT_TRUE(std::isfinite(x)) << type;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
    }
    EXPECT_GT(hi - lo, 2.0f) << type;
    if (std::string(type) == "mxfp4_moe") {
      const gguf::File f = gguf::read_file(p);
      for (const auto& t : f.tensors) {
        if (t.name.find("_exps.weight") != std::string::npos) {
          EXPECT_EQ(t.type, Type::MXFP4) << t.name;
        } else if (t.name.find(".weight") != std::string::npos && t.ne.size() >= 2 && t.ne[1] > 1 &&
                   t.name.find("ffn_gate_inp") == std::string::npos) {
          EXPECT_EQ(t.type, Type::Q8_0) << t.name;
        }
      }
    }
  }
}

// Mixed precision takes gpt-oss files: biases (2-D expert biases included) and sinks are never a
// group, and a size target is met by a file that loads and runs.
TEST(GptOss, MixedPrecision) {
  ScopedDir d;
  const std::string in = write_model(gpt_oss_spec("f16"), d, "in.gguf");
  const gguf::File f = gguf::read_file(in);
  bool attn_q = false;
  for (const auto& g : mixed::tensor_groups(f)) {
    attn_q |= g.kind == "attn_q";
    for (const auto& t : g.tensors) {
      EXPECT_EQ(t.name.find(".bias"), std::string::npos) << g.id();
      EXPECT_EQ(t.name.find("attn_sinks"), std::string::npos) << g.id();
    }
  }
  EXPECT_TRUE(attn_q);
  mixed::MixedOptions mo;
  mo.calib_tokens = random_tokens(64, 512, 9);
  mo.sensitivity.n_ctx = 32;
  mo.sensitivity.n_windows = 1;
  mo.sensitivity.n_threads = 2;
  mo.target_bytes = f.file_size * 45 / 100;
  const mixed::MixedRecipe r = mixed::plan_mixed(in, mo);
  EXPECT_LE(r.predicted_bytes, mo.target_bytes);
  const std::string out = d.file("out.gguf");
  quantize_model(in, out, mixed::plan_from_recipe(r, f, 2));
  const gguf::File o = gguf::read_file(out);
  EXPECT_LE(o.file_size, mo.target_bytes);
  for (const auto& t : o.tensors) {
    if (t.name.find(".bias") != std::string::npos || t.name.find("attn_sinks") != std::string::npos) {
      EXPECT_EQ(t.type, Type::F32) << t.name;
    }
  }
  auto m = Model::load(out);
  Context ctx(*m, ContextParams{.n_ctx = 64});
  ctx.eval(random_tokens(20, 512, 2), false);
  for (int v = 0; v < 512; ++v) ASSERT_TRUE(std::isfinite(ctx.last_logits()[v]));
}
