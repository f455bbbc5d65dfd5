// DSpark block drafter: llama.cpp's `dflash` architecture with the DSpark Markov head and optional
// confidence head (llama.cpp src/models/dflash.cpp, driven as common/speculative.cpp's draft-dspark).
//
// The drafter reads the target's hidden states. For every target position j, the inputs of the
// target layers target_layers() (the residual stream entering layer l), concatenated, are injected:
//   g_j = RMSNorm(fc . f_j) * enc.output_norm;  per drafter layer K_j = RoPE(RMSNorm_head(wk . g_j)
//   * k_norm, j), V_j = wv . g_j  -> the drafter's KV cache at position j.
// One drafting pass runs the block [id_last, MASK, ...] at positions p = n_injected() .. through the
// drafter's Qwen3-style layers (attention over the injected context and the block's own keys,
// causal inside the block or not as the file says), output_norm and its own head, then the Markov
// chain: logits_i = base_i + markov_w2 . markov_w1[prev_i], prev = id_last then argmax of the
// previous slot; confidence_i = sigmoid(conf_proj . [output_norm(h_i) ; markov_w1[prev_i]] + b).
// With sample_from_anchor (DSpark's layout) slot i predicts the token at p + i + 1 and a block of
// n tokens drafts n; without it slot 0 is a bonus slot (unbiased, not drafted) and a block of n + 1
// drafts n. The KV cache holds K/V rounded to F16, as llama.cpp's default F16 cache does.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "les/model/config.h"
#include "les/model/matmul.h"
#include "les/model/weights.h"
#include "les/util/mapped_file.h"
#include "les/util/thread_pool.h"

namespace les {

// Hyper-parameters of a dflash drafter (keys dflash.*).
struct DsparkConfig {
  int n_layer = 0;
  int n_embd = 0;            // = the target's n_embd
  int n_ff = 0;
  int n_head = 0, n_head_kv = 0;
  int head_dim = 0;          // key = value head dimension
  int n_rot = 0;
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-6f;
  float attn_scale = 0.0f;   // attention.scale; 0: 1/sqrt(head_dim)
  float embd_scale = 0.0f;   // embedding_scale; 0: none
  int n_vocab = 0;           // = the target's vocabulary
  int n_ctx_train = 0;
  int block_size = 16;       // dflash.block_size (llama.cpp's default when absent)
  bool causal = false;       // dflash.attention.causal: causal attention inside the block
  bool sample_from_anchor = true;
  int32_t mask_token = -1;   // tokenizer.ggml.mask_token_id
  int markov_rank = 0;
  std::vector<int> target_layers;  // target layer-input indices, in feature order
};

struct DsparkLayer {
  Vec attn_norm, q_norm, k_norm, ffn_norm;  // [n_embd], [head_dim], [head_dim], [n_embd]
  Matrix wq;                 // [n_head * head_dim][n_embd]
  Matrix wk, wv;             // [n_head_kv * head_dim][n_embd]
  Matrix wo;                 // [n_embd][n_head * head_dim]
  Matrix gate, up;           // [n_ff][n_embd]
  Matrix down;               // [n_embd][n_ff]
};

struct DsparkWeights {
  Matrix tok_embd;           // [n_vocab][n_embd]
  Matrix fc;                 // [n_embd][n_target_layers * n_embd]
  Vec enc_norm;              // enc.output_norm [n_embd]
  std::vector<DsparkLayer> layers;
  Vec output_norm;           // [n_embd]
  Matrix output;             // [n_vocab][n_embd] (token_embd when the file has no output)
  Matrix markov_w1;          // [n_vocab][rank]: row = previous token
  Matrix markov_w2;          // [n_vocab][rank]
  Vec conf_w;                // conf_proj.weight [n_embd + rank], optional
  Vec conf_b;                // conf_proj.bias [1], optional
};

// One DSpark/dflash drafter bound to a target model's shape. Not thread-safe; one sequence.
class DsparkModel {
 public:
  // Loads a dflash GGUF; throws les::Error naming what is wrong (wrong architecture, missing
  // tensor/key, a target_layers entry >= target n_layer, n_embd/n_vocab mismatch with the target,
  // a tensor the architecture does not use). n_ctx: positions of the drafter's KV cache
  // (injected context + one block).
  static std::unique_ptr<DsparkModel> load(const std::string& path, const ModelConfig& target, int n_threads,
                                           int n_ctx);
  ~DsparkModel();

  const DsparkConfig& config() const { return cfg_; }
  // llama.cpp layer-INPUT indices (input of layer l = the residual stream after layer l-1).
  const std::vector<int>& target_layers() const { return cfg_.target_layers; }
  int block_size() const { return cfg_.block_size; }
  int32_t mask_token() const { return cfg_.mask_token; }
  bool sample_from_anchor() const { return cfg_.sample_from_anchor; }
  bool has_confidence() const { return w_.conf_w.present(); }
  int n_feat() const { return static_cast<int>(cfg_.target_layers.size()) * cfg_.n_embd; }
  // Most tokens one pass drafts: block_size with sample_from_anchor, else block_size - 1.
  int max_draft() const { return cfg_.sample_from_anchor ? cfg_.block_size : cfg_.block_size - 1; }

  int n_injected() const { return n_injected_; }  // positions 0..n_injected()-1 hold context
  // Injects target features for positions n_injected()..+n: feats [n][n_feat()], the target layers'
  // inputs concatenated in target_layers() order. Throws les::Error when the cache would overflow.
  void inject(const float* feats, int n);
  // Forgets injected positions >= n_pos (n_pos >= n_injected(): nothing).
  void rollback(int n_pos);

  // One drafting pass: block [id_last, MASK...] at positions n_injected().. ; fills `tokens` with
  // n_draft (1..max_draft()) draft tokens (greedy Markov chain, as llama.cpp), `confidence` with
  // their confidences (empty without the head), and keeps the logits after the Markov head of every
  // block slot: logits(s), s < n_block(). Draft token i is the argmax of slot i with
  // sample_from_anchor, of slot i + 1 without (slot 0 is then the unbiased bonus slot).
  // Does not change the injected context.
  void draft(int32_t id_last, int n_draft, std::vector<int32_t>& tokens, std::vector<float>& confidence);
  int n_block() const { return n_block_; }    // slots of the last draft()
  const float* logits(int slot) const;        // [n_vocab], slot < n_block()

  uint64_t bytes() const;  // resident weight + cache + work-buffer bytes (for --mem accounting)

 private:
  DsparkModel() = default;
  // K/V of n rows xn [n][n_embd] for layer il at positions pos0.. into the cache (F16-rounded);
  // q (when not null) gets the rotated, F16-rounded queries.
  void project_kv(int il, const float* xn, int n, int pos0, float* q);
  void attention(int n, int pos0, const float* q, int il, float* out);

  DsparkConfig cfg_;
  DsparkWeights w_;
  MappedFile file_;
  std::vector<std::vector<float>> owned_;  // F32 copies of non-F32 vectors
  uint64_t weight_bytes_ = 0;
  std::unique_ptr<ThreadPool> pool_;
  int n_ctx_ = 0;
  int n_injected_ = 0;
  int n_block_ = 0;
  std::vector<float> k_cache_, v_cache_;  // [n_layer][n_ctx][n_head_kv * head_dim], F16 values
  std::vector<float> h_, xn_, g_, q_, k_, v_, att_, tmp_, ff_g_, ff_u_, logits_, w1_, bias_, rope_;
  QuantizedActs acts_, acts2_;
};

}  // namespace les
