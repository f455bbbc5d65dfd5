// Synthetic models (les synth): random blocks in every type, spec validation, determinism, every
// architecture loading and evaluating, and the routing knobs moving the measured statistics.
// Tiny shapes only: the whole file runs in a few seconds.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/model/context.h"
#include "les/quant/kernels.h"
#include "les/synth/design.h"
#include "les/synth/random_fill.h"
#include "les/synth/synth.h"
#include "les/tokenizer/tokenizer.h"
#include "les/util/error.h"
#include "test_util.h"

using namespace les;
using namespace les::synth;

namespace {

std::string tmp_path(const std::string& name) {
  static const std::string dir = les::test::temp_dir();
  return dir + "/" + name;
}

// Writes the spec to a fresh file and returns its path.
std::string write(const SynthSpec& s, const std::string& name) {
  const std::string p = tmp_path(name);
  write_synth_model(s, p);
  return p;
}

template <class F>
std::string error_of(F f) {
  try {
    f();
  } catch (const les::Error& e) {
    return e.what();
  }
  return "";
}

// A tiny shape with enough experts for routing statistics to mean something.
SynthSpec routing_spec() {
  SynthSpec s = shape_spec("tiny");
  s.n_layer = 6;
  s.n_expert = 32;
  s.n_expert_used = 4;
  s.n_ff_exp = 32;
  return s;
}

RoutingReport measure(const SynthSpec& s, const std::string& name, int n_gen = 96) {
  const std::string p = write(s, name);
  MeasureOptions mo;
  mo.n_prompt = 32;
  mo.n_gen = n_gen;
  const RoutingReport r = measure_routing(p, mo);
  std::remove(p.c_str());
  return r;
}

}  // namespace

TEST(SynthFill, EveryTypeHasTheRequestedStdAndIsSymmetric) {
  const Type types[] = {Type::F32, Type::F16, Type::BF16, Type::Q8_0, Type::Q4_0, Type::Q4_1, Type::Q5_0,
                        Type::Q5_1, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K,
                        Type::IQ4_NL, Type::IQ4_XS, Type::IQ2_XXS, Type::IQ2_XS, Type::IQ2_S, Type::IQ3_XXS,
                        Type::IQ3_S, Type::IQ1_S, Type::IQ1_M, Type::TQ1_0, Type::TQ2_0, Type::MXFP4,
                        Type::NVFP4};
  const int64_t n = 1024, rows = 32;
  for (Type t : types) {
    for (float sigma : {0.02f, 1.5f}) {
      std::vector<uint8_t> buf(row_bytes(t, n) * rows);
      std::vector<float> x(static_cast<size_t>(n * rows));
      for (int64_t r = 0; r < rows; ++r) {
        fill_random_row(t, sigma, 1234, r, n, buf.data() + r * row_bytes(t, n));
        dequantize_row(t, buf.data() + r * row_bytes(t, n), x.data() + r * n, n);
      }
      double sum = 0, sq = 0;
      float lo = x[0], hi = x[0];
      std::set<float> distinct;
      for (float v : x) {
        ASSERT_TRUE(std::isfinite(v)) << type_name(t);
        sum += v;
        sq += static_cast<double>(v) * v;
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        if (distinct.size() < 64) distinct.insert(v);
      }
      const double mean = sum / static_cast<double>(x.size());
      const double sd = std::sqrt(sq / static_cast<double>(x.size()) - mean * mean);
      EXPECT_LT(std::fabs(mean), 0.03 * sigma) << type_name(t);
      EXPECT_NEAR(sd, sigma, 0.02 * sigma) << type_name(t);
      EXPECT_NEAR(hi, -lo, 0.02 * sigma + 0.15 * (hi - lo) / 2) << type_name(t) << " not symmetric";
      const bool ternary = t == Type::TQ1_0 || t == Type::TQ2_0;
      EXPECT_GE(distinct.size(), t == Type::Q2_K ? 4u : ternary ? 3u : 7u) << type_name(t) << " values do not vary";
    }
  }
}

