// deepseek2 in the synthetic generator: its keys (as llama.cpp's converter writes them) and the
// tensors of one layer: multi-head latent attention, then a dense FFN (lead layers) or the
// routed experts with ungated shared experts.
#include <cmath>

#include "les/synth/arch_synth.h"

namespace les::synth {

namespace deepseek2_synth_detail {

// exp_probs_b: shifts close choices between sigmoid scores. Real biases are learned to even the
// load out; random ones concentrate it (0.05 left 38% of a V3 proxy's experts unused), so small.
constexpr float kSelectionBiasSigma = 0.01f;

}  // namespace deepseek2_synth_detail

void add_deepseek2_keys(gguf::Writer& w, const SynthSpec& s) {
  const std::string p = "deepseek2.";
  const uint32_t R = static_cast<uint32_t>(s.kv_lora_rank), nr = static_cast<uint32_t>(s.n_rot);
  w.add_u32(p + "vocab_size", static_cast<uint32_t>(s.n_vocab));
  w.add_u32(p + "leading_dense_block_count", static_cast<uint32_t>(s.n_dense_lead));
  // Written also without a q LoRA: llama.cpp requires the key unless the layer count marks a
  // V2-Lite-like model.
  w.add_u32(p + "attention.q_lora_rank", static_cast<uint32_t>(s.q_lora_rank));
  w.add_u32(p + "attention.kv_lora_rank", R);
  w.add_u32(p + "attention.key_length", R + nr);  // the compressed cache row
  w.add_u32(p + "attention.value_length", R);
  w.add_u32(p + "attention.key_length_mla", static_cast<uint32_t>(s.head_dim));
  w.add_u32(p + "attention.value_length_mla", static_cast<uint32_t>(s.v_head_dim));
  w.add_u32(p + "rope.dimension_count", nr);
  w.add_u32(p + "feed_forward_length", static_cast<uint32_t>(s.n_ff_dense));
  w.add_u32(p + "expert_feed_forward_length", static_cast<uint32_t>(s.n_ff_exp));
  w.add_u32(p + "expert_shared_count", static_cast<uint32_t>(s.n_ff_shexp / s.n_ff_exp));
  w.add_f32(p + "expert_weights_scale", s.expert_weights_scale);
  if (s.norm_topk) w.add_bool(p + "expert_weights_norm", true);
  w.add_u32(p + "expert_gating_func", s.gating == Gating::sigmoid ? 2 : 1);
  w.add_u32(p + "expert_group_count", static_cast<uint32_t>(s.n_expert_groups));
  w.add_u32(p + "expert_group_used_count", static_cast<uint32_t>(s.n_group_used));
  if (s.yarn_factor > 0.0f) {
    w.add_string(p + "rope.scaling.type", "yarn");
    w.add_f32(p + "rope.scaling.factor", s.yarn_factor);
    w.add_u32(p + "rope.scaling.original_context_length", static_cast<uint32_t>(s.yarn_orig_ctx));
    w.add_f32(p + "rope.scaling.yarn_beta_fast", 32.0f);
    w.add_f32(p + "rope.scaling.yarn_beta_slow", 1.0f);
    w.add_f32(p + "rope.scaling.yarn_log_multiplier", 0.1f * s.yarn_mscale_all_dim);
  }
}

void add_deepseek2_layer(TensorSink& out, const SynthSpec& s, const Design& d, int il) {
  using namespace deepseek2_synth_detail;
  const LayerDesign& L = d.layers[static_cast<size_t>(il)];
  const std::string b = "blk." + std::to_string(il) + ".";
  const int64_t E = s.n_embd, H = s.n_head, R = s.kv_lora_rank, nr = s.n_rot, dk = s.head_dim, nope = dk - nr;
  const int64_t dv = s.v_head_dim, Q = s.q_lora_rank;
  const bool bias = d.const_coord >= 0 && !d.head_bias.empty();
  const SplitSigma unit{1.0f, 1.0f};  // rows take their std from the edits below
  // The locality bias of rope dim j, as the weight on the constant coordinate (NaN: none). The
  // edits run when the file is written: they capture by value (d outlives the writing).
  auto rope_bias = [bias, &d](int64_t j) {
    const float v = bias ? d.head_bias[static_cast<size_t>(j)] * d.bias_scale : 0.0f;
    return v != 0.0f ? v : NAN;
  };
  // Outputs into the stream leave the constant coordinate alone.
  auto to_stream = [&](int64_t n_out) {
    return RowEditFn([n_out, c = d.const_coord](int64_t r) { return RowEdit{r % n_out == c ? 0.0f : 1.0f}; });
  };

  std::vector<float> attn_norm(static_cast<size_t>(E), 1.0f);
  if (d.const_coord >= 0) attn_norm[static_cast<size_t>(d.const_coord)] = d.attn_norm_const[static_cast<size_t>(il)];
  out.vector(b + "attn_norm.weight", std::move(attn_norm));
  const RowEditFn q_rows = [&d, rope_bias, nope, dk](int64_t r) {
    const int64_t j = r % dk;
    return j < nope ? RowEdit{d.mla_q_nope} : RowEdit{d.mla_q_pe, rope_bias(j - nope)};
  };
  if (Q > 0) {
    // Row const_coord of the q LoRA latent carries the constant coordinate only.
    const int c = bias ? d.const_coord : -1;
    out.matrix_rows(b + "attn_q_a.weight", {E, Q}, unit, [&d, c](int64_t r) {
      return r == c ? RowEdit{0.0f, 1.0f} : RowEdit{d.mla_q_a};
    });
    out.vector(b + "attn_q_a_norm.weight", std::vector<float>(static_cast<size_t>(Q), 1.0f));
    out.matrix_rows(b + "attn_q_b.weight", {Q, H * dk}, unit, q_rows);
  } else {
    out.matrix_rows(b + "attn_q.weight", {E, H * dk}, unit, q_rows);
  }
  out.matrix_rows(b + "attn_kv_a_mqa.weight", {E, R + nr}, unit, [&d, rope_bias, R](int64_t r) {
    return r < R ? RowEdit{d.mla_kv} : RowEdit{d.mla_k_pe, rope_bias(r - R)};
  });
  out.vector(b + "attn_kv_a_norm.weight", std::vector<float>(static_cast<size_t>(R), 1.0f));
  out.matrix_rows(b + "attn_k_b.weight", {nope, R, H}, SplitSigma{d.mla_k_b, d.mla_k_b}, {});
  out.matrix_rows(b + "attn_v_b.weight", {R, dv, H}, SplitSigma{d.mla_v_b, d.mla_v_b}, {});
  out.matrix_rows(b + "attn_output.weight", {H * dv, E}, L.sigma_o, to_stream(E));

  std::vector<float> ffn_norm(static_cast<size_t>(E), 1.0f);
  if (d.const_coord >= 0) ffn_norm[static_cast<size_t>(d.const_coord)] = 0.0f;
  out.vector(b + "ffn_norm.weight", std::move(ffn_norm));
  const SplitSigma in{L.sigma_gate, L.sigma_gate};
  if (il < s.n_dense_lead) {
    const int64_t F = s.n_ff_dense;
    out.matrix_rows(b + "ffn_gate.weight", {E, F}, in, {});
    out.matrix_rows(b + "ffn_up.weight", {E, F}, in, {});
    out.matrix_rows(b + "ffn_down.weight", {F, E}, L.sigma_down, to_stream(E));
    return;
  }
  const int64_t F = s.n_ff_exp, X = s.n_expert, FS = s.n_ff_shexp;
  out.router(b + "ffn_gate_inp.weight", L);
  if (s.selection_bias) out.float_tensor(b + "exp_probs_b.bias", {X}, kSelectionBiasSigma, 0.0f);
  out.matrix_rows(b + "ffn_gate_exps.weight", {E, F, X}, in, {});
  out.matrix_rows(b + "ffn_up_exps.weight", {E, F, X}, in, {});
  out.matrix_rows(b + "ffn_down_exps.weight", {F, E, X}, L.sigma_down, to_stream(E));
  const SplitSigma sh_in{L.sigma_sh_gate, L.sigma_sh_gate};
  out.matrix_rows(b + "ffn_gate_shexp.weight", {E, FS}, sh_in, {});
  out.matrix_rows(b + "ffn_up_shexp.weight", {E, FS}, sh_in, {});
  out.matrix_rows(b + "ffn_down_shexp.weight", {FS, E}, L.sigma_sh_down, to_stream(E));
}

}  // namespace les::synth
