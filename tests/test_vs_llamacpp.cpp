// Our logits against llama.cpp's on synthetic models of every architecture, in F32 and in every
// tensor type, and on the bundled quantized model.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "les/model/context.h"
#include "les/synth/synth.h"
#include "llamacpp_ref.h"

using namespace les;
using namespace les::test;

namespace {

struct Agreement {
  double max_abs = 0;        // max |ours - llama.cpp| over all logits
  double max_rel = 0;        // max over positions of max|diff| / (max - min of llama.cpp's logits)
  double mean_rel = 0;       // mean over positions of that ratio
  int positions = 0;
  int argmax_agree = 0;
};

Agreement compare_with_llamacpp(const std::string& model_path, const std::vector<std::vector<int32_t>>& seqs,
                                const std::string& dir) {
  Agreement a;
  const std::vector<float> ref = llamacpp_logits(model_path, seqs, dir);
  auto m = Model::load(model_path);
  const int nv = m->config().n_vocab;
  size_t total = 0;
  for (const auto& s : seqs) total += s.size();
  EXPECT_EQ(ref.size(), total * static_cast<size_t>(nv)) << "llama.cpp produced no or partial logits";
  if (ref.size() != total * static_cast<size_t>(nv)) return a;
  size_t row = 0;
  for (const auto& s : seqs) {
    Context ctx(*m, ContextParams{.n_ctx = 64, .n_threads = 2});
    ctx.eval(s, true);
    for (int i = 0; i < ctx.n_outputs(); ++i, ++row) {
      const float* ours = ctx.logits(i);
      const float* theirs = ref.data() + row * static_cast<size_t>(nv);
      float lo = theirs[0], hi = theirs[0];
      double md = 0;
      for (int v = 0; v < nv; ++v) {
        md = std::max(md, static_cast<double>(std::fabs(ours[v] - theirs[v])));
        lo = std::min(lo, theirs[v]);
        hi = std::max(hi, theirs[v]);
      }
      const double rel = md / std::max(1e-6, static_cast<double>(hi - lo));
      a.max_abs = std::max(a.max_abs, md);
      a.max_rel = std::max(a.max_rel, rel);
      a.mean_rel += rel;
      ++a.positions;
      const int am_ours = static_cast<int>(std::max_element(ours, ours + nv) - ours);
      const int am_theirs = static_cast<int>(std::max_element(theirs, theirs + nv) - theirs);
      a.argmax_agree += am_ours == am_theirs;
    }
  }
  if (a.positions) a.mean_rel /= a.positions;
  return a;
}

std::vector<std::vector<int32_t>> test_sequences(int n_vocab, uint64_t seed) {
  std::vector<std::vector<int32_t>> seqs(2);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (int i = 0; i < 12; ++i) {
      x ^= x << 13; x ^= x >> 7; x ^= x << 17;
      seqs[s].push_back(static_cast<int32_t>(x % static_cast<uint64_t>(n_vocab - 8)));
    }
  }
  return seqs;
}

// A small model whose matrices all have rows of 256 so that every K-quant is really used.
synth::SynthSpec small_spec(Arch arch, const std::string& type) {
  synth::SynthSpec s = synth::shape_spec("tiny", arch);
  s.n_layer = 2;
  s.n_embd = 256;
  s.n_head = 4;
  s.n_head_kv = arch == Arch::olmoe || arch == Arch::qwen2moe ? 4 : 2;
  s.head_dim = 64;
  s.n_expert = 8;
  s.n_expert_used = 2;
  s.n_ff_exp = 256;
  s.n_ff_shexp = arch == Arch::qwen2moe ? 256 : 0;
  s.n_vocab = 512;
  s.type = type;
  s.seed = 7;
  return s;
}

struct Case {
  Arch arch;
  const char* type;
};

class VsLlamaCpp : public ::testing::TestWithParam<Case> {};

}  // namespace

