// Inference state of one sequence: KV cache, work buffers and the forward pass.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "les/model/attention_core.h"
#include "les/model/delta_net.h"
#include "les/model/expert_source.h"
#include "les/model/gated_attention.h"
#include "les/model/kv_cache.h"
#include "les/model/matmul.h"
#include "les/model/mla_attention.h"
#include "les/model/model.h"
#include "les/model/product_names.h"
#include "les/util/thread_pool.h"

namespace les {

struct ContextParams {
  int n_ctx = 0;      // 0: the model's training context, capped at 4096
  int n_threads = 1;
  int n_batch = 256;  // tokens evaluated per forward pass during prefill
  // Gated DeltaNet layers: chunked form of the delta rule for multi-token batches (equal up to
  // rounding; the default token-by-token recurrence is what llama.cpp's CPU backend runs).
  bool chunked_delta_rule = false;
  // KV cache types (kv_cache.h). f32 (the default here) computes attention as llama.cpp does
  // without flash attention; any other type as its flash attention does (attention_core.h).
  // Multi-head latent attention (deepseek2) keeps its compressed rows in f32 whatever these say.
  Type type_k = Type::F32, type_v = Type::F32;
};

// Observer of named intermediate results: layer (-1 for none), name, data [n_tok][width].
using LayerObserver = std::function<void(int layer, const char* name, const float* data, int64_t n_tok, int64_t width)>;

// Observer of each MoE layer's routing, for every token of a forward call: the selected expert
// ids and their weights [n_tok][k] (router order) and the router's logits [n_tok][n_expert] (with
// the router bias of architectures that have one; before gating and selection bias).
using RoutingObserver = std::function<void(int layer, int64_t n_tok, const int32_t* ids, const float* weights, int k,
                                           const float* logits, int n_expert)>;

// Observer of the input rows of every weight-matrix product (importance matrices).
// tensor: the weight's GGUF tensor name in the original (unpacked) layout, e.g. "blk.3.attn_q.weight",
// "blk.3.ffn_down_exps.weight", "output.weight" ("token_embd.weight" for a tied LM head); expert: the
// expert index for routed-expert stacks, else -1; x: the float input rows [n_rows][n_in] exactly as
// they enter the product (before activation quantization). A routed expert's products see only the
// rows routed to it. Called on the thread that called eval / mtp_eval; x is valid during the call.
using MatmulInputObserver =
    std::function<void(const std::string& tensor, int expert, const float* x, int64_t n_rows, int64_t n_in)>;

class Context {
 public:
  // experts: where routed experts come from; null = resident (the mapped file).
  Context(const Model& model, const ContextParams& p, ExpertSource* experts = nullptr);
  ~Context();

  // Evaluates tokens at positions n_past().. . Logits of every position are kept when
  // all_logits, else only the last one's. Throws les::Error for a token id out of range or
  // when the context would overflow.
  void eval(std::span<const int32_t> tokens, bool all_logits);

  // A token id that stands for an input embedding row (an image's visual token) in eval_mixed
  // and in tokens().
  static constexpr int32_t kEmbeddingRow = -1;
  // Evaluates tokens at positions n_past().. where every kEmbeddingRow takes the next row of
  // embd ([rows][n_embd], in order) as its input instead of a token embedding; the rows are kept
  // for a rollback's replay. A batch of n_batch positions takes rows and tokens alike (a forward
  // pass reads each streamed expert once, whatever the mix).
  // Throws les::Error for a row count that does not match, a token id out of range or a full
  // context.
  void eval_mixed(std::span<const int32_t> tokens, const float* embd, int64_t n_rows, bool all_logits);

  // One step for several sequences at once (batched serving): batch[s].tokens are appended to
  // batch[s].ctx (contexts of this same model and expert source, all distinct; `this` may be one
  // of them or not). Afterwards each ctx->last_logits() holds its last token's logits
  // (n_outputs() == 1). Each context's logits, state and KV cache are bit-identical to
  // ctx->eval(tokens, false) alone: tokens of every sequence go through one forward pass per
  // n_batch tokens (each streamed expert read once for all of them), attention and recurrent
  // state per sequence. Throws les::Error (nothing evaluated) for a token out of range, a full
  // context, an empty token list or a context of another model.
  struct SeqTokens {
    Context* ctx = nullptr;
    std::span<const int32_t> tokens;
  };
  void eval_together(std::span<const SeqTokens> batch);

