// Where routed experts' weights come from. The forward pass asks for the experts a layer's
// router selected and computes each as it becomes available; a resident source hands out
// pointers into the mapped file, a streaming source (storage/) reads them into a cache.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "les/model/weights.h"

namespace les {

struct ExpertView {
  Matrix gate, up, down;  // [n_ff][n_embd], [n_ff][n_embd], [n_embd][n_ff]
};

class ExpertSource {
 public:
  virtual ~ExpertSource() = default;

  // The normalised input of layer `layer`'s router for n_tok tokens, [n_tok][n_embd], available
  // before the layer's experts are requested (a predictor may use it to prefetch).
  virtual void on_router_input(int /*layer*/, const float* /*x_norm*/, int64_t /*n_tok*/) {}

  // The output of layer `layer` (the residual stream after its MoE), [n_tok][n_embd]: the next
  // layer's input. A predictor may refine its guess of layer+1's experts with it.
  virtual void on_layer_output(int /*layer*/, const float* /*h*/, int64_t /*n_tok*/) {}

  // Makes the experts ids[0..n) of `layer` available and calls run(i, view) once for each i, on
  // the calling thread, in the order they become available. Views stay valid during run().
  virtual void with_experts(int layer, std::span<const int32_t> ids,
                            const std::function<void(size_t, const ExpertView&)>& run) = 0;

  // Called when a token (or batch) has been fully evaluated.
  virtual void on_token_done() {}

  // Called often on the thread that evaluates the model, while it computes (at the start of each
  // parallel product): a streaming source collects the reads that completed and starts the ones
  // queued behind them, so that the disk stays busy through the layers' dense work.
  virtual void service_io() {}

  // Expert bytes read from storage so far (0 for a resident source).
  virtual uint64_t bytes_read() const { return 0; }
};

// All experts mapped in memory: views point into the model's file image.
class ResidentExperts final : public ExpertSource {
 public:
  explicit ResidentExperts(const ModelWeights& w) : w_(w) {}
  void with_experts(int layer, std::span<const int32_t> ids,
                    const std::function<void(size_t, const ExpertView&)>& run) override {
    // Expert layer n_layer is the MTP block's (ModelWeights::layers holds the trunk only).
    const LayerWeights& L = static_cast<size_t>(layer) < w_.layers.size() ? w_.layers[static_cast<size_t>(layer)] : w_.mtp.block;
    for (size_t i = 0; i < ids.size(); ++i) {
      run(i, ExpertView{L.gate.expert(ids[i]), L.up.expert(ids[i]), L.down.expert(ids[i])});
    }
  }

 private:
  const ModelWeights& w_;
};

}  // namespace les
