// Views of a model's tensors. All pointers point into the loaded file image (or owned
// conversions); shapes follow ggml: n_in is the contiguous dimension.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "les/quant/types.h"

namespace les {

// A weight matrix [n_out][n_in] of `type`, rows of row_bytes.
struct Matrix {
  Type type = Type::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_bytes = 0;
  const uint8_t* data = nullptr;
  const uint8_t* row(int64_t r) const { return data + static_cast<size_t>(r) * row_bytes; }
  bool present() const { return data != nullptr; }
  size_t bytes() const { return row_bytes * static_cast<size_t>(n_out); }
};

// A stack of per-expert matrices [n_expert][n_out][n_in]. Expert e's matrix is expert_bytes
// contiguous bytes starting expert_stride * e bytes after expert 0's:
//  - original GGUF (ffn_*_exps tensors): one contiguous tensor, expert_stride == expert_bytes;
//  - packed file (les pack): the experts' gate, up and down matrices interleaved in one
//    blk.N.ffn_experts_packed tensor, expert_stride == the packed row (a multiple of 4 KiB).
struct ExpertStack {
  Type type = Type::F32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t n_expert = 0;
  size_t row_bytes = 0;
  size_t expert_bytes = 0;   // bytes of one expert's matrix
  size_t expert_stride = 0;  // bytes from expert e's matrix to expert e+1's (>= expert_bytes)
  uint64_t file_offset = 0;  // absolute offset of expert 0's matrix in the model file
  const uint8_t* data = nullptr;  // expert 0's matrix; null when experts are not resident (streamed)
  // Absolute file offset of expert e's matrix.
  uint64_t expert_file_offset(int64_t e) const { return file_offset + static_cast<uint64_t>(e) * expert_stride; }
  // Expert e of a resident stack.
  Matrix expert(int64_t e) const {
    return Matrix{type, n_in, n_out, row_bytes, data + static_cast<size_t>(e) * expert_stride};
  }
  // The same matrix shape over bytes provided elsewhere (an expert cache slot).
  Matrix at(const uint8_t* bytes) const { return Matrix{type, n_in, n_out, row_bytes, bytes}; }
  bool present() const { return n_expert > 0; }
};

// F32 vector (norm weights, biases).
struct Vec {
  const float* data = nullptr;
  int64_t n = 0;
  bool present() const { return data != nullptr; }
};

struct LayerWeights {
  Vec attn_norm;            // [n_embd]
  Matrix wq, wk, wv;        // [n_q | n_kv_k | n_kv_v][n_embd]
  Vec bq, bk, bv;           // optional biases
  Matrix wo;                // [n_embd][n_q]
  Vec bo;                   // optional
  Vec q_norm, k_norm;       // [head_dim] (per head) or [n_q]/[n_kv_k] (full), optional
  Vec attn_sinks;           // [n_head] gpt-oss: a logit per head in the softmax denominator only
  Vec ffn_norm;             // [n_embd]
  Matrix router;            // ffn_gate_inp [n_expert][n_embd]; absent for a dense FFN
  Vec router_bias;          // ffn_gate_inp.bias [n_expert] added to the logits (gpt-oss), optional
  Vec exp_probs_b;          // exp_probs_b.bias [n_expert]: selection bias (DeepSeek-V3, GLM-4.5), optional
  ExpertStack gate, up, down;  // gate/up [n_expert][n_ff][n_embd], down [n_expert][n_embd][n_ff]
  // Per-expert biases (gpt-oss), resident: gate/up [n_expert][n_ff], down [n_expert][n_embd]; optional.
  Vec gate_exps_b, up_exps_b, down_exps_b;
  // Dense FFN of a dense lead layer of a MoE model (cfg.has_experts(il) false): resident, never
  // streamed; silu(gate x) * up x, then down. [n_ff_dense][n_embd] x2, [n_embd][n_ff_dense].
  Matrix ffn_gate, ffn_up, ffn_down;
  Matrix shexp_gate_inp;    // [1][n_embd] (qwen2moe), optional
  Matrix shexp_gate, shexp_up, shexp_down;  // shared expert, optional

