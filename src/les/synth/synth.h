// Synthetic models: random-weight GGUF files of any supported architecture, shape and tensor
// type, deterministic for a seed, whose routing statistics (cross-layer predictability, expert
// popularity, temporal reuse) are realistic and set by a few knobs; and the measurement of those
// statistics on a short generation. For speed and scale tests: the weights mean nothing.
//
// How the knobs act (docs/synth.md has the measured effect of each):
//  - update: every layer adds to the residual stream an attention and an MoE output whose rms is
//    a fixed fraction of the stream's rms. The smaller the update, the more the router input of
//    layer l resembles that of layer l+1, so layer l+1's router applied to layer l's router input
//    predicts layer l+1's experts better (cross-layer recall). first_update is the same ratio for
//    layer 0's MoE output alone (large in trained models: layer 1 is hard to predict).
//  - attn_share, attn_window, context_focus: attention is made local (q/k biases whose
//    RoPE-rotated product decays with distance), so its output is a moving average over about
//    attn_window recent tokens, shared by consecutive tokens. Attention writes mostly into one half
//    of the hidden state (the "context" coordinates), experts mostly into the other; routers take
//    a share context_focus of their logit variance from the context half. Routing then follows the
//    slowly varying context more and more with depth (temporal reuse). attn_share is the part of
//    each layer's update that comes from attention.
//  - skew: router rows have Zipf-like norms (rank^-skew), so some experts win the top-k more often
//    (popularity: share of the top 10% experts, max/mean load).
//  - router_scale: standard deviation of the router logits (sharpness of the routing weights).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "les/model/config.h"

namespace les::synth {

struct SynthSpec {
  // Architecture and shape (a dense architecture uses n_ff_exp as its FFN width and ignores the
  // expert counts).
  Arch arch = Arch::qwen3moe;
  int n_layer = 4;
  int n_embd = 128;
  int n_head = 4;          // query heads
  int n_head_kv = 2;       // key/value heads
  int head_dim = 32;       // key and value head dimension (= rope dimension)
  int n_expert = 16;       // routed experts per layer (0 for dense llama)
  int n_expert_used = 4;   // experts per token
  int n_ff_exp = 64;       // width of one routed expert (dense: of the FFN)
  int n_ff_shexp = 0;      // width of the shared expert (qwen2moe, qwen35moe, qwen3next only, required there)
  int n_vocab = 512;
  bool image_tokens = false;  // MiniCPM-V's "<image>", "</image>", "<slice>", "</slice>" as control
                              // tokens at ids n_vocab - 7 .. n_vocab - 4 (vocab.h)
  int n_ctx = 512;         // context_length written to the file
  float rope_freq_base = 10000.0f;
  float rms_eps = 1e-6f;

  // qwen35moe and qwen3next only: every full_attn_interval-th layer is gated full attention, the
  // others Gated DeltaNet; attention rotates the first n_rot dims of each head (qwen35moe:
  // interleaved M-RoPE sections derived from n_rot; qwen3next: neox); DeltaNet has ssm_n_k_heads q/k and ssm_n_v_heads v heads of ssm_d_state.
  int n_rot = 0;
  int full_attn_interval = 4;
  int ssm_d_state = 0;
  int ssm_n_k_heads = 0;
  int ssm_n_v_heads = 0;
  int ssm_d_conv = 4;
  int n_mtp = 0;              // MTP (NextN) draft blocks after the trunk: 0 or 1 (qwen35moe, glm4moe)

  // glm4moe: NeoX RoPE on the first n_rot dims of each head (partial rotary); the first
  // n_dense_lead layers have a dense SwiGLU FFN of width n_ff_dense instead of experts; the other
  // layers route by sigmoid + a selection bias (exp_probs_b), normalise the top-k weights and scale
  // them by expert_weights_scale, and add a shared expert of width n_ff_shexp (a multiple of
  // n_ff_exp: expert_shared_count experts); q/k/v biases; per-head q/k norms when qk_norm.
  int n_dense_lead = 0;
  int n_ff_dense = 0;
  float expert_weights_scale = 1.0f;
  bool qk_norm = false;

