// qwen3next (Qwen3-Next-80B-A3B): configuration keys and tensor table. The model is qwen35moe's
// hybrid (Gated DeltaNet + gated attention, MoE with a sigmoid-gated shared expert, optional MTP
// block) with these differences:
//  - plain neox partial RoPE (no M-RoPE sections);
//  - DeltaNet v heads grouped by q/k head (v head h uses q/k head h / (n_v / n_k));
//  - beta and alpha in one fused ssm_ba matrix, rows [beta (r) | alpha (r)] per q/k head group;
//  - files converted before the split into attn_qkv / attn_gate hold one fused ssm_in, rows
//    [q_g | k_g | v_g | z_g] per group (both forms are read).
#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

void read_qwen3next(const gguf::File& f, const std::string& path, ModelConfig& c) {
  read_hybrid_layers(f, path, c);
  c.ssm_v_grouped = true;
}

void ModelLoader::load_qwen3next_mixer(int il, LayerWeights& L) {
  const ModelConfig& c = m.cfg_;
  const std::string b = "blk." + std::to_string(il) + ".";
  if (m.gguf_.find_tensor(b + "nextn.eh_proj.weight")) {
    throw Error(strfmt("%s: block %d is an MTP (NextN) block but is counted as a trunk layer: the key "
                       "qwen3next.nextn_predict_layers is missing or too small", m.path_.c_str(), il));
  }
  if (!c.is_recurrent(il)) return load_qwen35moe_mixer(il, L);  // the same gated attention
  const int64_t E = c.n_embd, nv = c.ssm_n_v_heads, vd = c.ssm_value_dim(), cd = c.ssm_conv_dim();
  if (m.gguf_.find_tensor(b + "ssm_in.weight") && !m.gguf_.find_tensor(b + "attn_qkv.weight")) {
    L.ssm_in = matrix(b + "ssm_in.weight", E, cd + vd, required);
  } else {
    L.ssm_qkv = matrix(b + "attn_qkv.weight", E, cd, required);
    L.ssm_z = matrix(b + "attn_gate.weight", E, vd, required);
  }
  L.ssm_ba = matrix(b + "ssm_ba.weight", E, 2 * nv, required);
  L.ssm_conv1d = vec(b + "ssm_conv1d.weight", std::vector<int64_t>{c.ssm_d_conv, cd}, required);
  L.ssm_dt_bias = vec(b + "ssm_dt.bias", nv, required);
  L.ssm_a = vec(b + "ssm_a", nv, required);
  L.ssm_norm = vec(b + "ssm_norm.weight", c.ssm_d_state, required);
  L.ssm_out = matrix(b + "ssm_out.weight", vd, E, required);
}

}  // namespace les
