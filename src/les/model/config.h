// Hyper-parameters of a supported architecture, read from GGUF metadata and checked.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"

namespace les {

enum class Arch { qwen3moe, qwen2moe, olmoe, llama, qwen3, qwen2, qwen35moe, deepseek2, glm4moe, gpt_oss, qwen3next };
// norm: pairs (2i, 2i+1); neox: pairs (i, i + n_rot/2); imrope: neox pairs, interleaved M-RoPE
// sections (text tokens: pairs of the e section stay at position 0).
enum class RopeType { norm, neox, imrope };
enum class QkNorm { none, per_head, full }; // RMSNorm of q/k per head, or over the whole q/k
// How router logits become expert scores (llama.cpp's expert_gating_func):
//   softmax: softmax over all experts, top-k of it;
//   sigmoid: sigmoid per expert (DeepSeek-V3, GLM-4.5), top-k of sigmoid + the selection bias;
//   softmax_weight: top-k of the logits, softmax over the k selected (gpt-oss).
enum class Gating { softmax, sigmoid, softmax_weight };
// The routed experts' activation: silu(gate) * up, or gpt-oss's clamped variant
// (min(gate, 7) * sigmoid(1.702 min(gate, 7)) * (clamp(up, -7, 7) + 1)).
enum class ExpertAct { swiglu, swiglu_oai };

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
  Gating gating = Gating::softmax;
  ExpertAct expert_act = ExpertAct::swiglu;
  int n_expert_groups = 1;   // grouped top-k: experts in n_expert_groups equal groups, of which the
  int n_group_used = 1;      // n_group_used with the best top-2 score sums are eligible
  // The first n_layer_dense_lead layers have a dense FFN of width n_ff_dense instead of experts
  // (DeepSeek, GLM-4.5): no router, nothing streamed.
  int n_layer_dense_lead = 0;
  int n_ff_dense = 0;

  // YaRN RoPE scaling (rope.scaling.type yarn): ext_factor 1 mixes interpolated and extrapolated
  // frequencies between the correction dims of beta_fast / beta_slow; attn_factor scales cos/sin.
  float yarn_ext_factor = 0.0f;
  float yarn_attn_factor = 1.0f;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  int n_ctx_orig_yarn = 0;
  float rope_yarn_log_mul = 0.0f;

  // Hybrid Gated DeltaNet / gated attention (qwen35moe, qwen3next).
  std::vector<uint8_t> recurrent;  // [n_layer]: 1 = Gated DeltaNet layer; empty = all attention
  int n_layer_nextn = 0;     // MTP blocks stored after the trunk (counted in block_count, not run)
  bool attn_output_gate = false;  // attn_q yields [q_h | gate_h] per head; output *= sigmoid(gate)
  std::array<int, 4> rope_sections{};  // M-RoPE sections (t, h, w, e) for RopeType::imrope
  int ssm_d_conv = 0;        // causal depthwise conv width
  int ssm_d_state = 0;       // S: head dim of the DeltaNet q, k and v heads
  int ssm_n_k_heads = 0;     // q/k heads (ssm.group_count)
  int ssm_n_v_heads = 0;     // v heads (ssm.time_step_rank); v head h uses q/k head ssm_qk_head(h)
  // How v heads share q/k heads: tiled (qwen35moe: v head h uses q/k head h % n_k) or grouped
  // (qwen3next: the n_v / n_k consecutive v heads of group g use q/k head g).
  bool ssm_v_grouped = false;

  // Sliding-window attention (gpt-oss): a layer with swa[il] set lets the token at position p see
  // positions p - n_swa + 1 .. p only (llama.cpp's standard SWA mask), and rotates by
  // rope_freq_base_swa; the other layers see every position. Empty: no SWA layer.
  std::vector<uint8_t> swa;  // [n_layer]
  int n_swa = 0;
  float rope_freq_base_swa = 10000.0f;

  // Multi-head latent attention (deepseek2). Keys and values of all heads come from one
  // compressed latent of n_lora_kv dims (normed) plus one shared RoPE'd key part of n_rot dims;
  // the cache holds those n_lora_kv + n_rot floats per position (head_dim_k, n_head_kv = 1; V is
  // the latent part of that row, head_dim_v = n_lora_kv). Per head, a query has head_dim_k_mla =
  // nope + n_rot dims and the output head_dim_v_mla dims.
  int n_lora_q = 0;          // attention.q_lora_rank: 0 = a plain attn_q, else attn_q_a / attn_q_b
  int n_lora_kv = 0;         // attention.kv_lora_rank: > 0 = MLA
  int head_dim_k_mla = 0;    // attention.key_length_mla
  int head_dim_v_mla = 0;    // attention.value_length_mla
  float mla_kq_scale = 0;    // the attention scores' scale (1/sqrt(head_dim_k_mla) times YaRN's mscale^2)

  // Whether layer il has routed experts (else: attention-only layers of a dense model, or a
  // dense lead layer of a MoE model).
  bool has_experts(int il) const { return moe && il >= n_layer_dense_lead; }
  bool is_recurrent(int il) const { return !recurrent.empty() && recurrent[static_cast<size_t>(il)] != 0; }
  bool is_swa(int il) const { return !swa.empty() && swa[static_cast<size_t>(il)] != 0; }
  float rope_base(int il) const { return is_swa(il) ? rope_freq_base_swa : rope_freq_base; }
  int n_recurrent() const { int n = 0; for (uint8_t r : recurrent) n += r; return n; }
  int64_t ssm_qk_head(int64_t h) const {
    return ssm_v_grouped ? h / (ssm_n_v_heads / ssm_n_k_heads) : h % ssm_n_k_heads;
  }
  int64_t ssm_key_dim() const { return int64_t(ssm_n_k_heads) * ssm_d_state; }
  int64_t ssm_value_dim() const { return int64_t(ssm_n_v_heads) * ssm_d_state; }
  int64_t ssm_conv_dim() const { return 2 * ssm_key_dim() + ssm_value_dim(); }

  int n_q() const { return n_head * head_dim_k; }
  int n_kv_k() const { return n_head_kv * head_dim_k; }
  int n_kv_v() const { return n_head_kv * head_dim_v; }
  bool mla() const { return n_lora_kv > 0; }
  // Floats the KV cache holds per position of an attention layer: K and V, or MLA's one row.
  int64_t kv_floats_per_pos() const { return mla() ? int64_t(n_kv_k()) : int64_t(n_kv_k()) + n_kv_v(); }
};

// Reads and validates the configuration; throws les::Error naming the key on a missing,
// mistyped or inconsistent value, or an unsupported architecture.
ModelConfig config_from_gguf(const gguf::File& f, const std::string& path);

}  // namespace les
