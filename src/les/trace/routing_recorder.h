// Records a model's routing while it runs, in the .npy layout the cache replays and
// bench_cache_policy read (cache/trace.h): `les trace` over a text, `les run --trace-routing`.
//
// Files written (atomically) for PREFIX:
//   PREFIX.routing-experts.npy   u1 (u2 above 256 experts) [T][L][K]: selected experts, router order
//   PREFIX.routing-weights.npy   f2 [T][L][K]: their weights
//   PREFIX.routing-probs.npy     f2 [T][L][E]: the router's softmax (with_probs only)
//   PREFIX.routing-tokens.npy    i4 [T]: the input tokens
//   PREFIX.sequence-starts.npy   i8 [S]: the first token of each sequence
// L counts the layers with a router (the MoE layers), in order.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "les/model/context.h"

namespace les {

class RoutingRecorder {
 public:
  RoutingRecorder(const ModelConfig& c, bool with_probs);
  // Records every forward call of `ctx` from now on (its routing observer).
  void attach(Context& ctx);
  // The tokens of the next forward calls begin a new sequence (each eval from an empty context).
  void start_sequence();
  // The input tokens, in the order they were evaluated (appended to what was given before).
  void add_tokens(std::span<const int32_t> tokens);
  int n_tokens() const;  // rows recorded (every layer has the same count once a call finishes)
  // Throws les::Error when the layers disagree on the token count or the tokens given do not
  // match the rows recorded.
  void save(const std::string& prefix) const;

 private:
  int n_expert_ = 0, k_ = 0;
  bool with_probs_ = false;
  bool sigmoid_ = false;  // sigmoid gating: probabilities are per-expert sigmoids, not a softmax
  std::vector<int> layer_slot_;                 // [n_layer]: the trace's layer index, -1 without a router
  int n_moe_ = 0;
  std::vector<std::vector<int32_t>> ids_;       // per MoE layer: [T][K]
  std::vector<std::vector<uint16_t>> weights_;  // per MoE layer: [T][K] fp16
  std::vector<std::vector<uint16_t>> probs_;    // per MoE layer: [T][E] fp16
  std::vector<int32_t> tokens_;
  std::vector<int64_t> starts_;
};

}  // namespace les