  // Evaluates tokens at positions 0.. of an empty context (n_past() == 0) from layer first_layer
  // on: h_in [n][n_embd] is that layer's input (the residual stream after layer first_layer - 1,
  // as the "l_out" observer reports it; first_layer == n_layer runs only the output head).
  // Layers below first_layer are not run (their cache positions stay unset, so the context holds
  // no valid state for further evals until rollback(0)). Logits of every position are kept. The
  // result equals eval(tokens, true) bit for bit when h_in is what that eval computed.
  void eval_from_layer(std::span<const int32_t> tokens, int first_layer, const float* h_in);

  // Logits of output i of the last eval (i < n_outputs()), [n_vocab].
  const float* logits(int i) const;
  const float* last_logits() const { return logits(n_outputs_ - 1); }
  int n_outputs() const { return n_outputs_; }

  int n_past() const { return n_past_; }
  // The tokens at positions [0, n_past()) (kEmbeddingRow where an embedding row was evaluated).
  std::span<const int32_t> tokens() const { return {tokens_.data(), static_cast<size_t>(n_past_)}; }
  int n_ctx() const { return n_ctx_; }
  Type type_k() const { return k_rows_.type(); }
  Type type_v() const { return v_rows_.type(); }
  // The input row evaluated at position pos (< n_past()) when it was an embedding row, else null.
  const float* embedding_row(int pos) const {
    return pos >= 0 && pos < n_past_ && embd_row_[static_cast<size_t>(pos)] >= 0
               ? embd_rows_.data() + static_cast<size_t>(embd_row_[static_cast<size_t>(pos)]) * static_cast<size_t>(cfg_.n_embd)
               : nullptr;
  }
  // Forgets positions >= n (rollback of rejected tokens); 0 resets. With recurrent (DeltaNet)
  // layers the state is restored from the snapshot taken at the start of the last eval (or
  // reset to position 0 when n is before it) and the kept tokens after it are evaluated again:
  // the result is bit-identical to never having evaluated the forgotten tokens.
  void rollback(int n);

  // Benchmark instrument: extends the context to n positions (n_past() < n <= n_ctx()) by copying
  // the KV rows and tokens of positions [0, n_past()) cyclically, so that decode speed at depth n
  // can be measured without evaluating n positions (its cost does not depend on what the rows
  // hold). What follows is not what evaluating those tokens would give (each copied row keeps its
  // first position's RoPE, recurrent state is not advanced): never for text. Throws les::Error for
  // an empty context or n out of range.
  void repeat_positions(int n);

  // Hidden state after output_norm of output i of the last eval ([n_embd]): the MTP head's input.
  const float* hidden(int i) const;

  // --- MTP (NextN) draft head: qwen35moe / glm4moe files with an MTP block ---
  // (its KV cache is allocated only then).
  bool has_mtp() const { return model_.weights().mtp.runnable(); }
  // Evaluates MTP rows: row i is (tokens[i], hidden + i * n_embd) at MTP position mtp_n_past() + i,
  // with its own KV cache. Row i's logits predict the token after tokens[i]; its hidden state is
  // the next draft step's input. Throws les::Error without an MTP block, with streamed experts,
  // for a token out of range or when the MTP cache is full.
  void mtp_eval(std::span<const int32_t> tokens, const float* hidden);
  const float* mtp_logits(int i) const;   // [n_vocab], i < the last mtp_eval's row count
  const float* mtp_hidden(int i) const;   // [n_embd]
  int mtp_n_past() const { return mtp_n_past_; }
  void mtp_rollback(int n);               // forgets MTP positions >= n

  void set_observer(LayerObserver obs) { observer_ = std::move(obs); }
  // Trunk layers with a router only (not the MTP block); empty turns it off.
  void set_routing_observer(RoutingObserver obs) { routing_observer_ = std::move(obs); }
  // An empty observer turns it off (the products then cost one branch each, nothing more).
  void set_matmul_observer(MatmulInputObserver obs);
  ThreadPool& pool() { return pool_; }
  const ExpertSource& experts() const { return *experts_; }
  const Model& model() const { return model_; }

  // Bytes of KV cache, recurrent state (with its snapshot) and work buffers (for memory budgets).
  uint64_t state_bytes() const;

