#include "les/model/product_names.h"

namespace les {

namespace {

// Names of the products of block il (an attention or DeltaNet trunk layer, or the MTP block).
// qwen3next's fused ssm_ba is reported as ssm_beta (ssm_alpha has no name of its own), a legacy
// fused ssm_in as ssm_qkv (ssm_gate has none).
std::array<std::string, kProducts> block_names(const ModelConfig& c, const gguf::File& f, int il, bool mtp_block) {
  std::array<std::string, kProducts> n;
  const std::string b = "blk." + std::to_string(il) + ".";
  auto set = [&](Product p, const char* suffix) { n[static_cast<size_t>(p)] = b + suffix; };
  if (!mtp_block && c.is_recurrent(il)) {
    const bool fused_ba = c.arch == Arch::qwen3next;
    const bool fused_in = fused_ba && f.find_tensor(b + "ssm_in.weight") && !f.find_tensor(b + "attn_qkv.weight");
    set(Product::ssm_qkv, fused_in ? "ssm_in.weight" : "attn_qkv.weight");
    if (!fused_in) set(Product::ssm_gate, "attn_gate.weight");
    set(Product::ssm_beta, fused_ba ? "ssm_ba.weight" : "ssm_beta.weight");
    if (!fused_ba) set(Product::ssm_alpha, "ssm_alpha.weight");
    set(Product::ssm_out, "ssm_out.weight");
  } else if (c.mla()) {
    // The per-head attn_k_b / attn_v_b products (3-D weights, one matrix per head) are not
    // reported: an importance matrix holds one matrix per tensor or per expert.
    if (c.n_lora_q > 0) {
      set(Product::attn_q_a, "attn_q_a.weight");
      set(Product::attn_q_b, "attn_q_b.weight");
    } else {
      set(Product::attn_q, "attn_q.weight");
    }
    set(Product::attn_kv_a, "attn_kv_a_mqa.weight");
    set(Product::attn_output, "attn_output.weight");
  } else {
    set(Product::attn_q, "attn_q.weight");
    set(Product::attn_k, "attn_k.weight");
    set(Product::attn_v, "attn_v.weight");
    set(Product::attn_output, "attn_output.weight");
  }
  if (c.has_experts(il) || (c.moe && mtp_block)) {
    set(Product::router, "ffn_gate_inp.weight");
    set(Product::ffn_gate, "ffn_gate_exps.weight");
    set(Product::ffn_up, "ffn_up_exps.weight");
    set(Product::ffn_down, "ffn_down_exps.weight");
  } else {
    set(Product::ffn_gate, "ffn_gate.weight");
    set(Product::ffn_up, "ffn_up.weight");
    set(Product::ffn_down, "ffn_down.weight");
  }
  if (c.n_ff_shexp > 0 && (c.has_experts(il) || mtp_block)) {
    if (c.shared_expert_gate) set(Product::shexp_gate_inp, "ffn_gate_inp_shexp.weight");
    set(Product::shexp_gate, "ffn_gate_shexp.weight");
    set(Product::shexp_up, "ffn_up_shexp.weight");
    set(Product::shexp_down, "ffn_down_shexp.weight");
  }
  if (mtp_block) set(Product::mtp_eh_proj, "nextn.eh_proj.weight");
  return n;
}

}  // namespace

ProductNames product_names(const ModelConfig& c, const gguf::File& f) {
  ProductNames pn;
  pn.moe = c.moe;
  for (int il = 0; il < c.n_layer; ++il) pn.blocks.push_back(block_names(c, f, il, false));
  pn.output = f.find_tensor("output.weight") ? "output.weight" : "token_embd.weight";
  if (c.n_layer_nextn > 0) {
    pn.blocks.push_back(block_names(c, f, c.n_layer, true));
    const std::string head = "blk." + std::to_string(c.n_layer) + ".nextn.shared_head_head.weight";
    pn.mtp_head = f.find_tensor(head) ? head : pn.output;
  }
  return pn;
}

}  // namespace les
