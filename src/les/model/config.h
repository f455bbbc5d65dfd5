// Hyper-parameters of a supported architecture, read from GGUF metadata and checked.
#pragma once

#include <cstdint>
#include <string>

#include "les/gguf/gguf.h"

namespace les {

enum class Arch { qwen3moe, qwen2moe, olmoe, llama, qwen3, qwen2 };
enum class RopeType { norm, neox };       // pairs (2i, 2i+1) vs (i, i + n_rot/2)
enum class QkNorm { none, per_head, full }; // RMSNorm of q/k per head, or over the whole q/k

const char* arch_name(Arch a);

struct ModelConfig {
  Arch arch = Arch::qwen3moe;
  std::string arch_str;      // general.architecture as in the file
  int n_layer = 0;
  int n_embd = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim_k = 0;        // attention.key_length (default n_embd / n_head)
  int head_dim_v = 0;        // attention.value_length
  int n_rot = 0;             // rope.dimension_count (default head_dim_k)
  RopeType rope_type = RopeType::neox;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-6f;
  int n_ctx_train = 0;
  int n_vocab = 0;
  QkNorm qk_norm = QkNorm::none;

  // Feed-forward. A dense FFN is one expert used with weight 1 (n_expert = 1, n_expert_used = 1,
  // no router).
  bool moe = false;
  int n_expert = 1;
  int n_expert_used = 1;
  int n_ff_exp = 0;          // width of one routed expert (or of the dense FFN)
  int n_ff_shexp = 0;        // width of the shared expert, 0 if none
  bool shared_expert_gate = false;  // qwen2moe: shared expert scaled by sigmoid(w . x)
  bool norm_topk = false;    // renormalise the top-k router weights to sum 1
  float expert_weights_scale = 1.0f;

  int n_q() const { return n_head * head_dim_k; }
  int n_kv_k() const { return n_head_kv * head_dim_k; }
  int n_kv_v() const { return n_head_kv * head_dim_v; }
};

// Reads and validates the configuration; throws les::Error naming the key on a missing,
// mistyped or inconsistent value, or an unsupported architecture.
ModelConfig config_from_gguf(const gguf::File& f, const std::string& path);

}  // namespace les