 private:
  // A run of one sequence's tokens within a batch of eval_together: rows [begin, begin + n) of
  // the work buffers, at positions pos0.. of ctx's cache.
  struct Segment {
    Context* ctx;
    int begin, n, pos0;
  };
  // The segments of the batch being evaluated; empty: this context's own tokens (pos0 as given).
  std::span<const Segment> segments(int n, int pos0, Segment& solo) {
    solo = Segment{this, 0, n, pos0};
    return segs_.empty() ? std::span<const Segment>(&solo, 1) : std::span<const Segment>(segs_);
  }
  // The layers over the tokens in h_ (n rows), then the mixers' bookkeeping is the caller's.
  void run_layers(int n, int pos0, int first_layer);
  // first_layer > 0: start there with h_in as its input instead of the token embeddings.
  void forward_chunk(const int32_t* tokens, int n, bool all_logits, int out_base, int first_layer = 0,
                     const float* h_in = nullptr);
  // Standard attention + residual of block L (il: its KV slot and observer layer; n_layer: the NextN block).
  void attention(const LayerWeights& L, int il, int n, int pos0);
  // qwen35moe, qwen3next: DeltaNet or gated attention, deepseek2: MLA; + residual (il == n_layer: the MTP block).
  void hybrid_mixer(const LayerWeights& L, int il, int n, int pos0);
  void replay(int from, int to);               // re-evaluates tokens_[from, to) without logits
  // Throws les::Error naming the first token id outside [0, n_vocab).
  void check_token_ids(std::span<const int32_t> tokens) const;
  // Evaluates positions [b, e) of tokens_ in batches of n_batch, tokens and embedding rows alike.
  void eval_batches(int b, int e, bool all_logits, bool logits_last, int out_base);
  void ffn(const LayerWeights& L, int il, int n);
  void dense_lead_ffn(const LayerWeights& L, int il, int n);  // a MoE model's dense lead layer
  // Reports product p of block `block` to the matmul observer (which must be set).
  void observe(int block, Product p, int expert, const float* x, int64_t n_rows, int64_t n_in) const {
    matmul_observer_(product_names_->of(block, p), expert, x, n_rows, n_in);
  }

  const Model& model_;
  const ModelConfig& cfg_;
  std::unique_ptr<ExpertSource> owned_source_;
  ExpertSource* experts_;
  ThreadPool pool_;
  int n_ctx_ = 0;
  int n_batch_ = 0;
  int n_past_ = 0;
  int n_outputs_ = 0;

  // [n_attention_layers][n_ctx] rows of n_kv_k / n_kv_v values (MLA: k_rows_ holds the compressed
  // f32 rows, v_rows_ is empty).
  KvRows k_rows_, v_rows_;
  std::vector<int> kv_slot_;   // [n_layer]: KV cache slot of an attention layer, -1 for recurrent
  std::vector<int> rec_slot_;  // [n_layer]: recurrent state slot of a DeltaNet layer, else -1
  std::vector<int32_t> tokens_;  // [n_ctx]: the evaluated tokens (replayed by rollback)
  std::vector<int32_t> embd_row_;   // [n_ctx]: row of embd_rows_ at an embedding position, else -1
  std::vector<float> embd_rows_;    // input embedding rows evaluated so far [rows][n_embd]
  std::vector<float> mixed_in_;     // a batch's inputs when it holds embedding rows
  std::unique_ptr<RecurrentState> rec_;       // null without recurrent layers
  std::unique_ptr<DeltaNetMixer> delta_net_;
  std::unique_ptr<GatedAttentionMixer> gated_attn_;
  std::unique_ptr<MlaAttention> mla_;         // deepseek2: multi-head latent attention
  // Work buffers sized for n_batch tokens.
  std::vector<float> h_, xn_, q_, k_, v_, att_, tmp_, router_logits_;
  std::vector<float> raw_logits_;  // router logits (+ router bias) for the routing observer
  std::vector<float> logits_;  // [n_outputs][n_vocab]
  std::vector<float> hidden_;  // [n_outputs][n_embd]: after output_norm
  // MTP head: rows of the last mtp_eval.
  int mtp_n_past_ = 0, mtp_rows_ = 0;
  std::vector<float> mtp_in_, mtp_hidden_, mtp_logits_;  // [n][2 n_embd], [n][n_embd], [n][n_vocab]
  std::vector<float> rope_cache_;
  QuantizedActs acts_, acts2_;
  // MoE
  std::vector<int32_t> sel_ids_;
  std::vector<float> sel_w_;
  std::vector<float> expert_out_;          // [n_tok][k][n_embd]
  std::vector<float> ex_in_, ex_g_, ex_u_, ex_y_;
  std::vector<float> sh_g_, sh_u_, sh_y_, sh_gate_;
  LayerObserver observer_;
  RoutingObserver routing_observer_;
  MatmulInputObserver matmul_observer_;
  std::unique_ptr<ProductNames> product_names_;  // built by the first set_matmul_observer
  std::vector<Segment> segs_;      // eval_together's current batch
  std::vector<AttentionSeq> attn_seqs_;
  std::vector<float> together_logits_;
};

}  // namespace les