TEST(SynthFill, RowsArePureFunctionsOfKeyAndRow) {
  std::vector<uint8_t> a(row_bytes(Type::Q4_K, 512)), b(a.size()), c(a.size());
  fill_random_row(Type::Q4_K, 0.1f, 7, 3, 512, a.data());
  fill_random_row(Type::Q4_K, 0.1f, 7, 3, 512, b.data());
  fill_random_row(Type::Q4_K, 0.1f, 7, 4, 512, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(tensor_key(1, "blk.0.attn_q.weight"), tensor_key(2, "blk.0.attn_q.weight"));
  EXPECT_NE(tensor_key(1, "blk.0.attn_q.weight"), tensor_key(1, "blk.0.attn_k.weight"));
}

TEST(SynthSpec, BadSpecsAreClearErrors) {
  auto bad = [](auto edit) {
    SynthSpec s = shape_spec("tiny");
    edit(s);
    return error_of([&] { validate(s); });
  };
  EXPECT_NE(bad([](SynthSpec& s) { s.n_expert_used = 17; }).find("used = 17"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.n_expert_used = 0; }).find("used = 0"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.n_head_kv = 3; }).find("not a multiple of kv-heads"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.head_dim = 7; }).find("head-dim"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) {
              s.arch = Arch::qwen2moe;
              s.n_ff_shexp = 64;
              s.head_dim = 64;  // 4 x 64 != 128
            }).find("heads x head-dim = embd"),
            std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.arch = Arch::olmoe; }).find("kv-heads = heads"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.arch = Arch::qwen2moe; }).find("shared expert"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.n_ff_shexp = 64; }).find("only qwen2moe"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.n_vocab = 100; }).find("vocab"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.type = "q9_9"; }).find("q9_9"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.attn_share = 1.5f; }).find("attn-share"), std::string::npos);
  EXPECT_NE(bad([](SynthSpec& s) { s.update = 0; }).find("update"), std::string::npos);
  EXPECT_EQ(bad([](SynthSpec&) {}), "");
  EXPECT_NE(error_of([] { shape_spec("gpt5"); }).find("unknown shape"), std::string::npos);
  EXPECT_THROW(write_synth_model([] { SynthSpec s; s.n_expert_used = 99; return s; }(), tmp_path("never.gguf")),
               les::Error);
  // Named shapes adapt to what an architecture can take.
  for (const std::string& name : shape_names()) {
    for (Arch a : {Arch::qwen3moe, Arch::qwen2moe, Arch::olmoe, Arch::llama, Arch::qwen3, Arch::qwen35moe, Arch::gpt_oss}) {
      EXPECT_EQ(error_of([&] { validate(shape_spec(name, a)); }), "") << name << " " << arch_name(a);
    }
  }
  const SynthSpec big = shape_spec("qwen3-30b-a3b");
  EXPECT_EQ(big.n_layer, 48);
  EXPECT_EQ(big.n_expert, 128);
  EXPECT_EQ(big.n_vocab, 151936);
  // Q4_K: ~17 GB.
  SynthSpec q4 = big;
  q4.type = "q4_K";
  const double gb = static_cast<double>(synth_file_bytes(q4)) / 1e9;
  EXPECT_GT(gb, 16.0);
  EXPECT_LT(gb, 18.5);
}

