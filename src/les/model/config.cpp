#include "les/model/config.h"

#include <algorithm>
#include <cmath>

#include "les/model/config_arch.h"
#include "les/util/error.h"

namespace les {

const char* arch_name(Arch a) {
  switch (a) {
    case Arch::qwen3moe: return "qwen3moe";
    case Arch::qwen2moe: return "qwen2moe";
    case Arch::olmoe: return "olmoe";
    case Arch::llama: return "llama";
    case Arch::qwen3: return "qwen3";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen35moe: return "qwen35moe";
    case Arch::deepseek2: return "deepseek2";
    case Arch::glm4moe: return "glm4moe";
    case Arch::gpt_oss: return "gpt-oss";
    case Arch::qwen3next: return "qwen3next";
  }
  return "?";
}

namespace {

int get_pos_int(const gguf::File& f, const std::string& key, const std::string& path, int64_t lo,
                int64_t hi) {
  const gguf::Value* v = f.find(key);
  if (!v) throw Error(strfmt("%s: missing required key '%s'", path.c_str(), key.c_str()));
  if (v->type == gguf::ValueType::ARRAY) {
    // Per-layer arrays are accepted when uniform.
    if (v->arr.empty()) throw Error(strfmt("%s: key '%s' is an empty array", path.c_str(), key.c_str()));
    const int64_t first = v->arr[0].as_int(key);
    for (const auto& e : v->arr) {
      if (e.as_int(key) != first) {
        throw Error(strfmt("%s: key '%s' varies per layer, which is not supported", path.c_str(), key.c_str()));
      }
    }
    if (first < lo || first > hi) {
      throw Error(strfmt("%s: key '%s' = %lld is out of range [%lld, %lld]", path.c_str(), key.c_str(),
                         static_cast<long long>(first), static_cast<long long>(lo), static_cast<long long>(hi)));
    }
    return static_cast<int>(first);
  }
  const int64_t x = v->as_int(key);
  if (x < lo || x > hi) {
    throw Error(strfmt("%s: key '%s' = %lld is out of range [%lld, %lld]", path.c_str(), key.c_str(),
                       static_cast<long long>(x), static_cast<long long>(lo), static_cast<long long>(hi)));
  }
  return static_cast<int>(x);
}

int get_opt_int(const gguf::File& f, const std::string& key, const std::string& path, int def, int64_t lo,
                int64_t hi) {
  if (!f.find(key)) return def;
  return get_pos_int(f, key, path, lo, hi);
}

void require_key(const gguf::File& f, const std::string& key, const std::string& path, const char* why) {
  if (!f.find(key)) throw Error(strfmt("%s: missing required key '%s' (%s)", path.c_str(), key.c_str(), why));
}

}  // namespace

// Hybrid Gated DeltaNet / gated attention (qwen35moe, qwen3next): the trunk/MTP split, the layer
// pattern and the DeltaNet sizes. Keys llama.cpp would silently default to a wrong model
// (rope.dimension_count, rope.freq_base, attention.key_length) are required here.
void read_hybrid_layers(const gguf::File& f, const std::string& path, ModelConfig& c) {
  const std::string p = c.arch_str + ".";
  require_key(f, p + "rope.dimension_count", path, "without it RoPE would cover the whole head");
  require_key(f, p + "rope.freq_base", path, "without it RoPE would use base 10000");
  require_key(f, p + "attention.key_length", path, "the head dim is not n_embd / n_head in this architecture");
  require_key(f, p + "attention.layer_norm_rms_epsilon", path, "llama.cpp requires it");
  if (c.head_dim_k != c.head_dim_v) {
    throw Error(strfmt("%s: %sattention.value_length %d must equal key_length %d", path.c_str(), p.c_str(),
                       c.head_dim_v, c.head_dim_k));
  }
  const int n_layer_all = c.n_layer;
  c.n_layer_nextn = get_opt_int(f, p + "nextn_predict_layers", path, 0, 0, n_layer_all - 1);
  c.n_layer = n_layer_all - c.n_layer_nextn;

  c.ssm_d_conv = get_pos_int(f, p + "ssm.conv_kernel", path, 1, 64);
  c.ssm_d_state = get_pos_int(f, p + "ssm.state_size", path, 1, 4096);
  c.ssm_n_k_heads = get_pos_int(f, p + "ssm.group_count", path, 1, 4096);
  c.ssm_n_v_heads = get_pos_int(f, p + "ssm.time_step_rank", path, 1, 4096);
  const int d_inner = get_pos_int(f, p + "ssm.inner_size", path, 1, 1 << 24);
  if (int64_t(d_inner) != c.ssm_value_dim()) {
    throw Error(strfmt("%s: %sssm.inner_size %d != ssm.time_step_rank %d x ssm.state_size %d", path.c_str(),
                       p.c_str(), d_inner, c.ssm_n_v_heads, c.ssm_d_state));
  }
  if (c.ssm_n_v_heads % c.ssm_n_k_heads != 0) {
    throw Error(strfmt("%s: %sssm.time_step_rank %d (v heads) is not a multiple of ssm.group_count %d (k heads)",
                       path.c_str(), p.c_str(), c.ssm_n_v_heads, c.ssm_n_k_heads));
  }

  c.recurrent.assign(static_cast<size_t>(c.n_layer), 0);
  if (const gguf::Value* rl = f.find(p + "attention.recurrent_layers")) {
    if (rl->type != gguf::ValueType::ARRAY || rl->arr.size() != static_cast<size_t>(n_layer_all)) {
      throw Error(strfmt("%s: %sattention.recurrent_layers must be an array of block_count = %d entries", path.c_str(),
                         p.c_str(), n_layer_all));
    }
    for (int i = 0; i < c.n_layer; ++i) {
      c.recurrent[static_cast<size_t>(i)] = rl->arr[static_cast<size_t>(i)].as_int(p + "attention.recurrent_layers") != 0;
    }
  } else {
    const int interval = get_opt_int(f, p + "full_attention_interval", path, 4, 1, 1 << 20);
    for (int i = 0; i < c.n_layer; ++i) c.recurrent[static_cast<size_t>(i)] = (i + 1) % interval != 0;
  }
}

namespace {

// qwen35moe: the hybrid keys (read_hybrid_layers) and the M-RoPE sections.
void read_qwen35moe(const gguf::File& f, const std::string& path, ModelConfig& c) {
  const std::string p = "qwen35moe.";
  read_hybrid_layers(f, path, c);
  const gguf::Value* sec = f.find(p + "rope.dimension_sections");
  if (!sec) throw Error(strfmt("%s: missing required key '%srope.dimension_sections'", path.c_str(), p.c_str()));
  if (sec->type != gguf::ValueType::ARRAY || sec->arr.size() != 4) {
    throw Error(strfmt("%s: %srope.dimension_sections must be an array of 4 integers", path.c_str(), p.c_str()));
  }
  int sect_sum = 0;
  for (int i = 0; i < 4; ++i) {
    const int64_t v = sec->arr[static_cast<size_t>(i)].as_int(p + "rope.dimension_sections");
    if (v < 0 || v > 4096) throw Error(strfmt("%s: %srope.dimension_sections[%d] = %lld is out of range", path.c_str(), p.c_str(), i, static_cast<long long>(v)));
    c.rope_sections[static_cast<size_t>(i)] = static_cast<int>(v);
    sect_sum += static_cast<int>(v);
  }
  if (sect_sum < 1 || sect_sum > c.n_rot) {
    throw Error(strfmt("%s: %srope.dimension_sections sum %d must be in [1, rope.dimension_count %d]", path.c_str(),
                       p.c_str(), sect_sum, c.n_rot));
  }
}

// YaRN as llama.cpp applies it (llama_context's yarn_attn_factor): ext_factor 1, and an attention
// factor that cancels the magnitude scaling the rope kernel applies, corrected by the DeepSeek
// mscale_all_dim (rope.scaling.yarn_log_multiplier, stored x 0.1 by the converter).
void read_yarn(const gguf::File& f, const std::string& path, const std::string& p, ModelConfig& c) {
  c.yarn_ext_factor = 1.0f;
  c.yarn_beta_fast = static_cast<float>(f.get_float(p + "rope.scaling.yarn_beta_fast", 32.0));
  c.yarn_beta_slow = static_cast<float>(f.get_float(p + "rope.scaling.yarn_beta_slow", 1.0));
  if (c.arch == Arch::deepseek2) {
    c.rope_yarn_log_mul = static_cast<float>(f.get_float(p + "rope.scaling.yarn_log_multiplier", 0.0)) / 0.1f;
  }
  const auto mscale = [](float scale, float m) { return scale <= 1.0f ? 1.0f : 0.1f * m * std::log(scale) + 1.0f; };
  const float factor = 1.0f / c.rope_freq_scale;
  if (c.rope_yarn_log_mul != 0.0f) {
    const float all_dims = c.rope_yarn_log_mul;
    const float m = c.arch == Arch::deepseek2 && all_dims != 1.0f ? all_dims : 1.0f;
    c.yarn_attn_factor = mscale(factor, m) / mscale(factor, all_dims);
  } else {
    c.yarn_attn_factor = mscale(factor, 1.0f);
  }
  c.yarn_attn_factor *= 1.0f / (1.0f + 0.1f * std::log(factor));
  c.yarn_attn_factor *= static_cast<float>(f.get_float(p + "rope.scaling.attn_factor", 1.0));
  if (!(c.yarn_attn_factor > 0.0f) || !std::isfinite(c.yarn_attn_factor)) {
    throw Error(strfmt("%s: YaRN attention factor %g is not a positive number", path.c_str(), c.yarn_attn_factor));
  }
}

// Routing of DeepSeek / GLM-4.5 style MoE: the gating function, expert groups, the dense lead
// layers and their width. gating_default applies when expert_gating_func is absent.
void read_routing(const gguf::File& f, const std::string& path, const std::string& p, ModelConfig& c,
                  Gating gating_default) {
  const int g = get_opt_int(f, p + "expert_gating_func", path, 0, 0, 3);
  if (g == 0) c.gating = gating_default;
  else if (g == 1) c.gating = Gating::softmax;
  else if (g == 2) c.gating = Gating::sigmoid;
  else throw Error(strfmt("%s: %sexpert_gating_func = %d is not supported (1 softmax, 2 sigmoid)", path.c_str(), p.c_str(), g));
  c.norm_topk = f.get_bool(p + "expert_weights_norm", false);
  c.n_expert_groups = std::max(1, get_opt_int(f, p + "expert_group_count", path, 1, 0, 1 << 16));
  c.n_group_used = std::max(1, get_opt_int(f, p + "expert_group_used_count", path, 1, 0, 1 << 16));
  if (c.n_expert_groups > 1) {
    if (c.n_expert % c.n_expert_groups != 0) {
      throw Error(strfmt("%s: %sexpert_count %d is not a multiple of expert_group_count %d", path.c_str(), p.c_str(),
                         c.n_expert, c.n_expert_groups));
    }
    if (c.n_group_used >= c.n_expert_groups) {
      throw Error(strfmt("%s: %sexpert_group_used_count %d must be below expert_group_count %d", path.c_str(),
                         p.c_str(), c.n_group_used, c.n_expert_groups));
    }
    if (c.n_expert / c.n_expert_groups < 2) {
      throw Error(strfmt("%s: expert groups of fewer than 2 experts are not supported", path.c_str()));
    }
    if (int64_t(c.n_group_used) * (c.n_expert / c.n_expert_groups) < c.n_expert_used) {
      throw Error(strfmt("%s: %d groups of %d experts cannot hold expert_used_count %d", path.c_str(), c.n_group_used,
                         c.n_expert / c.n_expert_groups, c.n_expert_used));
    }
  }
  c.n_layer_dense_lead = get_opt_int(f, p + "leading_dense_block_count", path, 0, 0, c.n_layer);
}

}  // namespace

int config_int(const gguf::File& f, const std::string& key, const std::string& path, int64_t lo, int64_t hi) {
  return get_pos_int(f, key, path, lo, hi);
}
int config_int_or(const gguf::File& f, const std::string& key, const std::string& path, int def, int64_t lo, int64_t hi) {
  return get_opt_int(f, key, path, def, lo, hi);
}

ModelConfig config_from_gguf(const gguf::File& f, const std::string& path) {
  ModelConfig c;
  const gguf::Value* av = f.find("general.architecture");
  if (!av) throw Error(strfmt("%s: missing required key 'general.architecture'", path.c_str()));
  c.arch_str = av->as_string("general.architecture");
  const std::string& a = c.arch_str;
  const std::string p = a + ".";
  if (a == "qwen3moe") c.arch = Arch::qwen3moe;
  else if (a == "qwen2moe") c.arch = Arch::qwen2moe;
  else if (a == "olmoe") c.arch = Arch::olmoe;
  else if (a == "llama") c.arch = Arch::llama;
  else if (a == "qwen3") c.arch = Arch::qwen3;
  else if (a == "qwen2") c.arch = Arch::qwen2;
  else if (a == "qwen35moe") c.arch = Arch::qwen35moe;
  else if (a == "deepseek2") c.arch = Arch::deepseek2;
  else if (a == "glm4moe") c.arch = Arch::glm4moe;
  else if (a == "gpt-oss") c.arch = Arch::gpt_oss;
  else if (a == "qwen3next") c.arch = Arch::qwen3next;
  else {
    throw Error(strfmt("%s: unsupported architecture '%s' (supported: qwen3moe, qwen2moe, olmoe, "
                       "llama/Mixtral, qwen3, qwen2, qwen35moe, deepseek2, glm4moe, gpt-oss, qwen3next)",
                       path.c_str(), a.c_str()));
  }

  c.n_layer = get_pos_int(f, p + "block_count", path, 1, 4096);
  c.n_embd = get_pos_int(f, p + "embedding_length", path, 1, 1 << 20);
  c.n_head = get_pos_int(f, p + "attention.head_count", path, 1, 4096);
  c.n_head_kv = get_opt_int(f, p + "attention.head_count_kv", path, c.n_head, 1, 4096);
  if (c.n_head % c.n_head_kv != 0) {
    throw Error(strfmt("%s: attention.head_count %d is not a multiple of head_count_kv %d", path.c_str(),
                       c.n_head, c.n_head_kv));
  }
  c.head_dim_k = get_opt_int(f, p + "attention.key_length", path, c.n_embd / c.n_head, 1, 1 << 16);
  c.head_dim_v = get_opt_int(f, p + "attention.value_length", path, c.n_embd / c.n_head, 1, 1 << 16);
  c.n_rot = get_opt_int(f, p + "rope.dimension_count", path, c.head_dim_k, 2, c.head_dim_k);
  if (c.n_rot % 2 != 0) throw Error(strfmt("%s: rope.dimension_count %d is odd", path.c_str(), c.n_rot));
  c.n_ctx_train = get_opt_int(f, p + "context_length", path, 4096, 1, int64_t(1) << 30);
  c.rope_freq_base = static_cast<float>(f.get_float(p + "rope.freq_base", 10000.0));
  if (!(c.rope_freq_base > 0.0f)) throw Error(strfmt("%s: %srope.freq_base must be > 0", path.c_str(), p.c_str()));
  const std::string scaling = f.get_string(p + "rope.scaling.type", "none");
  if (scaling == "linear" || scaling == "yarn") {
    const double factor = f.get_float(p + "rope.scaling.factor", 1.0);
    if (!(factor > 0.0)) throw Error(strfmt("%s: %srope.scaling.factor must be > 0", path.c_str(), p.c_str()));
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    throw Error(strfmt("%s: rope scaling type '%s' is not supported", path.c_str(), scaling.c_str()));
  }
  c.n_ctx_orig_yarn = get_opt_int(f, p + "rope.scaling.original_context_length", path, c.n_ctx_train, 1, int64_t(1) << 30);
  if (scaling == "yarn") read_yarn(f, path, p, c);
  c.rms_eps = static_cast<float>(f.get_float(p + "attention.layer_norm_rms_epsilon", 1e-6));
  if (!(c.rms_eps >= 0.0f)) throw Error(strfmt("%s: rms epsilon must be >= 0", path.c_str()));

  c.n_expert = get_opt_int(f, p + "expert_count", path, 0, 0, 1 << 16);
  c.n_expert_used = get_opt_int(f, p + "expert_used_count", path, 0, 0, 1 << 16);
  const int n_ff = get_opt_int(f, p + "feed_forward_length", path, 0, 0, 1 << 24);

  switch (c.arch) {
    case Arch::qwen3moe:
      c.rope_type = RopeType::neox; c.qk_norm = QkNorm::per_head; c.moe = true; c.norm_topk = true; break;
    case Arch::qwen2moe:
      c.rope_type = RopeType::neox; c.moe = true; c.norm_topk = false; c.shared_expert_gate = true; break;
    case Arch::olmoe:
      c.rope_type = RopeType::neox; c.qk_norm = QkNorm::full; c.moe = true; c.norm_topk = false; break;
    case Arch::llama:
      c.rope_type = RopeType::norm; c.moe = c.n_expert > 0; c.norm_topk = true; break;
    case Arch::qwen3:
      c.rope_type = RopeType::neox; c.qk_norm = QkNorm::per_head; break;
    case Arch::qwen2:
      c.rope_type = RopeType::neox; break;
    case Arch::qwen35moe:
      c.rope_type = RopeType::imrope; c.qk_norm = QkNorm::per_head; c.moe = true; c.norm_topk = true;
      c.shared_expert_gate = true; c.attn_output_gate = true;
      read_qwen35moe(f, path, c);
      break;
    // Architecture-specific keys (attention variants, MTP blocks) are read in config_<arch>.cpp.
    case Arch::deepseek2:
      c.rope_type = RopeType::norm; c.moe = true;
      read_routing(f, path, p, c, Gating::softmax);
      read_deepseek2(f, path, c);
      break;
    case Arch::glm4moe:
      c.rope_type = RopeType::neox; c.moe = true;
      read_glm4moe(f, path, c);
      read_routing(f, path, p, c, Gating::sigmoid);
      break;
    case Arch::gpt_oss:
      c.rope_type = RopeType::neox; c.moe = true; c.gating = Gating::softmax_weight;
      c.expert_act = ExpertAct::swiglu_oai;
      read_gpt_oss(f, path, c);
      break;
    case Arch::qwen3next:
      c.rope_type = RopeType::neox; c.qk_norm = QkNorm::per_head; c.moe = true; c.norm_topk = true;
      c.shared_expert_gate = true; c.attn_output_gate = true;
      read_qwen3next(f, path, c);
      break;
  }
  if (c.moe) {
    if (c.n_expert < 1) throw Error(strfmt("%s: %sexpert_count must be > 0 for %s", path.c_str(), p.c_str(), a.c_str()));
    if (c.n_expert_used < 1 || c.n_expert_used > c.n_expert) {
      throw Error(strfmt("%s: %sexpert_used_count = %d must be in [1, expert_count = %d]", path.c_str(),
                         p.c_str(), c.n_expert_used, c.n_expert));
    }
    if (c.arch == Arch::olmoe || c.arch == Arch::llama) {
      c.n_ff_exp = n_ff;
    } else {
      c.n_ff_exp = get_opt_int(f, p + "expert_feed_forward_length", path, 0, 0, 1 << 24);
      if (c.n_ff_exp == 0) c.n_ff_exp = n_ff / c.n_expert_used;
    }
    if (c.arch == Arch::deepseek2 || c.arch == Arch::glm4moe) {
      // n shared experts of the routed width, stored as one; dense lead layers of width n_ff.
      const int n_shared = get_opt_int(f, p + "expert_shared_count", path, 0, 0, 1 << 10);
      c.n_ff_shexp = n_shared * c.n_ff_exp;
      c.n_ff_dense = n_ff;
      if (c.n_layer_dense_lead > 0 && c.n_ff_dense < 1) {
        throw Error(strfmt("%s: %sfeed_forward_length is missing or 0 but %d leading layers are dense", path.c_str(),
                           p.c_str(), c.n_layer_dense_lead));
      }
    }
    if (c.arch == Arch::qwen2moe || c.arch == Arch::qwen35moe || c.arch == Arch::qwen3next) {
      c.n_ff_shexp = get_opt_int(f, p + "expert_shared_feed_forward_length", path, 0, 0, 1 << 24);
      if (c.n_ff_shexp == 0) c.n_ff_shexp = n_ff;
      if (c.n_ff_shexp < 1) {
        throw Error(strfmt("%s: shared expert width is missing or 0 (%sexpert_shared_feed_forward_length)",
                           path.c_str(), p.c_str()));
      }
    }
    // qwen35moe and gpt-oss do not read expert_weights_scale (llama.cpp leaves it 0: no scaling).
    const bool scale_read = c.arch != Arch::qwen35moe && c.arch != Arch::qwen3next && c.arch != Arch::gpt_oss;
    const double scale = scale_read ? f.get_float(p + "expert_weights_scale", 0.0) : 0.0;
    c.expert_weights_scale = scale == 0.0 ? 1.0f : static_cast<float>(scale);
  } else {
    c.n_expert = 1;
    c.n_expert_used = 1;
    c.n_ff_exp = n_ff;
  }
  if (c.n_ff_exp < 1) throw Error(strfmt("%s: feed-forward width is missing or 0 (%sfeed_forward_length)", path.c_str(), p.c_str()));

  // Vocabulary size: from the tokenizer if present, else from token_embd.
  if (const gguf::Value* toks = f.find("tokenizer.ggml.tokens")) {
    if (toks->type != gguf::ValueType::ARRAY || toks->elem_type != gguf::ValueType::STRING) {
      throw Error(strfmt("%s: key 'tokenizer.ggml.tokens' must be an array of strings, not %s", path.c_str(),
                         gguf::value_type_name(toks->type == gguf::ValueType::ARRAY ? toks->elem_type : toks->type)));
    }
    c.n_vocab = static_cast<int>(toks->arr.size());
  }
  if (const gguf::TensorInfo* te = f.find_tensor("token_embd.weight")) {
    if (te->ne.size() == 2) {
      if (te->ne[1] > (int64_t(1) << 30)) {
        throw Error(strfmt("%s: token_embd.weight has %lld rows, more than the 2^30 tokens supported", path.c_str(),
                           static_cast<long long>(te->ne[1])));
      }
      if (c.n_vocab != 0 && c.n_vocab != te->ne[1]) {
        throw Error(strfmt("%s: tokenizer has %d tokens but token_embd.weight has %lld rows", path.c_str(),
                           c.n_vocab, static_cast<long long>(te->ne[1])));
      }
      c.n_vocab = static_cast<int>(te->ne[1]);
    }
  }
  if (c.n_vocab < 1) throw Error(strfmt("%s: vocabulary size unknown (no tokenizer.ggml.tokens, no token_embd.weight)", path.c_str()));
  return c;
}

}  // namespace les
