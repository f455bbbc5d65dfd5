// glm4moe (GLM-4.5/4.6, GLM-4.5-Air): configuration keys, tensor table and NextN block.
//
// A trunk layer: RMSNorm, attention with q/k/v biases (optional per-head q/k RMSNorm, GLM-4.5),
// NeoX RoPE on the first rope.dimension_count dims of each head (half the head in real files),
// post_attention_norm, then a dense SwiGLU FFN (the first leading_dense_block_count layers) or
// sigmoid-routed experts with the exp_probs_b selection bias plus a shared expert.
// The NextN (MTP) block after the trunk is the same decoder block (always routed) over
// eh_proj . [RMSNorm(embed[x]) * enorm ; RMSNorm(h) * hnorm]; it never runs in the main pass.
#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

void read_glm4moe(const gguf::File& f, const std::string& path, ModelConfig& c) {
  const std::string p = "glm4moe.";
  // Keys llama.cpp requires for this architecture.
  for (const char* k : {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length", "expert_shared_count"}) {
    if (!f.find(p + k)) throw Error(strfmt("%s: missing required key '%s%s' (llama.cpp requires it)", path.c_str(), p.c_str(), k));
  }
  if (c.head_dim_k != c.head_dim_v) {
    throw Error(strfmt("%s: %sattention.value_length %d must equal key_length %d", path.c_str(), p.c_str(),
                       c.head_dim_v, c.head_dim_k));
  }
  // M-RoPE sections (GLM-4.5V's vision-language variant) switch llama.cpp to multi-section RoPE.
  if (const gguf::Value* sec = f.find(p + "rope.dimension_sections")) {
    if (sec->type == gguf::ValueType::ARRAY && sec->arr.size() >= 2 &&
        sec->arr[0].as_int(p + "rope.dimension_sections") > 0 && sec->arr[1].as_int(p + "rope.dimension_sections") > 0) {
      throw Error(strfmt("%s: %srope.dimension_sections selects M-RoPE (GLM-4.5V), which is not supported", path.c_str(),
                         p.c_str()));
    }
  }
  // block_count includes the NextN blocks stored after the trunk.
  const int n_layer_all = c.n_layer;
  c.n_layer_nextn = config_int_or(f, p + "nextn_predict_layers", path, 0, 0, n_layer_all - 1);
  c.n_layer = n_layer_all - c.n_layer_nextn;
  // q/k norms are optional tensors in llama.cpp (GLM-4.5 has them, GLM-4.5-Air not): decided by
  // the first layer, then required in every layer.
  if (f.find_tensor("blk.0.attn_q_norm.weight") || f.find_tensor("blk.0.attn_k_norm.weight")) c.qk_norm = QkNorm::per_head;
}

// Attention of trunk layer il (or of the NextN block, il == n_layer): q/k/v projections with
// optional biases, per-head q/k norms when the model has them, the output projection (no bias).
void ModelLoader::load_glm4moe_attention(int il, LayerWeights& L) {
  const ModelConfig& c = m.cfg_;
  const std::string b = "blk." + std::to_string(il) + ".";
  if (il < c.n_layer && m.gguf_.find_tensor(b + "nextn.eh_proj.weight")) {
    throw Error(strfmt("%s: block %d is a NextN (MTP) block but is counted as a trunk layer: the key "
                       "glm4moe.nextn_predict_layers is missing or too small", m.path_.c_str(), il));
  }
  if (m.gguf_.find_tensor(b + "attn_qkv.weight")) {
    throw Error(strfmt("%s: '%sattn_qkv.weight' (fused q/k/v) is not supported; convert with separate "
                       "attn_q / attn_k / attn_v", m.path_.c_str(), b.c_str()));
  }
  load_standard_attention(il, L, false);  // no output bias in this architecture
}

}  // namespace les