  // gpt-oss: the even layers attend to the last sliding_window positions only; YaRN RoPE scaling
  // by yarn_factor over yarn_orig_ctx positions when yarn_factor > 0; rope_freq_base_swa, when
  // > 0, is written as the SWA layers' RoPE base. Attention sinks take a share of each head's
  // attention (design.h).
  int sliding_window = 0;
  float yarn_factor = 0.0f;
  int yarn_orig_ctx = 0;
  float rope_freq_base_swa = 0.0f;

  // deepseek2 (multi-head latent attention): head_dim is a query/key head's nope + rope dims,
  // n_rot its rope dims; keys and values come from a kv_lora_rank latent; v_head_dim is a value
  // head's width; q_lora_rank 0 means a plain attn_q. n_head_kv is 1 (the one latent head). Its
  // MoE: n_dense_lead dense layers of n_ff_dense, ungated shared experts (n_ff_shexp, a multiple
  // of n_ff_exp), routing by `gating` with expert groups (n_group_used of n_expert_groups eligible
  // per token), a selection bias (exp_probs_b) when selection_bias, weights renormalised when
  // norm_topk, times expert_weights_scale; YaRN (yarn_factor, yarn_orig_ctx) with DeepSeek's
  // mscale_all_dim.
  int q_lora_rank = 0;
  int kv_lora_rank = 0;
  int v_head_dim = 0;
  Gating gating = Gating::softmax;
  bool norm_topk = false;
  int n_expert_groups = 1;
  int n_group_used = 1;
  bool selection_bias = false;
  float yarn_mscale_all_dim = 0.0f;

  // Tensor types: a type or mix as `les quantize` takes it ("q4_K", "q4_k_m", "q8_0", "f16", ...).
  // Norms, biases and routers are always F32.
  std::string type = "q8_0";
  std::string name = "synth";  // general.name
  uint64_t seed = 1;
  int n_threads = 1;           // generation threads (the file does not depend on it)

