// glm4moe synthetic models: shape defaults (GLM-4.5 / GLM-4.5-Air), validation, keys and blocks.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "les/synth/arch_synth.h"
#include "les/util/error.h"

namespace les::synth {

namespace glm4moe_detail {

// The glm4moe fields of a real model's configuration (config.json of the Hugging Face release).
struct GlmShape {
  const char* name;
  int n_rot, n_dense_lead, n_ff_dense, n_shared;
  float expert_weights_scale;  // routed_scaling_factor
  bool qk_norm;                // use_qk_norm
};

const GlmShape kGlmShapes[] = {
    {"glm-4.5-air", 64, 1, 10944, 1, 1.0f, false},
    {"glm-4.5", 64, 3, 12288, 1, 2.5f, true},
};

void fail(const std::string& msg) { throw Error("synth: " + msg); }

}  // namespace glm4moe_detail

void glm4moe_shape_defaults(SynthSpec& s, const std::string& shape) {
  using namespace glm4moe_detail;
  for (const GlmShape& g : kGlmShapes) {
    if (shape != g.name) continue;
    s.n_rot = g.n_rot;
    s.n_dense_lead = g.n_dense_lead;
    s.n_ff_dense = g.n_ff_dense;
    s.n_ff_shexp = g.n_shared * s.n_ff_exp;
    s.expert_weights_scale = g.expert_weights_scale;
    s.qk_norm = g.qk_norm;
    s.n_mtp = 1;
    s.rms_eps = 1e-5f;
    return;
  }
  // Any other shape: half the head rotated, one dense lead layer of k experts' width, one shared
  // expert, GLM-4.5's routed scaling (so that the scaling is exercised), no q/k norms, no NextN.
  s.n_rot = std::max(2, s.head_dim / 2 / 2 * 2);
  s.n_dense_lead = s.n_layer > 1 ? 1 : 0;
  s.n_ff_dense = s.n_ff_exp * s.n_expert_used;
  s.n_ff_shexp = s.n_ff_exp;
  s.expert_weights_scale = 2.5f;
  s.qk_norm = false;
}

void validate_glm4moe(const SynthSpec& s) {
  using glm4moe_detail::fail;
  if (s.n_rot < 2 || s.n_rot % 2 != 0 || s.n_rot > s.head_dim) {
    fail(strfmt("rope-dims = %d must be even and in [2, head-dim = %d]", s.n_rot, s.head_dim));
  }
  if (s.n_dense_lead < 0 || s.n_dense_lead > s.n_layer) {
    fail(strfmt("dense lead layers = %d must be in [0, layers = %d]", s.n_dense_lead, s.n_layer));
  }
  if (s.n_dense_lead > 0 && s.n_ff_dense < 1) fail(strfmt("ff-dense = %d must be >= 1 with dense lead layers", s.n_ff_dense));
  if (s.n_ff_dense < 0) fail(strfmt("ff-dense = %d must be >= 0", s.n_ff_dense));
  if (s.n_ff_shexp < 0 || s.n_ff_shexp % s.n_ff_exp != 0) {
    fail(strfmt("ff-shared = %d must be a multiple of ff-exp = %d (glm4moe stores a count of shared experts)",
                s.n_ff_shexp, s.n_ff_exp));
  }
  if (!(s.expert_weights_scale > 0.0f && s.expert_weights_scale <= 100.0f)) {
    fail(strfmt("expert weights scale = %g must be in (0, 100]", s.expert_weights_scale));
  }
  if (s.n_mtp < 0 || s.n_mtp > 1) fail(strfmt("mtp = %d must be 0 or 1", s.n_mtp));
}

void add_glm4moe_keys(gguf::Writer& w, const SynthSpec& s) {
  const std::string p = "glm4moe.";
  w.add_u32(p + "feed_forward_length", static_cast<uint32_t>(s.n_ff_dense > 0 ? s.n_ff_dense : s.n_ff_exp * s.n_expert_used));
  w.add_u32(p + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
  w.add_u32(p + "expert_shared_count", static_cast<uint32_t>(s.n_ff_shexp / s.n_ff_exp));
  w.add_u32(p + "leading_dense_block_count", static_cast<uint32_t>(s.n_dense_lead));
  w.add_u32(p + "expert_gating_func", 2);  // sigmoid
  w.add_bool(p + "expert_weights_norm", true);
  w.add_f32(p + "expert_weights_scale", s.expert_weights_scale);
}

void add_glm4moe_block(TensorSink& out, const SynthSpec& s, const Design& d, int il) {
  const bool nextn = il == s.n_layer;
  const LayerDesign& L = d.layers[static_cast<size_t>(nextn ? il - 1 : il)];
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t E = s.n_embd, hd = s.head_dim;
  const int64_t nq = s.n_head * hd, nkv = s.n_head_kv * hd;
  // Norm weights vary around 1, so that a norm applied in the wrong place shows in the logits.
  out.float_tensor(b + "attn_norm.weight", {E}, 0.1f, 1.0f);
  out.matrix(b + "attn_q.weight", {E, nq}, L.sigma_q);
  out.matrix(b + "attn_k.weight", {E, nkv}, L.sigma_k);
  out.matrix(b + "attn_v.weight", {E, nkv}, L.sigma_v);
  if (d.local_attention) {  // the locality profile on the rotated pairs (design.h)
    std::vector<float> q, k;
    for (int h = 0; h < s.n_head; ++h) q.insert(q.end(), d.head_bias.begin(), d.head_bias.end());
    for (int h = 0; h < s.n_head_kv; ++h) k.insert(k.end(), d.head_bias.begin(), d.head_bias.end());
    for (float& x : q) x *= d.bias_scale;
    for (float& x : k) x *= d.bias_scale;
    out.vector(b + "attn_q.bias", std::move(q));
    out.vector(b + "attn_k.bias", std::move(k));
  } else {
    out.float_tensor(b + "attn_q.bias", {nq}, 0.2f, 0.0f);
    out.float_tensor(b + "attn_k.bias", {nkv}, 0.2f, 0.0f);
  }
  out.float_tensor(b + "attn_v.bias", {nkv}, 0.2f, 0.0f);
  out.matrix(b + "attn_output.weight", {nq, E}, L.sigma_o);
  if (s.qk_norm) {
    out.float_tensor(b + "attn_q_norm.weight", {hd}, 0.05f * d.qk_norm_weight, d.qk_norm_weight);
    out.float_tensor(b + "attn_k_norm.weight", {hd}, 0.05f * d.qk_norm_weight, d.qk_norm_weight);
  }
  out.float_tensor(b + "post_attention_norm.weight", {E}, 0.1f, 1.0f);
  const int64_t F = s.n_ff_exp, X = s.n_expert, FS = s.n_ff_shexp;
  if (!nextn && il < s.n_dense_lead) {
    out.matrix(b + "ffn_gate.weight", {E, s.n_ff_dense}, L.sigma_gate);
    out.matrix(b + "ffn_up.weight", {E, s.n_ff_dense}, L.sigma_up);
    out.matrix(b + "ffn_down.weight", {s.n_ff_dense, E}, L.sigma_down);
  } else {
    out.router(b + "ffn_gate_inp.weight", L);
    // Selection bias: large enough to change some selections (sigmoid scores spread ~0.2).
    out.float_tensor(b + "exp_probs_b.bias", {X}, 0.05f, 0.1f);
    out.matrix(b + "ffn_gate_exps.weight", {E, F, X}, L.sigma_gate);
    out.matrix(b + "ffn_up_exps.weight", {E, F, X}, L.sigma_up);
    out.matrix(b + "ffn_down_exps.weight", {F, E, X}, L.sigma_down);
    if (FS > 0) {
      out.matrix(b + "ffn_gate_shexp.weight", {E, FS}, L.sigma_sh_gate);
      out.matrix(b + "ffn_up_shexp.weight", {E, FS}, L.sigma_sh_up);
      out.matrix(b + "ffn_down_shexp.weight", {FS, E}, L.sigma_sh_down);
    }
  }
  if (nextn) {  // own embedding and head, as the GLM-4.5 releases store them
    const int64_t V = s.n_vocab;
    out.matrix(b + "nextn.eh_proj.weight", {2 * E, E}, 1.0f / std::sqrt(static_cast<float>(2 * E)));
    out.float_tensor(b + "nextn.enorm.weight", {E}, 0.1f, 1.0f);
    out.float_tensor(b + "nextn.hnorm.weight", {E}, 0.1f, 1.0f);
    out.matrix(b + "nextn.embed_tokens.weight", {E, V}, d.sigma_embd);
    out.float_tensor(b + "nextn.shared_head_norm.weight", {E}, 0.1f, 1.0f);
    out.matrix(b + "nextn.shared_head_head.weight", {E, V}, d.sigma_output);
  }
}

}  // namespace les::synth
