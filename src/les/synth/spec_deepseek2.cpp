// deepseek2 in the synthetic generator: the MLA and routing fields of its shapes, their checks,
// and the design of the multi-head latent attention's scales.
#include <algorithm>
#include <cmath>

#include "les/model/router.h"
#include "les/synth/arch_synth.h"
#include "les/util/error.h"

namespace les::synth {

namespace deepseek2_synth_detail {

struct Deepseek2Shape {
  const char* name;
  int q_lora, kv_lora, v_head, dense_lead, n_ff_dense;
  Gating gating;
  bool norm_topk;
  float scale;
  int groups, group_used;
  bool selection_bias;
  float yarn_factor;
  int yarn_orig_ctx;
  float mscale_all_dim;
};

// From the models' config.json files (DeepSeek-V2-Lite, DeepSeek-V3, Kimi-K2-Instruct).
const Deepseek2Shape kDeepseek2Shapes[] = {
    {"deepseek-v2-lite", 0, 512, 128, 1, 10944, Gating::softmax, false, 1.0f, 1, 1, false, 40.0f, 4096, 0.707f},
    {"deepseek-v3", 1536, 512, 128, 3, 18432, Gating::sigmoid, true, 2.5f, 8, 4, true, 40.0f, 4096, 1.0f},
    {"kimi-k2", 1536, 512, 128, 1, 18432, Gating::sigmoid, true, 2.827f, 1, 1, true, 32.0f, 4096, 1.0f},
};

// llama_context's YaRN attention factor and the rope kernel's magnitude scaling for the spec.
struct Yarn {
  float freq_scale = 1.0f, attn_factor = 1.0f, log_mul = 0.0f;
  float rope_magnitude = 1.0f;  // cos / sin are multiplied by this
};

Yarn yarn_of(const SynthSpec& s) {
  Yarn y;
  if (s.yarn_factor <= 0.0f) return y;
  y.freq_scale = 1.0f / s.yarn_factor;
  // The file stores 0.1 * mscale_all_dim; llama.cpp divides it by 0.1 again.
  y.log_mul = 0.1f * s.yarn_mscale_all_dim / 0.1f;
  const float factor = 1.0f / y.freq_scale;
  const auto mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; };
  if (y.log_mul != 0.0f) {
    const float m = y.log_mul != 1.0f ? y.log_mul : 1.0f;
    y.attn_factor = mscale(factor, m) / mscale(factor, y.log_mul);
  } else {
    y.attn_factor = mscale(factor, 1.0f);
  }
  y.attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  y.rope_magnitude = y.attn_factor * (1.0f + 0.1f * std::log(1.0f / y.freq_scale));
  return y;
}

constexpr float kBetaFast = 32.0f, kBetaSlow = 1.0f;  // llama.cpp's defaults (it reads no keys for them)

}  // namespace deepseek2_synth_detail

void deepseek2_shape(SynthSpec& s, const std::string& shape, bool own_shape) {
  using namespace deepseek2_synth_detail;
  s.n_head_kv = 1;
  if (!own_shape) {
    // V2's proportions on the shape's head: nope = head_dim, rope = nope / 2, latent 4 x nope.
    const int nope = s.head_dim;
    s.n_rot = std::max(2, nope / 2 / 2 * 2);
    s.head_dim = nope + s.n_rot;
    s.kv_lora_rank = 4 * nope;
    s.v_head_dim = nope;
    s.n_dense_lead = s.n_layer > 1 ? 1 : 0;
    s.n_ff_dense = 4 * s.n_ff_exp;
    s.n_ff_shexp = s.n_ff_exp;
    return;
  }
  for (const Deepseek2Shape& d : kDeepseek2Shapes) {
    if (shape != d.name) continue;
    s.q_lora_rank = d.q_lora;
    s.kv_lora_rank = d.kv_lora;
    s.v_head_dim = d.v_head;
    s.n_dense_lead = d.dense_lead;
    s.n_ff_dense = d.n_ff_dense;
    s.gating = d.gating;
    s.norm_topk = d.norm_topk;
    s.expert_weights_scale = d.scale;
    s.n_expert_groups = d.groups;
    s.n_group_used = d.group_used;
    s.selection_bias = d.selection_bias;
    s.yarn_factor = d.yarn_factor;
    s.yarn_orig_ctx = d.yarn_orig_ctx;
    s.yarn_mscale_all_dim = d.mscale_all_dim;
    return;
  }
  throw Error("synth: no deepseek2 fields for shape '" + shape + "'");
}