  // Gated DeltaNet mixer (qwen35moe recurrent layers; the attention fields above are then absent).
  // S = ssm_d_state, conv_dim = 2 * n_k * S + n_v * S.
  Matrix ssm_qkv;           // attn_qkv [conv_dim][n_embd]: [q (n_k*S) | k (n_k*S) | v (n_v*S)]
  Matrix ssm_z;             // attn_gate [n_v*S][n_embd]: output gate z
  Matrix ssm_beta;          // [n_v][n_embd]: write strength (before sigmoid)
  Matrix ssm_alpha;         // [n_v][n_embd]: decay input
  Vec ssm_conv1d;           // [conv_dim][d_conv]: tap d_conv-1 multiplies the current token
  Vec ssm_dt_bias;          // [n_v]
  Vec ssm_a;                // [n_v]: -exp(A_log)
  Vec ssm_norm;             // [S]: gated RMSNorm weight (plain, not 1 + w)
  Matrix ssm_out;           // [n_embd][n_v*S]
  // qwen3next's fused forms (present instead of ssm_beta/ssm_alpha, or of ssm_qkv/ssm_z), with
  // r = n_v / n_k v heads per q/k head group g (v heads in grouped order, g * r + j):
  Matrix ssm_ba;            // [n_k][beta (r) | alpha (r)][n_embd]
  Matrix ssm_in;            // legacy files: [n_k][q_g (S) | k_g (S) | v_g (r*S) | z_g (r*S)][n_embd]

  // Multi-head latent attention (deepseek2). Without a q LoRA the query is wq (attn_q
  // [n_head * head_dim_k_mla][n_embd]); wo is attn_output [n_embd][n_head * head_dim_v_mla].
  Matrix wq_a;              // attn_q_a [n_lora_q][n_embd] (q LoRA), optional
  Vec q_a_norm;             // attn_q_a_norm [n_lora_q]
  Matrix wq_b;              // attn_q_b [n_head * head_dim_k_mla][n_lora_q]
  Matrix wkv_a;             // attn_kv_a_mqa [n_lora_kv + n_rot][n_embd]: [latent | shared rope key]
  Vec kv_a_norm;            // attn_kv_a_norm [n_lora_kv]
  Matrix wk_b;              // attn_k_b [n_head][n_lora_kv][nope]: n_head * n_lora_kv rows of nope
  Matrix wv_b;              // attn_v_b [n_head][head_dim_v_mla][n_lora_kv]: rows of n_lora_kv
};

// MTP (NextN) draft head (qwen35moe, glm4moe): one attention + MoE block over
// y = eh_proj . [RMSNorm(embed[x]) * enorm ; RMSNorm(h) * hnorm].
struct MtpWeights {
  LayerWeights block;       // attention fields + MoE + shared expert, like a trunk MoE attention layer
  Matrix eh_proj;           // [n_embd][2 n_embd]: embedding half first
  Vec enorm, hnorm;         // [n_embd]
  Vec head_norm;            // nextn.shared_head_norm, else output_norm
  Matrix embed;             // nextn.embed_tokens, else token_embd
  Matrix head;              // nextn.shared_head_head, else output
  bool present() const { return eh_proj.present(); }
  // The head can draft: present with its routed experts (resident, or streamed as expert layer
  // n_layer through the same cache as the trunk's).
  bool runnable() const { return present() && block.gate.present(); }
};

struct ModelWeights {
  Matrix tok_embd;          // [n_vocab][n_embd]
  Vec output_norm;          // [n_embd]
  Matrix output;            // [n_vocab][n_embd] (may alias tok_embd when tied)
  Vec rope_freqs;           // optional [n_rot/2] frequency factors (llama3)
  std::vector<LayerWeights> layers;
  MtpWeights mtp;           // absent unless the file has an MTP block (qwen35moe)
};

}  // namespace les
