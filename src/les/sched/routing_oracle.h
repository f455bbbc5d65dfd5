// The routing of one run, recorded for replay as a perfect predictor (a measuring instrument, not
// a production predictor).
//
// A run that evaluates the same tokens again meets the same routing (logits are bit-identical
// across schedules), so the experts layer l selected at step s of a recorded run are exactly
// what a later run will select there. Replayed as the lookahead's guess, they show how fast the
// schedule could be with a predictor that is never wrong, on this disk and at this lookahead
// depth: the gap between the oracle and the real predictor is the predictor's share of the
// shortfall, the gap between the oracle and the ceiling the pipeline's.
//
// A step is one forward call (one token while decoding; a whole batch while prefilling).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

namespace les {

class RoutingOracle {
 public:
  explicit RoutingOracle(int n_layer) : n_layer_(n_layer) {}
  // Stores layer's selection at step (replacing an earlier record of the same step and layer).
  void record(int64_t step, int layer, std::span<const int32_t> ids);
  // The recorded selection, or nullptr if that step and layer were not recorded.
  const std::vector<int32_t>* lookup(int64_t step, int layer) const;
  int64_t steps() const { return static_cast<int64_t>(steps_.size()); }
  int n_layer() const { return n_layer_; }

  // The recording as plain integers (to cross a pipe): n_layer, steps, then per step and layer
  // the count of ids (-1: not recorded) and the ids.
  std::vector<int32_t> flatten() const;
  // The inverse; throws les::Error on a malformed sequence.
  static RoutingOracle unflatten(std::span<const int32_t> flat);

 private:
  int n_layer_;
  std::vector<std::vector<std::vector<int32_t>>> steps_;  // [step][layer] -> expert ids
  std::vector<std::vector<uint8_t>> have_;                // [step][layer]
};

}  // namespace les
