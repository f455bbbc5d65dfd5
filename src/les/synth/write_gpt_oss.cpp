// Synthetic gpt-oss models: sliding-window layers, YaRN, attention sinks, attention and expert
// biases. The attention locality of the design (q/k biases) applies as it is: gpt-oss has q/k
// biases.
#include <algorithm>
#include <cmath>

#include "les/model/config.h"
#include "les/model/ops.h"
#include "les/synth/arch_synth.h"
#include "les/synth/random_fill.h"
#include "les/util/error.h"

namespace les::synth {

namespace gpt_oss_synth_detail {

constexpr float kYarnFactor = 32.0f;   // gpt-oss-20b / 120b: rope_scaling factor 32 over 4096
constexpr int kYarnOrigCtx = 4096;
constexpr float kQkvBiasStd = 0.1f;    // random part of the q/k (without locality) and v biases
constexpr float kOutBiasStd = 0.02f;   // attn_output.bias
constexpr float kRouterBiasStd = 0.2f; // ffn_gate_inp.bias, in router logit units
constexpr float kExpBiasStd = 0.2f;    // gate/up expert biases (their products have std 1)

std::vector<float> tile(const std::vector<float>& v, int n) {
  std::vector<float> out;
  out.reserve(v.size() * static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out.insert(out.end(), v.begin(), v.end());
  return out;
}

}  // namespace gpt_oss_synth_detail

void gpt_oss_shape_defaults(SynthSpec& s) {
  using namespace gpt_oss_synth_detail;
  s.sliding_window = s.n_ctx <= 512 ? 16 : 128;
  s.yarn_factor = kYarnFactor;
  s.yarn_orig_ctx = kYarnOrigCtx;
}

void validate_gpt_oss(const SynthSpec& s) {
  auto fail = [](const std::string& msg) { throw Error("synth: " + msg); };
  if (s.arch != Arch::gpt_oss) {
    if (s.sliding_window != 0 || (s.yarn_factor != 0.0f && s.arch != Arch::deepseek2) || s.rope_freq_base_swa != 0.0f) {
      fail("swa-window, yarn and rope-base-swa apply to gpt-oss only (yarn: and deepseek2)");
    }
    return;
  }
  if (s.sliding_window < 1) fail(strfmt("swa-window = %d must be >= 1 for gpt-oss", s.sliding_window));
  if (s.yarn_factor != 0.0f && !(s.yarn_factor >= 1.0f && s.yarn_factor <= 1024.0f)) {
    fail(strfmt("yarn = %g must be 0 (off) or in [1, 1024]", s.yarn_factor));
  }
  if (s.yarn_factor != 0.0f && s.yarn_orig_ctx < 1) fail(strfmt("yarn-ctx = %d must be >= 1", s.yarn_orig_ctx));
  if (s.rope_freq_base_swa != 0.0f && !(s.rope_freq_base_swa > 1.0f)) fail("rope-base-swa must be 0 (unset) or > 1");
}

bool synth_is_swa(const SynthSpec& s, int il) { return s.arch == Arch::gpt_oss && s.sliding_window > 0 && il % 2 == 0; }

double yarn_theta_factor(const SynthSpec& s, int pair) {
  if (s.yarn_factor <= 0.0f) return 1.0;
  // The correction dims as the forward pass computes them (ops::set_yarn).
  ModelConfig c;
  c.n_rot = s.head_dim;
  c.n_ctx_orig_yarn = s.yarn_orig_ctx;
  ops::RopeParams rp;
  rp.freq_base = s.rope_freq_base;
  ops::set_yarn(rp, c);
  const double y = (pair - rp.corr_dims[0]) / std::max(0.001, static_cast<double>(rp.corr_dims[1] - rp.corr_dims[0]));
  const double ramp = 1.0 - std::clamp(y, 0.0, 1.0);  // 1: extrapolated (unscaled), 0: interpolated
  return (1.0 - ramp) / s.yarn_factor + ramp;
}

double yarn_magnitude(const SynthSpec& s) {
  return s.yarn_factor > 1.0f ? 1.0 + 0.1 * std::log(static_cast<double>(s.yarn_factor)) : 1.0;
}

void add_gpt_oss_keys(gguf::Writer& w, const SynthSpec& s) {
  const std::string p = "gpt-oss.";
  w.add_u32(p + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
  w.add_u32(p + "attention.sliding_window", static_cast<uint32_t>(s.sliding_window));
  if (s.rope_freq_base_swa > 0.0f) w.add_f32(p + "rope.freq_base_swa", s.rope_freq_base_swa);
  if (s.yarn_factor > 0.0f) {
    w.add_string(p + "rope.scaling.type", "yarn");
    w.add_f32(p + "rope.scaling.factor", s.yarn_factor);
    w.add_u32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(s.yarn_orig_ctx));
    // As the converter writes them from the checkpoint (llama.cpp does not read them for gpt-oss).
    w.add_f32(p + "rope.scaling.yarn_beta_fast", 32.0f);
    w.add_f32(p + "rope.scaling.yarn_beta_slow", 1.0f);
  }
}

void add_gpt_oss_layer(TensorSink& out, const SynthSpec& s, const Design& d, int il) {
  using namespace gpt_oss_synth_detail;
  const LayerDesign& L = d.layers[static_cast<size_t>(il)];
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t E = s.n_embd, hd = s.head_dim;
  const int64_t nq = s.n_head * hd, nkv = s.n_head_kv * hd;
  out.vector(b + "attn_norm.weight", std::vector<float>(static_cast<size_t>(E), 1.0f));
  out.matrix(b + "attn_q.weight", {E, nq}, L.sigma_q);
  if (d.local_attention) {
    std::vector<float> head(d.head_bias);
    for (float& x : head) x *= d.bias_scale;
    out.vector(b + "attn_q.bias", tile(head, s.n_head));
    out.matrix(b + "attn_k.weight", {E, nkv}, L.sigma_k);
    out.vector(b + "attn_k.bias", tile(head, s.n_head_kv));
  } else {
    out.float_tensor(b + "attn_q.bias", {nq}, kQkvBiasStd, 0.0f);
    out.matrix(b + "attn_k.weight", {E, nkv}, L.sigma_k);
    out.float_tensor(b + "attn_k.bias", {nkv}, kQkvBiasStd, 0.0f);
  }
  out.matrix(b + "attn_v.weight", {E, nkv}, L.sigma_v);
  out.float_tensor(b + "attn_v.bias", {nkv}, kQkvBiasStd, 0.0f);
  out.matrix(b + "attn_output.weight", {nq, E}, L.sigma_o);
  out.float_tensor(b + "attn_output.bias", {E}, kOutBiasStd, 0.0f);
  out.vector(b + "attn_sinks.weight", L.sinks);
  out.vector(b + "post_attention_norm.weight", std::vector<float>(static_cast<size_t>(E), 1.0f));
  const int64_t F = s.n_ff_exp, X = s.n_expert;
  out.router(b + "ffn_gate_inp.weight", L);
  out.float_tensor(b + "ffn_gate_inp.bias", {X}, kRouterBiasStd, 0.0f);
  out.matrix(b + "ffn_gate_exps.weight", {E, F, X}, L.sigma_gate);
  out.float_tensor(b + "ffn_gate_exps.bias", {F, X}, kExpBiasStd, 0.0f);
  out.matrix(b + "ffn_up_exps.weight", {E, F, X}, L.sigma_up);
  out.float_tensor(b + "ffn_up_exps.bias", {F, X}, kExpBiasStd, 0.0f);
  out.matrix(b + "ffn_down_exps.weight", {F, E, X}, L.sigma_down);
  // A fifth of a down output element's std (token coordinates: act^2 ~ 1 per input).
  out.float_tensor(b + "ffn_down_exps.bias", {E, X}, 0.2f * L.sigma_down.tok * std::sqrt(static_cast<float>(F)), 0.0f);
}

}  // namespace les::synth
