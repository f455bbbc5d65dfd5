#include "les/model/config.h"

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

}  // namespace

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
  else {
    throw Error(strfmt("%s: unsupported architecture '%s' (supported: qwen3moe, qwen2moe, olmoe, "
                       "llama/Mixtral, qwen3, qwen2)", path.c_str(), a.c_str()));
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
  if (scaling == "linear") {
    const double factor = f.get_float(p + "rope.scaling.factor", 1.0);
    if (!(factor > 0.0)) throw Error(strfmt("%s: %srope.scaling.factor must be > 0", path.c_str(), p.c_str()));
    c.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none") {
    throw Error(strfmt("%s: rope scaling type '%s' is not supported", path.c_str(), scaling.c_str()));
  }
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
    if (c.arch == Arch::qwen2moe) {
      c.n_ff_shexp = get_opt_int(f, p + "expert_shared_feed_forward_length", path, 0, 0, 1 << 24);
      if (c.n_ff_shexp == 0) c.n_ff_shexp = n_ff;
    }
    const double scale = f.get_float(p + "expert_weights_scale", 0.0);
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