void validate_deepseek2(const SynthSpec& s) {
  auto fail = [](const std::string& msg) { throw Error("synth: " + msg); };
  if (s.arch != Arch::deepseek2) {
    if (s.q_lora_rank != 0 || s.kv_lora_rank != 0 || s.v_head_dim != 0 || s.gating != Gating::softmax ||
        s.norm_topk || s.n_expert_groups != 1 || s.n_group_used != 1 || s.selection_bias ||
        s.yarn_mscale_all_dim != 0.0f) {
      fail(strfmt("q/kv LoRA ranks, v-head-dim, gating, expert groups, selection bias and the YaRN mscale are "
                  "deepseek2 fields (architecture %s)", arch_name(s.arch)));
    }
    return;
  }
  if (s.qk_norm || s.sliding_window != 0 || s.rope_freq_base_swa != 0.0f || s.n_mtp != 0) {
    fail("qk-norm, swa-window, rope-base-swa and mtp do not apply to deepseek2");
  }
  if (s.n_head_kv != 1) fail(strfmt("kv-heads = %d: deepseek2 has one latent kv head", s.n_head_kv));
  if (s.kv_lora_rank < 2) fail(strfmt("kv-lora = %d must be >= 2", s.kv_lora_rank));
  if (s.q_lora_rank < 0) fail(strfmt("q-lora = %d must be >= 0 (0: no q LoRA)", s.q_lora_rank));
  if (s.v_head_dim < 1) fail(strfmt("v-head-dim = %d must be >= 1", s.v_head_dim));
  if (s.n_rot < 2 || s.n_rot % 2 != 0 || s.n_rot >= s.head_dim) {
    fail(strfmt("rope-dims = %d must be even, >= 2 and below head-dim = %d (nope + rope)", s.n_rot, s.head_dim));
  }
  if (s.n_ff_shexp % s.n_ff_exp != 0) {
    fail(strfmt("ff-shared = %d must be a multiple of ff-exp = %d (deepseek2 stores a count of shared experts)",
                s.n_ff_shexp, s.n_ff_exp));
  }
  if (s.n_dense_lead < 0 || s.n_dense_lead >= s.n_layer) {
    fail(strfmt("dense-lead = %d must be in [0, layers = %d)", s.n_dense_lead, s.n_layer));
  }
  if (s.n_dense_lead > 0 && s.n_ff_dense < 1) fail(strfmt("ff-dense = %d must be >= 1", s.n_ff_dense));
  if (s.gating != Gating::softmax && s.gating != Gating::sigmoid) fail("deepseek2 gating is softmax or sigmoid");
  if (!(s.expert_weights_scale > 0.0f && s.expert_weights_scale < 1e3f)) {
    fail(strfmt("expert weights scale = %g must be in (0, 1000)", static_cast<double>(s.expert_weights_scale)));
  }
  if (s.n_expert_groups < 1 || s.n_group_used < 1) fail("expert groups and groups used must be >= 1");
  if (s.n_expert_groups > 1) {
    if (s.n_expert % s.n_expert_groups != 0) {
      fail(strfmt("experts = %d is not a multiple of expert groups = %d", s.n_expert, s.n_expert_groups));
    }
    const int per = s.n_expert / s.n_expert_groups;
    if (per < 2) fail("expert groups need at least 2 experts each");
    if (s.n_group_used >= s.n_expert_groups) {
      fail(strfmt("groups used = %d must be below expert groups = %d", s.n_group_used, s.n_expert_groups));
    }
    if (s.n_group_used * per < s.n_expert_used) {
      fail(strfmt("%d groups of %d experts cannot hold used = %d", s.n_group_used, per, s.n_expert_used));
    }
  } else if (s.n_group_used != 1) {
    fail(strfmt("groups used = %d without expert groups", s.n_group_used));
  }
  if (!(s.yarn_factor == 0.0f || (s.yarn_factor >= 1.0f && s.yarn_factor <= 1e4f))) {
    fail(strfmt("yarn factor = %g must be 0 (none) or in [1, 1e4]", static_cast<double>(s.yarn_factor)));
  }
  if (s.yarn_factor > 0.0f && (s.yarn_orig_ctx < 1 || !(s.yarn_mscale_all_dim >= 0.0f && s.yarn_mscale_all_dim < 100.0f))) {
    fail("YaRN needs an original context >= 1 and an mscale_all_dim in [0, 100)");
  }
}

float deepseek2_score_scale(const SynthSpec& s) {
  const deepseek2_synth_detail::Yarn y = deepseek2_synth_detail::yarn_of(s);
  const float attn_factor_org = y.attn_factor * (1.0f + 0.1f * std::log(1.0f / y.freq_scale));
  const float mscale = attn_factor_org * (1.0f + 0.1f * y.log_mul * std::log(1.0f / y.freq_scale));
  const float kq = mscale * mscale / std::sqrt(static_cast<float>(s.head_dim));
  return kq * y.rope_magnitude * y.rope_magnitude;
}