TEST(SynthWrite, SameSeedSameBytesAnyThreadCount) {
  SynthSpec s = shape_spec("tiny");
  s.type = "q4_k_m";
  s.n_embd = 256;  // rows of 256: real K-quant blocks
  s.n_head = 8;
  s.n_threads = 1;
  const std::string a = write(s, "det-a.gguf");
  s.n_threads = 2;
  const std::string b = write(s, "det-b.gguf");
  s.seed = 2;
  const std::string c = write(s, "det-c.gguf");
  const auto ba = les::test::read_bytes(a), bb = les::test::read_bytes(b), bc = les::test::read_bytes(c);
  EXPECT_EQ(ba.size(), synth_file_bytes(s));
  EXPECT_TRUE(ba == bb) << "file depends on the thread count";
  ASSERT_EQ(ba.size(), bc.size());
  EXPECT_FALSE(ba == bc) << "different seeds gave the same file";
  // The same tensor names, shapes and types; different content.
  const gguf::File fa = gguf::read_file(a), fc = gguf::read_file(c);
  ASSERT_EQ(fa.tensors.size(), fc.tensors.size());
  std::set<Type> types;
  for (size_t i = 0; i < fa.tensors.size(); ++i) {
    EXPECT_EQ(fa.tensors[i].name, fc.tensors[i].name);
    types.insert(fa.tensors[i].type);
  }
  EXPECT_TRUE(types.count(Type::Q4_K)) << "q4_k_m should use Q4_K";
  EXPECT_TRUE(types.count(Type::Q6_K)) << "q4_k_m should use Q6_K for output / some ffn_down";
  EXPECT_TRUE(types.count(Type::F32)) << "norms and routers are F32";
  for (const auto& p : {a, b, c}) std::remove(p.c_str());
}

TEST(SynthWrite, EveryArchitectureLoadsAndEvaluatesWithoutNaN) {
  struct Case { Arch arch; int n_expert; const char* type; };
  const Case cases[] = {{Arch::qwen3moe, 16, "q8_0"}, {Arch::qwen2moe, 16, "f16"}, {Arch::olmoe, 16, "q5_1"},
                        {Arch::llama, 8, "q4_0"},     {Arch::qwen3, 0, "bf16"},  {Arch::llama, 0, "f32"},
                        {Arch::qwen35moe, 16, "q8_0"}, {Arch::gpt_oss, 16, "mxfp4_moe"}};
  for (const Case& cs : cases) {
    SynthSpec s = shape_spec("tiny", cs.arch);
    if (cs.arch == Arch::llama) {
      s.n_expert = cs.n_expert;
      s.n_expert_used = cs.n_expert ? 2 : 0;
    }
    s.type = cs.type;
    const std::string p = write(s, std::string("arch-") + arch_name(cs.arch) + ".gguf");
    std::unique_ptr<Model> m;
    ASSERT_NO_THROW(m = Model::load(p)) << arch_name(cs.arch);
    const ModelConfig& c = m->config();
    EXPECT_EQ(c.arch, cs.arch);
    EXPECT_EQ(c.n_layer, s.n_layer);
    EXPECT_EQ(c.n_vocab, s.n_vocab);
    EXPECT_EQ(c.moe, cs.n_expert > 0 || cs.arch == Arch::qwen3moe || cs.arch == Arch::qwen2moe || cs.arch == Arch::olmoe ||
                         cs.arch == Arch::qwen35moe || cs.arch == Arch::gpt_oss);
    if (c.moe) {
      EXPECT_EQ(c.n_expert, s.n_expert);
      EXPECT_EQ(c.n_ff_exp, s.n_ff_exp);
    }
    if (cs.arch == Arch::qwen2moe || cs.arch == Arch::qwen35moe) {
      EXPECT_EQ(c.n_ff_shexp, s.n_ff_shexp);
    }
    Context ctx(*m, ContextParams{.n_ctx = 64, .n_threads = 1});
    std::vector<int32_t> toks;
    for (int i = 0; i < 24; ++i) toks.push_back((i * 37 + 5) % 500);
    ctx.eval(toks, true);
    float lo = 1e30f, hi = -1e30f;
    for (int i = 0; i < ctx.n_outputs(); ++i) {
      for (int v = 0; v < c.n_vocab; ++v) {
        const float x = ctx.logits(i)[v];
        ASSERT_TRUE(std::isfinite(x)) << arch_name(cs.arch) << " position " << i;
        lo = std::min(lo, x);
        hi = std::max(hi, x);
      }
    }
    EXPECT_GT(hi - lo, 5.0f) << "logits should spread";
    EXPECT_LT(hi - lo, 100.0f);
    // The tokenizer loads and round-trips text.
    Tokenizer tok(vocab_from_gguf(m->gguf()));
    const std::string text = "the quick brown fox, 42!";
    EXPECT_EQ(tok.decode(tok.encode(text, false, false)), text);
    std::remove(p.c_str());
  }
}