TEST_P(VsLlamaCpp, SyntheticModelLogits) {
  LES_REQUIRE_LLAMACPP();
  const Case c = GetParam();
  const std::string dir = temp_dir();
  const std::string path = dir + "/model.gguf";
  synth::write_synth_model(small_spec(c.arch, c.type), path);
  const Agreement a = compare_with_llamacpp(path, test_sequences(512, 3), dir);
  std::printf("%-9s %-5s max|diff| %.3g  max rel %.3g  mean rel %.3g  argmax %d/%d\n", arch_name(c.arch), c.type,
              a.max_abs, a.max_rel, a.mean_rel, a.argmax_agree, a.positions);
  ASSERT_GT(a.positions, 0);
  const std::string type = c.type;
  if (type == "f32") {
    // Same arithmetic up to summation order: within 1e-4 of the logit range.
    EXPECT_LE(a.max_rel, 1e-4);
    EXPECT_EQ(a.argmax_agree, a.positions);
  } else {
    // Activations are quantized exactly as llama.cpp does; differences come from summation order
    // and, rarely, an expert flipped where two router scores nearly tie.
    EXPECT_GE(a.argmax_agree, a.positions - a.positions / 100) << "argmax agreement below 99%";
    EXPECT_LE(a.mean_rel, 2e-3);
  }
  std::string cleanup = "rm -rf '" + dir + "'";
  (void)std::system(cleanup.c_str());
}

INSTANTIATE_TEST_SUITE_P(
    AllArchsAndTypes, VsLlamaCpp,
    ::testing::Values(Case{Arch::qwen3moe, "f32"}, Case{Arch::qwen2moe, "f32"}, Case{Arch::olmoe, "f32"},
                      Case{Arch::llama, "f32"}, Case{Arch::qwen3, "f32"},
                      Case{Arch::qwen3moe, "f16"}, Case{Arch::qwen3moe, "bf16"}, Case{Arch::qwen3moe, "q8_0"},
                      Case{Arch::qwen3moe, "q4_0"}, Case{Arch::qwen3moe, "q4_1"}, Case{Arch::qwen3moe, "q5_0"},
                      Case{Arch::qwen3moe, "q5_1"}, Case{Arch::qwen3moe, "q2_K"}, Case{Arch::qwen3moe, "q3_K"},
                      Case{Arch::qwen3moe, "q4_K"}, Case{Arch::qwen3moe, "q5_K"}, Case{Arch::qwen3moe, "q6_K"},
                      Case{Arch::qwen2moe, "q4_k_m"}, Case{Arch::olmoe, "q4_k_m"}, Case{Arch::llama, "q4_k_m"},
                      Case{Arch::qwen2moe, "f16"}, Case{Arch::olmoe, "q8_0"}, Case{Arch::llama, "q6_K"}),
    [](const ::testing::TestParamInfo<Case>& info) {
      return std::string(arch_name(info.param.arch)) + "_" + info.param.type;
    });

TEST(VsLlamaCppBundled, QuantizedDefaultModel) {
  LES_REQUIRE_LLAMACPP();
  const std::string path = source_dir() + "/models/tiny-moe-q4_k_m.gguf";
  LES_REQUIRE_FILE(path);
  const std::string dir = temp_dir();
  const std::vector<std::vector<int32_t>> seqs = {
      {641, 279, 7167, 4264, 3465, 279, 566, 5276, 323, 279, 2430, 339, 13, 1597, 279, 2430},
      {785, 3974, 293, 4830, 282, 5131, 7784, 82, 916, 279, 1187, 4246, 5562, 13, 362, 6366}};
  const Agreement a = compare_with_llamacpp(path, seqs, dir);
  std::printf("bundled q4_k_m: max|diff| %.3g  max rel %.3g  mean rel %.3g  argmax %d/%d\n", a.max_abs, a.max_rel,
              a.mean_rel, a.argmax_agree, a.positions);
  EXPECT_EQ(a.argmax_agree, a.positions);
  EXPECT_LE(a.mean_rel, 2e-3);
  std::string cleanup = "rm -rf '" + dir + "'";
  (void)std::system(cleanup.c_str());
}