  // Routing knobs (see the file comment).
  float update = 0.20f;        // rms of a layer's residual update / rms of the stream
  float first_update = 1.5f;   // the same for layer 0's MoE output
  float attn_share = 0.8f;     // share of the update's variance that comes from attention
  float attn_window = 12.0f;   // attention locality in tokens (0: no locality, random attention)
  float skew = 0.04f;          // expert popularity exponent (0: all experts alike)
  float router_scale = 1.5f;   // standard deviation of the router logits
  float context_focus = 0.9f;  // share of the router logits' variance from the context coordinates
                               // (0.5: both halves alike)
};

// Named shapes: "tiny" (a few MB, for tests), "small" (the dimensions of the bundled trained
// tiny MoE), "qwen3-30b-a3b", "35b-a3b" (the MiniCPM-V 4.7 / Qwen3.6-35B-A3B MoE dimensions,
// without the hybrid attention), "qwen35-35b-a3b" (the real qwen35moe 35B-A3B: 30 DeltaNet + 10
// gated attention layers), "qwen35-tiny" (a small qwen35moe for tests), "qwen3-0.6b" (dense, a draft for the 30B), "mixtral-8x7b",
// "olmoe-1b-7b", "glm-4.5-air" and "glm-4.5" (glm4moe, with their NextN block), "qwen3-next-80b-a3b"
// (qwen3next: 36 DeltaNet + 12 gated attention layers, 512 experts top-10), "gpt-oss-20b" and
// "gpt-oss-120b", "deepseek-v2-lite", "deepseek-v3" (cut with n_layer) and "kimi-k2" (deepseek2).
// `arch` overrides the shape's own architecture; dimensions the architecture
// cannot take (qwen2moe and olmoe need heads x head_dim = n_embd, olmoe needs kv heads = heads)
// are adapted. Throws les::Error for an unknown name.
SynthSpec shape_spec(const std::string& shape, std::optional<Arch> arch = std::nullopt);
std::vector<std::string> shape_names();
// "qwen3moe", "qwen2moe", "olmoe", "llama" (or "mixtral"), "qwen3", "qwen35moe", "glm4moe",
// "qwen3next", "gpt-oss", "deepseek2"; nullopt if unknown.
std::optional<Arch> parse_arch(const std::string& name);

// Checks a spec; throws les::Error naming the offending field (used > experts, heads x head_dim
// not matching what the architecture needs, a type that does not exist, a knob out of range).
void validate(const SynthSpec& spec);

// Total file size the spec produces (header included).
uint64_t synth_file_bytes(const SynthSpec& spec);

// Writes the model to `path` atomically (validate()s first). The content depends only on the spec
// without n_threads: each tensor is a function of (seed, tensor name, shape, scale).
// progress(bytes_done, bytes_total) may be empty.
using ProgressFn = std::function<void(uint64_t, uint64_t)>;
void write_synth_model(const SynthSpec& spec, const std::string& path, const ProgressFn& progress = {});

// --- DSpark / dflash drafter ---------------------------------------------------------------------

// A random-weight F32 drafter in llama.cpp's dflash architecture with the DSpark Markov head (and
// optionally the confidence head) for a given target: its n_embd, vocabulary and tokenizer keys
// come from the target file. For tests of the drafter against llama.cpp: the weights mean nothing.
struct DflashSpec {
  int n_layer = 1;
  int n_ff = 512;
  int n_head = 4, n_head_kv = 2, head_dim = 64;
  int block_size = 4;
  int markov_rank = 32;
  bool causal = false;              // dflash.attention.causal
  bool sample_from_anchor = false;  // dflash.sample_from_anchor
  bool confidence = true;           // conf_proj weight and bias
  std::vector<int> target_layers;   // empty: {1, n/2, n-1} of the target's n layers
  int32_t mask_token = -1;          // -1: the target's last token id
  uint64_t seed = 1;
  std::string name = "synth-dflash";
};

// Writes the drafter for the target model file `target_path` to `path` atomically. Each tensor is
// a function of (seed, tensor name, shape). Throws les::Error for a spec the target cannot take.
void write_synth_dflash(const DflashSpec& spec, const std::string& target_path, const std::string& path);

// --- measurement --------------------------------------------------------------------------------

struct MeasureOptions {
  int n_prompt = 32;   // random prompt tokens (ids drawn uniformly from the non-special tokens)
  int n_gen = 96;      // then greedy decoding of this many tokens
  uint64_t seed = 1;   // prompt seed
  int n_threads = 1;
};

struct LayerRouting {
  // Predictor "layer l's router applied to layer l-1's router input" (the previous layer's
  // normed residual): share of layer l's true top-k found in the predicted top-k / top-2k.
  // NaN for layer 0.
  double recall_k = 0, recall_2k = 0;
  double temporal_reuse = 0;   // share of a token's experts that the previous token also used
                               // (all of these NaN for a dense lead layer, which routes nothing)
  double top10_share = 0;      // share of selections going to the layer's 10% most used experts
  double max_over_mean = 0;    // most used expert's count / mean count
  int never_used = 0;          // experts no token selected
  double stream_rms = 0;       // rms of the residual stream after the layer (mean over tokens)
};

struct RoutingReport {
  std::string arch;
  bool moe = false;
  int n_layer = 0, n_expert = 0, k = 0;
  int n_tokens = 0, n_prompt = 0, n_gen = 0;
  int distinct_generated = 0;  // distinct token ids among the greedy tokens
  bool finite = true;          // no NaN/Inf in any router input, stream or logits
  std::vector<LayerRouting> layers;
  // Means over the layers with a router (recall over those after layer 0).
  double recall_k = 0, recall_2k = 0, temporal_reuse = 0, top10_share = 0, max_over_mean = 0;
  int never_used = 0;          // summed over layers
  double random_reuse = 0;     // k / n_expert: temporal reuse and recall@k of random routing
  double seconds = 0;
};

// Loads the model, evaluates a random prompt and a greedy continuation, and measures the routing
// (computed with the model's routers exactly as the forward pass routes). Works on any supported
// model file, synthetic or trained; dense models report only the stream and the NaN check.
RoutingReport measure_routing(const std::string& path, const MeasureOptions& opt = {});

// Human-readable table (per layer and means, with the trained tiny model's values for reference).
std::string format_report(const RoutingReport& r);

}  // namespace les::synth
