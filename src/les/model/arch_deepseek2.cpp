// deepseek2 (DeepSeek-V2/V2-Lite, DeepSeek-V3/R1, Kimi-K2): configuration keys and tensor table.
// Files as llama.cpp's current converter writes them: multi-head latent attention with the
// kv_b projection split into attn_k_b / attn_v_b (the "absorbed" form), head_count_kv 1,
// key_length = kv_lora_rank + rope dims, value_length = kv_lora_rank.
#include <cmath>

#include "les/model/config_arch.h"
#include "les/model/model_loader.h"

namespace les {

namespace deepseek2_detail {

// The vocabulary size as llama.cpp reads it for its architecture heuristics (vocab_size key, else
// the tokenizer's token count; 0 when neither is there).
int64_t vocab_size(const gguf::File& f, const std::string& p) {
  if (const gguf::Value* v = f.find(p + "vocab_size")) return v->as_int(p + "vocab_size");
  if (const gguf::Value* t = f.find("tokenizer.ggml.tokens"); t && t->type == gguf::ValueType::ARRAY) {
    return static_cast<int64_t>(t->arr.size());
  }
  return 0;
}

void require(const gguf::File& f, const std::string& key, const std::string& path, const char* why) {
  if (!f.find(key)) throw Error(strfmt("%s: missing required key '%s' (%s)", path.c_str(), key.c_str(), why));
}

}  // namespace deepseek2_detail

void read_deepseek2(const gguf::File& f, const std::string& path, ModelConfig& c) {
  using namespace deepseek2_detail;
  const std::string p = "deepseek2.";
  const char* ps = p.c_str();
  require(f, p + "attention.layer_norm_rms_epsilon", path, "llama.cpp requires it");
  require(f, p + "rope.dimension_count", path, "the rope part of each query / key head");
  require(f, p + "expert_feed_forward_length", path, "llama.cpp requires it");
  require(f, p + "expert_shared_count", path, "llama.cpp requires it");
  if (!f.find(p + "attention.key_length_mla") && !f.find(p + "attention.value_length_mla")) {
    throw Error(strfmt("%s: no %sattention.key_length_mla / value_length_mla: this file is an older conversion "
                       "without the split attn_k_b / attn_v_b tensors (multi-head latent attention in its absorbed "
                       "form), which les does not run; convert the model again with a current llama.cpp",
                       path.c_str(), ps));
  }
  if (f.find(p + "nextn_predict_layers") && config_int(f, p + "nextn_predict_layers", path, 0, 4096) > 0) {
    throw Error(strfmt("%s: %snextn_predict_layers > 0: MTP (NextN) blocks in deepseek2 files are not supported",
                       path.c_str(), ps));
  }
  if (f.get_float(p + "attention.temperature_scale", 0.0) != 0.0) {
    throw Error(strfmt("%s: %sattention.temperature_scale: attention temperature tuning (Mistral-Large-style "
                       "deepseek2 files) is not supported", path.c_str(), ps));
  }

  c.n_lora_kv = config_int(f, p + "attention.kv_lora_rank", path, 1, 1 << 16);
  c.n_lora_q = config_int_or(f, p + "attention.q_lora_rank", path, 0, 0, 1 << 16);  // absent: V2-Lite
  c.head_dim_k_mla = config_int(f, p + "attention.key_length_mla", path, 1, 1 << 16);
  c.head_dim_v_mla = config_int(f, p + "attention.value_length_mla", path, 1, 1 << 16);
  if (c.head_dim_k_mla - c.n_rot < 1) {
    throw Error(strfmt("%s: %sattention.key_length_mla %d must exceed rope.dimension_count %d (the query's "
                       "non-rotated part)", path.c_str(), ps, c.head_dim_k_mla, c.n_rot));
  }
  // The compressed cache row: what the attention stores and llama.cpp sizes its cache by.
  if (c.n_head_kv != 1) {
    throw Error(strfmt("%s: %sattention.head_count_kv = %d; multi-head latent attention has one shared "
                       "latent head (1)", path.c_str(), ps, c.n_head_kv));
  }
  if (c.head_dim_k != c.n_lora_kv + c.n_rot || c.head_dim_v != c.n_lora_kv) {
    throw Error(strfmt("%s: %sattention.key_length %d / value_length %d must be kv_lora_rank + rope dims = %d / "
                       "kv_lora_rank = %d", path.c_str(), ps, c.head_dim_k, c.head_dim_v, c.n_lora_kv + c.n_rot,
                       c.n_lora_kv));
  }

  // Gating: absent means softmax, except for GLM-4.7-Lite (47 or 48 layers, vocabulary 154880),
  // whose files llama.cpp knows to be sigmoid.
  if (!f.find(p + "expert_gating_func") && (c.n_layer == 47 || c.n_layer == 48) && vocab_size(f, p) == 154880) {
    c.gating = Gating::sigmoid;
  }

  // RoPE: llama.cpp reads neither yarn_beta_fast nor yarn_beta_slow for this architecture (its
  // defaults 32 and 1 apply), takes the log multiplier (stored x 0.1) whatever the scaling, and
  // multiplies the attention factor by rope.scaling.attn_factor also without YaRN.
  c.yarn_beta_fast = 32.0f;
  c.yarn_beta_slow = 1.0f;
  c.rope_yarn_log_mul = static_cast<float>(f.get_float(p + "rope.scaling.yarn_log_multiplier", 0.0)) / 0.1f;
  if (f.get_string(p + "rope.scaling.type", "none") != "yarn") {
    c.yarn_attn_factor = static_cast<float>(f.get_float(p + "rope.scaling.attn_factor", 1.0));
  }
  // kq scale with YaRN's mscale: the rope kernel's magnitude factor is taken out of the attention
  // factor again, then mscale = attn_factor * (1 + 0.1 log_mul ln(1 / freq_scale)) enters squared.
  const float attn_factor_org = c.yarn_attn_factor * (1.0f + 0.1f * std::log(1.0f / c.rope_freq_scale));
  const float mscale = attn_factor_org * (1.0f + 0.1f * c.rope_yarn_log_mul * std::log(1.0f / c.rope_freq_scale));
  c.mla_kq_scale = 1.0f * mscale * mscale / std::sqrt(static_cast<float>(c.head_dim_k_mla));
  if (!(c.mla_kq_scale > 0.0f) || !std::isfinite(c.mla_kq_scale)) {
    throw Error(strfmt("%s: the attention scale %g from the YaRN keys is not a positive number", path.c_str(),
                       static_cast<double>(c.mla_kq_scale)));
  }
}

void ModelLoader::load_deepseek2_attention(int il, LayerWeights& L) {
  const ModelConfig& c = m.cfg_;
  const int64_t E = c.n_embd, H = c.n_head, R = c.n_lora_kv, rope = c.n_rot;
  const int64_t dk = c.head_dim_k_mla, nope = dk - rope, dv = c.head_dim_v_mla;
  const std::string b = "blk." + std::to_string(il) + ".";
  for (const char* old : {"attn_kv_b.weight", "ffn_gate_up_exps.weight"}) {
    if (m.gguf_.find_tensor(b + old)) {
      throw Error(strfmt("%s: tensor '%s%s' (%s) is not supported; convert the model again with a current "
                         "llama.cpp", m.path_.c_str(), b.c_str(), old,
                         old[5] == 'k' ? "the unsplit kv_b projection of older conversions"
                                       : "fused gate/up experts"));
    }
  }
  // A 3-D per-head weight [n_head][rows][n_in] as one matrix of n_head * rows rows.
  auto per_head = [&](const std::string& name, int64_t n_in, int64_t rows) {
    const gguf::TensorInfo* t = find(name, {n_in, rows, H}, required);
    if (!info(t->type).weight_type) {
      throw Error(strfmt("%s: tensor '%s' has type %s, which is not a weight type", m.path_.c_str(), name.c_str(),
                         type_name(t->type)));
    }
    m.dense_bytes_ += t->n_bytes;
    return Matrix{t->type, n_in, rows * H, row_bytes(t->type, n_in), data_of(t)};
  };
  if (c.n_lora_q > 0) {
    L.wq_a = matrix(b + "attn_q_a.weight", E, c.n_lora_q, required);
    L.q_a_norm = vec(b + "attn_q_a_norm.weight", c.n_lora_q, required);
    L.wq_b = matrix(b + "attn_q_b.weight", c.n_lora_q, H * dk, required);
  } else {
    L.wq = matrix(b + "attn_q.weight", E, H * dk, required);
  }
  L.wkv_a = matrix(b + "attn_kv_a_mqa.weight", E, R + rope, required);
  L.kv_a_norm = vec(b + "attn_kv_a_norm.weight", R, required);
  L.wk_b = per_head(b + "attn_k_b.weight", nope, R);
  L.wv_b = per_head(b + "attn_v_b.weight", R, dv);
  L.wo = matrix(b + "attn_output.weight", H * dv, E, required);
}

}  // namespace les