std::vector<double> deepseek2_rope_thetas(const SynthSpec& s) {
  using namespace deepseek2_synth_detail;
  const int nr = s.n_rot;
  const Yarn y = yarn_of(s);
  double lo = 0, hi = 0;
  if (s.yarn_factor > 0.0f) {  // the correction dims, as ops::set_yarn
    const auto corr = [&](float turns) {
      return nr * std::log(static_cast<double>(s.yarn_orig_ctx) / (turns * 2.0 * M_PI)) / (2.0 * std::log(s.rope_freq_base));
    };
    lo = std::max(0.0, std::floor(corr(kBetaFast)));
    hi = std::min(static_cast<double>(nr - 1), std::ceil(corr(kBetaSlow)));
  }
  std::vector<double> th(static_cast<size_t>(nr / 2));
  for (size_t i = 0; i < th.size(); ++i) {
    const double theta = std::pow(static_cast<double>(s.rope_freq_base), -2.0 * static_cast<double>(i) / nr);
    double mix = 1.0;  // no YaRN: every dim extrapolated (freq_scale 1)
    if (s.yarn_factor > 0.0f) {
      const double r = (static_cast<double>(i) - lo) / std::max(0.001, hi - lo);
      mix = 1.0 - std::min(1.0, std::max(0.0, r));
    }
    th[i] = theta * (y.freq_scale * (1.0 - mix) + mix);
  }
  return th;
}

double deepseek2_route_w2(const SynthSpec& s, const std::vector<double>& gain, Rng& rng) {
  RouterParams p;
  p.n_expert = s.n_expert;
  p.k = s.n_expert_used;
  p.norm_topk = s.norm_topk;
  p.scale = s.expert_weights_scale;
  p.gating = s.gating;
  p.n_groups = s.n_expert_groups;
  p.n_group_used = s.n_group_used;
  const int n_sim = 2048;
  std::vector<float> z(static_cast<size_t>(s.n_expert)), w(static_cast<size_t>(p.k));
  std::vector<int32_t> ids(static_cast<size_t>(p.k));
  double acc = 0;
  for (int t = 0; t < n_sim; ++t) {
    for (size_t e = 0; e < z.size(); ++e) z[e] = static_cast<float>(s.router_scale * gain[e] * rng.normal());
    route_topk(p, z.data(), nullptr, ids.data(), w.data());
    for (float x : w) acc += static_cast<double>(x) * x;
  }
  return acc / n_sim;
}

void design_mla(const SynthSpec& s, Design& d, double rho, double scale2) {
  const double E = s.n_embd, R = s.kv_lora_rank, nr = s.n_rot, nope = s.head_dim - s.n_rot;
  const double q_in = s.q_lora_rank > 0 ? s.q_lora_rank : E;  // the query projection's input width
  const double sc = std::sqrt(scale2);
  d.bias_scale = static_cast<float>(sc);
  if (d.local_attention) {
    d.const_coord = 0;
    // attn_norm makes the constant coordinate 1 for a stream of the planned rms.
    d.attn_norm_const.resize(static_cast<size_t>(s.n_layer));
    for (int il = 0; il < s.n_layer; ++il) {
      d.attn_norm_const[static_cast<size_t>(il)] =
          static_cast<float>(il == 0 ? d.sigma_embd : d.stream_rms[static_cast<size_t>(il - 1)]);
    }
  }
  // Rope rows: the token-dependent part is rho times the bias (as with q/k biases elsewhere).
  d.mla_q_pe = static_cast<float>(rho * sc / std::sqrt(q_in));
  d.mla_k_pe = static_cast<float>(rho * sc / std::sqrt(E));
  // Nope rows: the latent part of a score has the spread of the rope parts' token-dependent
  // product, kq s^2 rho^2 sqrt(rope dims), with attn_k_b keeping the query's scale and a latent of
  // rms 1: kq sqrt(latent x q_in) sigma = that.
  d.mla_q_nope = static_cast<float>(scale2 * rho * rho * std::sqrt(nr) / std::sqrt(R * q_in));
  d.mla_k_b = static_cast<float>(1.0 / std::sqrt(nope));
  d.mla_v_b = static_cast<float>(1.0 / std::sqrt(R));
  d.mla_kv = static_cast<float>(1.0 / std::sqrt(E));
  d.mla_q_a = static_cast<float>(1.0 / std::sqrt(E));
}

}  // namespace les::synth
