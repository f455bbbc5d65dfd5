// deepseek2 (multi-head latent attention, DeepSeek-style MoE) in the synthetic model generator:
// the MLA and routing fields of its shapes, their checks, the design of the attention scales and
// its tensors and keys. Internal to src/les/synth.
#pragma once

#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/synth/design.h"
#include "les/synth/random_fill.h"
#include "les/synth/synth.h"
#include "les/synth/tensor_sink.h"

namespace les::synth {

// spec_deepseek2.cpp
// Sets the MLA and routing fields of shape `shape` (own_shape: one of the deepseek2 shapes; else
// derived from head_dim: nope head_dim, rope head_dim / 2, latent 4 x head_dim).
void deepseek2_shape(SynthSpec& s, const std::string& shape, bool own_shape);
// Throws les::Error naming a deepseek2 field out of range, or set for another architecture.
void validate_deepseek2(const SynthSpec& s);
// llama.cpp's attention score scale for the spec (1/sqrt(head_dim) times YaRN's mscale^2) times the
// square of the rope kernel's magnitude factor.
float deepseek2_score_scale(const SynthSpec& s);
// Per rope pair, the angle per position as the rope kernel turns it (YaRN's mix of interpolated and
// extrapolated frequencies).
std::vector<double> deepseek2_rope_thetas(const SynthSpec& s);
// E[sum of squared routing weights] for Gaussian router logits with these per-expert gains,
// routed as the model routes (gating, groups, normalisation, scale).
double deepseek2_route_w2(const SynthSpec& s, const std::vector<double>& gain, Rng& rng);
// The MLA part of the design (rho: content / bias ratio of the rope parts; scale2: the square of
// the bias scale that gives the planned locality).
void design_mla(const SynthSpec& s, Design& d, double rho, double scale2);

// write_deepseek2.cpp
void add_deepseek2_keys(gguf::Writer& w, const SynthSpec& s);
void write_deepseek2_layer(TensorSink& out, const SynthSpec& s, const Design& d, int il);

}  // namespace les::synth
