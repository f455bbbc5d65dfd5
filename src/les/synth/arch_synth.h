// Architecture-specific parts of the synthetic model writer (write_<arch>.cpp): shape defaults,
// validation, metadata keys and layer tensors, written through the writer's tensor operations.
#pragma once

#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/synth/design.h"
#include "les/synth/random_fill.h"
#include "les/synth/synth.h"

namespace les::synth {

// A change of one generated matrix row: its element std multiplied by `scale`, then, when col0 is
// finite, its element 0 set to col0 (a quantized row's first block is quantized again around it).
struct RowEdit {
  float scale = 1.0f;
  float col0 = NAN;
};
using RowEditFn = std::function<RowEdit(int64_t row)>;

// The tensor operations of the model writer (write_model.cpp). Every tensor is a function of
// (seed, name, shape, scale); matrices take the spec's planned type, vectors are F32.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  // A weight matrix (2-D or an expert stack [n_in, n_out, n_expert]): output rows (hidden-state
  // coordinates) below the design's context split have element std sigma.ctx, the others sigma.tok.
  virtual void matrix(const std::string& name, std::vector<int64_t> ne, SplitSigma sigma) = 0;
  // The same with single rows changed by edit(row) (may be empty); it runs when the file is
  // written, after the call: it must own what it reads (the design outlives the writing).
  virtual void matrix_rows(const std::string& name, std::vector<int64_t> ne, SplitSigma sigma, const RowEditFn& edit) = 0;
  // The F32 router [n_embd, n_expert] of a layer design.
  virtual void router(const std::string& name, const LayerDesign& L) = 0;
  virtual void vector(const std::string& name, std::vector<float> v) = 0;
  // An F32 tensor of approximately normal values: offset + sigma * N(0, 1).
  virtual void float_tensor(const std::string& name, std::vector<int64_t> ne, float sigma, float offset) = 0;

  void matrix(const std::string& name, std::vector<int64_t> ne, float sigma) {
    matrix(name, std::move(ne), SplitSigma{sigma, sigma});
  }
};

// --- glm4moe (write_glm4moe.cpp) ---
// Fills the glm4moe fields of a spec made from a named shape (partial rotary, dense lead layers,
// shared expert, routed scaling, q/k norms, the NextN block): the real GLM-4.5 / GLM-4.5-Air
// values for their shapes, small ones for any other shape.
void glm4moe_shape_defaults(SynthSpec& s, const std::string& shape);
// Throws les::Error (via fail) for glm4moe fields out of range.
void validate_glm4moe(const SynthSpec& s);
// The glm4moe keys beyond the common ones (FFN widths, routing, NextN count).
void add_glm4moe_keys(gguf::Writer& w, const SynthSpec& s);
// Block il: a trunk layer (il < n_layer) or the NextN block (il == n_layer).
void add_glm4moe_block(TensorSink& out, const SynthSpec& s, const Design& d, int il);

// --- gpt-oss (write_gpt_oss.cpp) ---
// Fills the gpt-oss fields of a spec made from a named shape: sliding window 128 (16 on the small
// test shapes, n_ctx <= 512), YaRN factor 32 over 4096 positions.
void gpt_oss_shape_defaults(SynthSpec& s);
// Throws les::Error for gpt-oss fields out of range (and for them on another architecture).
void validate_gpt_oss(const SynthSpec& s);
// Whether layer il of the spec is a sliding-window layer (gpt-oss: the even layers, llama.cpp's
// default pattern).
bool synth_is_swa(const SynthSpec& s, int il);
// YaRN's factor on RoPE pair i's frequency (1 without YaRN): 1/factor beyond the correction dims,
// 1 below them, ggml's ramp in between.
double yarn_theta_factor(const SynthSpec& s, int pair);
// YaRN's magnitude scaling of the rotated q and k (1 without YaRN).
double yarn_magnitude(const SynthSpec& s);
// The gpt-oss keys beyond the common ones (expert width, sliding window, YaRN).
void add_gpt_oss_keys(gguf::Writer& w, const SynthSpec& s);
// Layer il: attention with q/k/v/o biases and sinks, post-attention norm, MoE with router and
// expert biases.
void add_gpt_oss_layer(TensorSink& out, const SynthSpec& s, const Design& d, int il);

// --- deepseek2 (spec_deepseek2.cpp, write_deepseek2.cpp) ---
// Sets the MLA and routing fields of shape `shape` (own_shape: one of the deepseek2 shapes; else
// derived from head_dim: nope head_dim, rope head_dim / 2, latent 4 x head_dim).
void deepseek2_shape(SynthSpec& s, const std::string& shape, bool own_shape);
// Throws les::Error naming a deepseek2 field out of range, or set for another architecture.
void validate_deepseek2(const SynthSpec& s);
// llama.cpp's attention score scale for the spec (1/sqrt(head_dim) times YaRN's mscale^2) times the
// square of the rope kernel's magnitude factor.
float deepseek2_score_scale(const SynthSpec& s);
// Per rope pair, the angle per position as the rope kernel turns it (YaRN's mix of interpolated and
// extrapolated frequencies, with the correction dims llama.cpp uses for deepseek2).
std::vector<double> deepseek2_rope_thetas(const SynthSpec& s);
// E[sum of squared routing weights] for Gaussian router logits with these per-expert gains,
// routed as the model routes (gating, groups, normalisation, scale).
double deepseek2_route_w2(const SynthSpec& s, const std::vector<double>& gain, Rng& rng);
// The MLA part of the design (rho: content / bias ratio of the rope parts; scale2: the square of
// the bias scale that gives the planned locality).
void design_mla(const SynthSpec& s, Design& d, double rho, double scale2);
// The deepseek2 keys beyond the common ones (MLA head widths, FFN widths, routing, YaRN).
void add_deepseek2_keys(gguf::Writer& w, const SynthSpec& s);
// Layer il: multi-head latent attention, then a dense FFN (lead layers) or the routed experts with
// ungated shared experts.
void add_deepseek2_layer(TensorSink& out, const SynthSpec& s, const Design& d, int il);

}  // namespace les::synth
