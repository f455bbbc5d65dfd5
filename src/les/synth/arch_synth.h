// Architecture-specific parts of the synthetic model writer (write_<arch>.cpp): shape defaults,
// validation, metadata keys and layer tensors, written through the writer's tensor operations.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/synth/design.h"
#include "les/synth/synth.h"

namespace les::synth {

// The tensor operations of the model writer (write_model.cpp). Every tensor is a function of
// (seed, name, shape, scale); matrices take the spec's planned type, vectors are F32.
class TensorSink {
 public:
  virtual ~TensorSink() = default;
  // A weight matrix (2-D or an expert stack [n_in, n_out, n_expert]): output rows (hidden-state
  // coordinates) below the design's context split have element std sigma.ctx, the others sigma.tok.
  virtual void matrix(const std::string& name, std::vector<int64_t> ne, SplitSigma sigma) = 0;
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

}  // namespace les::synth