TEST(SynthDesign, StreamStaysInRangeAndAttentionIsLocal) {
  SynthSpec s = shape_spec("qwen3-30b-a3b");
  const Design d = make_design(s);
  // Relative update ~update per layer: moderate growth over 48 layers.
  EXPECT_GT(d.stream_rms.back(), d.stream_rms.front());
  EXPECT_LT(d.stream_rms.back(), 20.0);
  // The locality bias prefers near keys: the score falls with the distance.
  EXPECT_GT(attention_bias_score(s, d, 1), attention_bias_score(s, d, 8));
  EXPECT_GT(attention_bias_score(s, d, 8), attention_bias_score(s, d, 64));
  EXPECT_LT(attention_bias_score(s, d, 256), -6.0);
  // Temporal correlation of the router's view grows with depth.
  EXPECT_GT(d.route_lag1.back(), d.route_lag1[1]);
}

TEST(SynthMeasure, EveryExpertIsUsedAndNothingIsNaN) {
  const RoutingReport r = measure(routing_spec(), "measure.gguf", 224);
  EXPECT_TRUE(r.finite);
  EXPECT_TRUE(r.moe);
  EXPECT_EQ(r.n_tokens, 256);
  EXPECT_EQ(r.never_used, 0) << format_report(r);
  EXPECT_GT(r.distinct_generated, 50) << "greedy decoding should not collapse into a loop";
  for (const auto& L : r.layers) EXPECT_GT(L.stream_rms, 0.5);
  // Routing is far from random and far from degenerate.
  EXPECT_GT(r.recall_k, 2 * r.random_reuse);
  EXPECT_LT(r.recall_k, 0.98);
  EXPECT_LT(r.temporal_reuse, 0.7);
  EXPECT_FALSE(format_report(r).empty());
}

TEST(SynthMeasure, KnobsMoveTheStatisticsTheRightWay) {
  // Cross-layer predictability: a smaller update -> higher recall.
  SynthSpec lo = routing_spec(), hi = routing_spec();
  lo.update = 0.5f;
  hi.update = 0.12f;
  const RoutingReport r_lo = measure(lo, "k-upd-lo.gguf"), r_hi = measure(hi, "k-upd-hi.gguf");
  EXPECT_GT(r_hi.recall_k, r_lo.recall_k + 0.1) << format_report(r_lo) << format_report(r_hi);
  EXPECT_GT(r_hi.recall_2k, r_lo.recall_2k);

  // Popularity: more skew -> the top 10% experts take more of the selections.
  SynthSpec flat = routing_spec(), skewed = routing_spec();
  flat.skew = 0.0f;
  skewed.skew = 0.5f;
  const RoutingReport r_flat = measure(flat, "k-skew-0.gguf"), r_skew = measure(skewed, "k-skew-1.gguf");
  EXPECT_GT(r_skew.top10_share, r_flat.top10_share + 0.05) << format_report(r_flat) << format_report(r_skew);
  EXPECT_GT(r_skew.max_over_mean, r_flat.max_over_mean);

  // Temporal reuse: local attention carrying most of the update and routers focused on it ->
  // consecutive tokens share more experts than with non-local attention.
  SynthSpec off = routing_spec(), on = routing_spec();
  off.attn_window = 0.0f;
  off.attn_share = 0.2f;
  off.context_focus = 0.5f;
  on.attn_window = 12.0f;
  on.attn_share = 0.9f;
  on.context_focus = 0.9f;
  on.update = 0.4f;
  off.update = 0.4f;
  const RoutingReport r_off = measure(off, "k-reuse-0.gguf"), r_on = measure(on, "k-reuse-1.gguf");
  EXPECT_GT(r_on.temporal_reuse, r_off.temporal_reuse + 0.05) << format_report(r_off) << format_report(r_on);
}
