// The numbers behind a synthetic model: per-tensor weight scales, the attention locality bias and
// the router gains, derived from the spec so that every block's output has a planned rms relative
// to the residual stream.
//
// Two subspaces of the hidden state: the "context" coordinates [0, n_embd/2) and the "token"
// coordinates [n_embd/2, n_embd). Attention (a local moving average, slowly varying from token to
// token) writes mostly into the context coordinates, the embedding everywhere, the experts mostly
// into the token coordinates; the routers weigh the context coordinates by `context_focus`. So
// routing follows the slowly varying context more and more with depth (temporal reuse rising with
// depth, as in trained models) while each layer's update stays small (cross-layer predictability).
//
// Residual stream bookkeeping (per-element variance v, embedding variance 1): layer l's attention
// adds A_l = a^2 v, then its MoE adds M_l = m^2 v, with a^2 = attn_share * update^2 and
// m^2 = (1 - attn_share) * update^2 (layer 0's MoE: m = first_update). The norms before each block make the block inputs rms 1, so
// each output's rms is a product of weight scales and a few expectations computed here (attention
// weight concentration, E[silu(z)^2], the routing weights' sum of squares). Where these
// expectations are off, the stream grows a little faster or slower, which brings the relative
// update back to its planned value within a few layers.
#pragma once

#include <cstdint>
#include <vector>

#include "les/synth/synth.h"

namespace les::synth {

// Element std of a matrix whose output rows are hidden-state coordinates: rows (output
// coordinates) below `split` use ctx, the others tok.
struct SplitSigma {
  float ctx = 0, tok = 0;
};

struct LayerDesign {
  float sigma_q = 0, sigma_k = 0, sigma_v = 0;                 // attention weight element std
  SplitSigma sigma_o;                                          // attn_output
  float sigma_gate = 0, sigma_up = 0;                          // routed experts or dense FFN
  SplitSigma sigma_down;
  float sigma_sh_gate = 0, sigma_sh_up = 0;                    // shared expert (qwen2moe)
  SplitSigma sigma_sh_down;
  float sigma_sh_inp = 0;                                      // ffn_gate_inp_shexp
  SplitSigma router;               // router column (input coordinate) std before the row gain
  std::vector<float> router_gain;  // [n_expert]: popularity gain of router row e
  // gpt-oss: [n_head] attention sink logits, each taking a planned share of its head's attention
  // (sigma_o makes up for the share lost).
  std::vector<float> sinks;
};

struct Design {
  bool moe = false;
  bool local_attention = false;  // q/k biases present
  float sigma_embd = 1.0f;
  float sigma_output = 0;
  int n_ctx_dims = 0;            // context coordinates [0, n_ctx_dims)
  float output_norm_ctx = 1.0f;  // output_norm weight of the context coordinates (others 1)
  // Attention locality: per-head bias profile b [head_dim] (sum of squares = head_dim), written
  // as attn_q.bias (every q head) and attn_k.bias (every kv head) times bias_scale; q/k norm
  // weights (architectures with q/k norms) all equal qk_norm_weight.
  std::vector<float> head_bias;
  float bias_scale = 1.0f;      // multiplies head_bias in the written bias tensors
  float qk_norm_weight = 1.0f;
  float score_scale = 1.0f;     // s: the q and k bias parts reach the score as s^2 b.R b / sqrt(hd)
  float content_ratio = 0.5f;    // rms of the token-dependent part of q/k relative to the bias
  // Expectations used for the scales (reported by tests and docs).
  double attn_sum_p2 = 1.0;      // sum_j p_j^2 of the attention weights (white values)
  double silu_sq = 0;            // E[silu(z)^2], z ~ N(0,1)
  double route_w2 = 1.0;         // E[sum_k w_k^2] of the routing weights
  std::vector<double> stream_rms;  // planned rms of the stream after each layer
  std::vector<double> stream_lag1; // planned correlation of consecutive tokens' streams after each layer
  std::vector<double> route_lag1;  // the same for the router's view (context coordinates weighted)
  std::vector<double> ctx_frac;    // share of the stream's variance in the context coordinates
  std::vector<double> attn_var;    // variance of an attention head's output per unit value variance
  std::vector<LayerDesign> layers;
  float kq_scale = 1.0f;         // the architecture's attention score scale times the rope magnitude^2

  // deepseek2 (multi-head latent attention has no q/k biases): stream coordinate const_coord is 1
  // in every token embedding and nothing writes to it; attn_norm scales it to 1 at every layer
  // (attn_norm_const), ffn_norm and output_norm weigh it 0. The rope rows of the query (attn_q, or
  // attn_q_b over the q LoRA latent whose coordinate const_coord carries the constant) and of
  // attn_kv_a_mqa take head_bias * bias_scale as their weight on it: the rope parts get the
  // locality bias the other architectures put in attn_q.bias / attn_k.bias.
  int const_coord = -1;
  std::vector<float> attn_norm_const;  // [n_layer]
  float mla_q_pe = 0, mla_q_nope = 0;  // element std of the query's rope / nope rows
  float mla_kv = 0, mla_k_pe = 0;      // attn_kv_a_mqa: latent rows, rope rows
  float mla_q_a = 0;                   // attn_q_a
  float mla_k_b = 0, mla_v_b = 0;      // attn_k_b, attn_v_b
};

Design make_design(const SynthSpec& spec);

// Deterministic score (in nats, relative to distance 0) that the locality bias gives a key at
// distance `dist` (tests and documentation).
double attention_bias_score(const SynthSpec& spec, const Design& d, int dist);

}  // namespace les::synth
