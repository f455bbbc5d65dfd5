// Named shapes and the validation of a synthetic model's specification.
#include <cmath>
#include <numeric>

#include "les/convert/quantize_model.h"
#include "les/synth/arch_synth.h"
#include "les/synth/synth.h"
#include "les/util/error.h"

namespace les::synth {

namespace {

struct NamedShape {
  const char* name;
  Arch arch;
  int n_layer, n_embd, n_head, n_head_kv, head_dim, n_expert, n_expert_used, n_ff_exp, n_ff_shexp, n_vocab, n_ctx;
  float rope_freq_base;
  // qwen35moe: DeltaNet state size, q/k heads, v heads, rotated dims (0: derived from the shape).
  int ssm_d_state = 0, ssm_n_k_heads = 0, ssm_n_v_heads = 0, n_rot = 0;
  // The routing knob a deep shape needs for real routing's temporal reuse and popularity (0: the
  // SynthSpec default). Deep stacks accumulate context, so the default 0.9 gave the 48-layer shape
  // 6.7x random reuse; 0.4 and 0.25 land on DeepSeek-V2-Lite's 2.8x (docs/synth.md).
  float context_focus = 0;
};

// n_ff_shexp is used by qwen2moe only.
const NamedShape kShapes[] = {
    {"tiny", Arch::qwen3moe, 4, 128, 4, 2, 32, 16, 4, 64, 64, 512, 512, 1e4f},
    {"small", Arch::qwen3moe, 8, 256, 4, 2, 64, 64, 4, 128, 128, 8000, 512, 1e4f},
    {"qwen3-30b-a3b", Arch::qwen3moe, 48, 2048, 32, 4, 128, 128, 8, 768, 768, 151936, 40960, 1e6f, 0, 0, 0, 0, 0.40f},
    {"35b-a3b", Arch::qwen3moe, 40, 2048, 16, 2, 256, 256, 8, 512, 512, 248320, 262144, 1e7f, 0, 0, 0, 0, 0.25f},
    {"qwen3-0.6b", Arch::qwen3, 28, 1024, 16, 8, 128, 0, 0, 3072, 0, 151936, 40960, 1e6f},
    {"mixtral-8x7b", Arch::llama, 32, 4096, 32, 8, 128, 8, 2, 14336, 0, 32000, 32768, 1e6f},
    {"olmoe-1b-7b", Arch::olmoe, 16, 2048, 16, 16, 128, 64, 8, 1024, 0, 50304, 4096, 1e4f},
    {"qwen35-35b-a3b", Arch::qwen35moe, 40, 2048, 16, 2, 256, 256, 8, 512, 512, 248320, 262144, 1e7f, 128, 16, 32, 64},
    {"qwen35-tiny", Arch::qwen35moe, 4, 64, 4, 2, 32, 8, 2, 32, 48, 300, 256, 1e4f, 16, 2, 4, 8},
    {"qwen3-next-80b-a3b", Arch::qwen3next, 48, 2048, 16, 2, 256, 512, 10, 512, 512, 151936, 262144, 1e7f, 128, 16, 32, 64},
    // glm4moe: the rest of the configuration (dense lead layers, NextN, ...) in write_glm4moe.cpp.
    {"glm-4.5-air", Arch::glm4moe, 46, 4096, 96, 8, 128, 128, 8, 1408, 1408, 151552, 131072, 1e6f, 0, 0, 0, 0, 0.40f},
    {"glm-4.5", Arch::glm4moe, 92, 5120, 96, 8, 128, 160, 8, 1536, 1536, 151552, 131072, 1e6f, 0, 0, 0, 0, 0.25f},
    // gpt-oss: 64 heads of 64 over n_embd 2880; sliding window 128 on the even layers, YaRN 32x
    // over 4096 positions (gpt_oss_shape_defaults). The 120b's 36 layers of 128 experts need
    // context-focus 0.30 for real routing's reuse (docs/synth.md); the 20b's 24 layers of 32
    // experts have it with the default.
    {"gpt-oss-20b", Arch::gpt_oss, 24, 2880, 64, 8, 64, 32, 4, 2880, 0, 201088, 131072, 150000.0f},
    {"gpt-oss-120b", Arch::gpt_oss, 36, 2880, 64, 8, 64, 128, 4, 2880, 0, 201088, 131072, 150000.0f, 0, 0, 0, 0, 0.30f},
    // deepseek2: head_dim = nope 128 + rope 64; the MLA and routing fields in spec_deepseek2.cpp.
    // context_focus: V2-Lite's 0.6 gives its real trace's reuse (2.8x random, docs/synth.md); V3
    // and Kimi-K2 take the knob's low end (their reuse stays 3-4x random; no real trace to match).
    {"deepseek-v2-lite", Arch::deepseek2, 27, 2048, 16, 1, 192, 64, 6, 1408, 2816, 102400, 163840, 1e4f, 0, 0, 0, 64, 0.6f},
    {"deepseek-v3", Arch::deepseek2, 61, 7168, 128, 1, 192, 256, 8, 2048, 2048, 129280, 163840, 1e4f, 0, 0, 0, 64, 0.1f},
    {"kimi-k2", Arch::deepseek2, 61, 7168, 64, 1, 192, 384, 8, 2048, 2048, 163840, 131072, 5e4f, 0, 0, 0, 64, 0.1f},
};

// The hybrid DeltaNet / gated attention architectures.
bool is_hybrid(Arch a) { return a == Arch::qwen35moe || a == Arch::qwen3next; }

bool needs_square_attention(Arch a) { return a == Arch::qwen2moe || a == Arch::olmoe; }

}  // namespace

std::vector<std::string> shape_names() {
  std::vector<std::string> v;
  for (const auto& s : kShapes) v.emplace_back(s.name);
  return v;
}

std::optional<Arch> parse_arch(const std::string& name) {
  if (name == "qwen3moe") return Arch::qwen3moe;
  if (name == "qwen2moe") return Arch::qwen2moe;
  if (name == "olmoe") return Arch::olmoe;
  if (name == "llama" || name == "mixtral") return Arch::llama;
  if (name == "qwen3") return Arch::qwen3;
  if (name == "qwen35moe") return Arch::qwen35moe;
  if (name == "qwen3next") return Arch::qwen3next;
  if (name == "glm4moe") return Arch::glm4moe;
  if (name == "gpt-oss") return Arch::gpt_oss;
  if (name == "deepseek2") return Arch::deepseek2;
  return std::nullopt;
}

SynthSpec shape_spec(const std::string& shape, std::optional<Arch> arch) {
  const NamedShape* ns = nullptr;
  for (const auto& s : kShapes) {
    if (shape == s.name) ns = &s;
  }
  if (!ns) {
    std::string names;
    for (const auto& n : shape_names()) names += (names.empty() ? "" : ", ") + n;
    throw Error(strfmt("synth: unknown shape '%s' (known: %s)", shape.c_str(), names.c_str()));
  }
  SynthSpec s;
  s.arch = arch.value_or(ns->arch);
  s.n_layer = ns->n_layer;
  s.n_embd = ns->n_embd;
  s.n_head = ns->n_head;
  s.n_head_kv = ns->n_head_kv;
  s.head_dim = ns->head_dim;
  s.n_expert = ns->n_expert;
  s.n_expert_used = ns->n_expert_used;
  s.n_ff_exp = ns->n_ff_exp;
  s.n_ff_shexp = s.arch == Arch::qwen2moe || is_hybrid(s.arch) ? ns->n_ff_shexp : 0;
  s.n_vocab = ns->n_vocab;
  s.n_ctx = ns->n_ctx;
  s.rope_freq_base = ns->rope_freq_base;
  s.name = std::string("synth-") + ns->name;
  if (ns->context_focus > 0) s.context_focus = ns->context_focus;

  const bool dense_shape = ns->n_expert == 0;
  if (s.arch == Arch::qwen3) {
    // A dense model of a MoE shape gets the MoE's active FFN width.
    if (!dense_shape) s.n_ff_exp = ns->n_ff_exp * ns->n_expert_used;
    s.n_expert = 0;
    s.n_expert_used = 0;
  } else if (dense_shape && s.arch != Arch::llama) {
    // A MoE architecture on a dense shape: 8 experts of a quarter of the width, 2 used.
    s.n_expert = 8;
    s.n_expert_used = 2;
    s.n_ff_exp = std::max(32, ns->n_ff_exp / 4);
    if (s.arch == Arch::qwen2moe) s.n_ff_shexp = s.n_ff_exp;
  }
  if (s.arch == Arch::qwen2moe && s.n_ff_shexp == 0) s.n_ff_shexp = s.n_ff_exp;
  if (needs_square_attention(s.arch) && s.n_head * s.head_dim != s.n_embd) {
    s.head_dim = s.n_embd % 128 == 0 ? 128 : s.n_embd % 64 == 0 ? 64 : s.n_embd / s.n_head;
    s.n_head = s.n_embd / s.head_dim;
    s.n_head_kv = std::gcd(s.n_head, s.n_head_kv);
  }
  if (s.arch == Arch::olmoe) s.n_head_kv = s.n_head;
  if (is_hybrid(s.arch)) {
    // Shapes without DeltaNet sizes get heads of head_dim: n_head_kv q/k heads, n_head v heads.
    s.ssm_d_state = ns->ssm_d_state ? ns->ssm_d_state : s.head_dim;
    s.ssm_n_k_heads = ns->ssm_n_k_heads ? ns->ssm_n_k_heads : s.n_head_kv;
    s.ssm_n_v_heads = ns->ssm_n_v_heads ? ns->ssm_n_v_heads : s.n_head;
    s.n_rot = ns->n_rot ? ns->n_rot : std::max(2, s.head_dim / 4 / 2 * 2);
    if (s.n_ff_shexp == 0) s.n_ff_shexp = s.n_ff_exp;
    s.attn_window = 0.0f;  // no q/k biases in this architecture
  }
  if (s.arch == Arch::glm4moe) glm4moe_shape_defaults(s, shape);
  if (s.arch == Arch::gpt_oss) gpt_oss_shape_defaults(s);
  if (s.arch == Arch::deepseek2) {
    s.n_ff_shexp = ns->n_ff_shexp;
    s.n_rot = ns->n_rot;
    deepseek2_shape(s, ns->name, ns->arch == Arch::deepseek2);
  }
  return s;
}

void validate(const SynthSpec& s) {
  auto fail = [](const std::string& msg) { throw Error("synth: " + msg); };
  const char* an = arch_name(s.arch);
  const bool moe = s.arch != Arch::qwen3 && !(s.arch == Arch::llama && s.n_expert == 0);
  if (s.arch == Arch::qwen2) fail("architecture qwen2 is not generated (use qwen3 for a dense model)");
  if (s.n_layer < 1 || s.n_layer > 1024) fail(strfmt("layers = %d must be in [1, 1024]", s.n_layer));
  if (s.n_embd < 8 || s.n_embd % 2 != 0) fail(strfmt("embd = %d must be even and >= 8", s.n_embd));
  if (s.n_head < 1 || s.n_head_kv < 1) fail(strfmt("heads = %d and kv-heads = %d must be >= 1", s.n_head, s.n_head_kv));
  if (s.n_head % s.n_head_kv != 0) {
    fail(strfmt("heads = %d is not a multiple of kv-heads = %d", s.n_head, s.n_head_kv));
  }
  if (s.head_dim < 2 || s.head_dim % 2 != 0) fail(strfmt("head-dim = %d must be even and >= 2", s.head_dim));
  if (needs_square_attention(s.arch) && s.n_head * s.head_dim != s.n_embd) {
    fail(strfmt("%s needs heads x head-dim = embd (llama.cpp sizes attn_q and attn_output by n_embd), "
                "got %d x %d = %d != %d", an, s.n_head, s.head_dim, s.n_head * s.head_dim, s.n_embd));
  }
  if (s.arch == Arch::olmoe && s.n_head_kv != s.n_head) {
    fail(strfmt("olmoe needs kv-heads = heads (its k norm spans n_embd), got %d and %d", s.n_head_kv, s.n_head));
  }
  if (moe) {
    if (s.n_expert < 1) fail(strfmt("experts = %d must be >= 1 for %s", s.n_expert, an));
    if (s.n_expert_used < 1 || s.n_expert_used > s.n_expert) {
      fail(strfmt("used = %d must be in [1, experts = %d]", s.n_expert_used, s.n_expert));
    }
  }
  if (s.n_ff_exp < 1) fail(strfmt("ff-exp = %d must be >= 1", s.n_ff_exp));
  const bool shared = s.arch == Arch::qwen2moe || is_hybrid(s.arch) || s.arch == Arch::deepseek2;
  if (shared && s.n_ff_shexp < 1) fail(strfmt("%s needs a shared expert (ff-shared >= 1)", an));
  if (!shared && s.arch != Arch::glm4moe && s.n_ff_shexp != 0) {
    fail(strfmt("ff-shared = %d: only qwen2moe, qwen35moe, qwen3next, glm4moe and deepseek2 have a shared expert",
                s.n_ff_shexp));
  }
  if (s.arch == Arch::glm4moe) {
    validate_glm4moe(s);
  } else if (s.arch != Arch::deepseek2 &&
             (s.n_dense_lead != 0 || s.n_ff_dense != 0 || s.qk_norm || s.expert_weights_scale != 1.0f)) {
    fail("dense lead layers, ff-dense, qk-norm and the expert weights scale are glm4moe and deepseek2 settings");
  }
  validate_deepseek2(s);
  if (is_hybrid(s.arch)) {
    if (s.n_rot < 2 || s.n_rot % 2 != 0 || s.n_rot > s.head_dim) {
      fail(strfmt("rope-dims = %d must be even and in [2, head-dim = %d]", s.n_rot, s.head_dim));
    }
    if (s.full_attn_interval < 1) fail(strfmt("attn-interval = %d must be >= 1", s.full_attn_interval));
    if (s.ssm_d_state < 1 || s.ssm_n_k_heads < 1 || s.ssm_n_v_heads < 1) {
      fail(strfmt("ssm-state = %d, ssm-k-heads = %d and ssm-v-heads = %d must be >= 1", s.ssm_d_state,
                  s.ssm_n_k_heads, s.ssm_n_v_heads));
    }
    if (s.ssm_n_v_heads % s.ssm_n_k_heads != 0) {
      fail(strfmt("ssm-v-heads = %d is not a multiple of ssm-k-heads = %d", s.ssm_n_v_heads, s.ssm_n_k_heads));
    }
    if (s.ssm_d_conv < 2 || s.ssm_d_conv > 16) fail(strfmt("ssm-conv = %d must be in [2, 16]", s.ssm_d_conv));
    if (s.attn_window != 0.0f) fail(strfmt("attn-window must be 0 for %s (the architecture has no q/k biases)", an));
  }
  validate_gpt_oss(s);
  if (s.n_mtp != 0 && (s.n_mtp != 1 || (!is_hybrid(s.arch) && s.arch != Arch::glm4moe))) {
    fail(strfmt("mtp = %d: only qwen35moe, qwen3next and glm4moe have an MTP block, and at most one", s.n_mtp));
  }
  if (s.n_vocab < 259) fail(strfmt("vocab = %d must be >= 259 (256 byte tokens + 3 special tokens)", s.n_vocab));
  if (s.image_tokens && s.n_vocab < 263) {
    fail(strfmt("vocab = %d must be >= 263 with image tokens (256 byte tokens + 7 special tokens)", s.n_vocab));
  }
  if (s.n_ctx < 1) fail(strfmt("ctx = %d must be >= 1", s.n_ctx));
  if (!(s.rope_freq_base > 1.0f)) fail("rope base must be > 1");
  if (!(s.rms_eps >= 0.0f && s.rms_eps < 1.0f)) fail("eps must be in [0, 1)");
  if (s.n_threads < 1) fail("threads must be >= 1");
  (void)parse_quantize_plan(s.type);  // throws for an unknown type
  if (!(s.update > 0.0f && s.update <= 4.0f)) fail(strfmt("update = %g must be in (0, 4]", s.update));
  if (!(s.first_update >= 0.0f && s.first_update <= 10.0f)) {
    fail(strfmt("first-update = %g must be in [0, 10]", s.first_update));
  }
  if (!(s.attn_share >= 0.0f && s.attn_share <= 1.0f)) fail(strfmt("attn-share = %g must be in [0, 1]", s.attn_share));
  if (!(s.attn_window == 0.0f || (s.attn_window >= 1.0f && s.attn_window <= 1e5f))) {
    fail(strfmt("attn-window = %g must be 0 (off) or in [1, 1e5]", s.attn_window));
  }
  if (!(s.skew >= 0.0f && s.skew <= 4.0f)) fail(strfmt("skew = %g must be in [0, 4]", s.skew));
  if (!(s.context_focus >= 0.0f && s.context_focus <= 1.0f)) {
    fail(strfmt("context-focus = %g must be in [0, 1]", s.context_focus));
  }
  if (!(s.router_scale > 0.0f && s.router_scale <= 100.0f)) {
    fail(strfmt("router-scale = %g must be in (0, 100]", s.router_scale));
  }
}

}  // namespace les::synth
