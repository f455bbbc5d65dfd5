// gpt-oss (gpt-oss-20b / 120b): configuration keys and tensor table.
//
// Per layer: RMSNorm, attention with q/k/v/o biases and a learned sink logit per head (it joins
// the softmax denominator only), NeoX RoPE with YaRN, sliding-window attention on the layers of
// the SWA pattern (by default the even ones); post-attention RMSNorm; MoE with a router bias,
// top-k of the logits with a softmax over the k (Gating::softmax_weight), per-expert biases and
// the clamped SwiGLU (ExpertAct::swiglu_oai). Head dims are rope.dimension_count (64), not
// n_embd / n_head.
#include <cmath>

#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

namespace gpt_oss_detail {

// SWA layer flags as llama.cpp's load_swa_pattern(ml, 2) sets them: the key
// attention.sliding_window_pattern as a per-layer array (bool or integer), else as the period n
// (default 2): layer il slides when n == 0 or il % n < n - 1.
std::vector<uint8_t> swa_layers(const gguf::File& f, const std::string& path, const std::string& p, int n_layer) {
  const std::string key = p + "attention.sliding_window_pattern";
  std::vector<uint8_t> swa(static_cast<size_t>(n_layer), 0);
  const gguf::Value* v = f.find(key);
  if (v && v->type == gguf::ValueType::ARRAY) {
    if (v->arr.size() != static_cast<size_t>(n_layer)) {
      throw Error(strfmt("%s: %s has %zu entries, expected block_count = %d", path.c_str(), key.c_str(),
                         v->arr.size(), n_layer));
    }
    for (int il = 0; il < n_layer; ++il) swa[static_cast<size_t>(il)] = v->arr[static_cast<size_t>(il)].as_int(key) != 0;
    return swa;
  }
  const int period = config_int_or(f, key, path, 2, 0, 1 << 20);
  for (int il = 0; il < n_layer; ++il) swa[static_cast<size_t>(il)] = period == 0 || il % period < period - 1;
  return swa;
}

}  // namespace gpt_oss_detail

void read_gpt_oss(const gguf::File& f, const std::string& path, ModelConfig& c) {
  const std::string p = "gpt-oss.";
  // Keys llama.cpp requires for this architecture.
  for (const char* key : {"attention.layer_norm_rms_epsilon", "expert_feed_forward_length", "attention.sliding_window"}) {
    if (!f.find(p + key)) throw Error(strfmt("%s: missing required key '%s%s'", path.c_str(), p.c_str(), key));
  }
  // llama.cpp sizes q, k, v and the attention output by n_rot heads: the three must agree.
  if (c.head_dim_k != c.n_rot || c.head_dim_v != c.n_rot) {
    throw Error(strfmt("%s: %sattention.key_length %d and value_length %d must equal rope.dimension_count %d "
                       "(gpt-oss rotates whole heads)", path.c_str(), p.c_str(), c.head_dim_k, c.head_dim_v, c.n_rot));
  }
  c.n_swa = config_int(f, p + "attention.sliding_window", path, 1, int64_t(1) << 30);
  c.swa = gpt_oss_detail::swa_layers(f, path, p, c.n_layer);
  c.rope_freq_base_swa = static_cast<float>(f.get_float(p + "rope.freq_base_swa", c.rope_freq_base));
  if (!(c.rope_freq_base_swa > 0.0f) || !std::isfinite(c.rope_freq_base_swa)) {
    throw Error(strfmt("%s: %srope.freq_base_swa must be > 0", path.c_str(), p.c_str()));
  }
  // llama.cpp reads no YaRN beta keys for gpt-oss: its defaults apply whatever the file says.
  c.yarn_beta_fast = 32.0f;
  c.yarn_beta_slow = 1.0f;
}

void ModelLoader::load_gpt_oss_attention(int il, LayerWeights& L) {
  const ModelConfig& c = m.cfg_;
  const std::string b = "blk." + std::to_string(il) + ".";
  load_standard_attention(il, L, true, required);
  L.attn_sinks = vec(b + "attn_sinks.weight", c.n_head, required);
}

}  // namespace les
