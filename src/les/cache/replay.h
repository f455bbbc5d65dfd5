// Cache simulator: replays a routing trace through a fixed-size expert cache driven by an
// EvictionPolicy, and Belady's offline optimum for reference.
//
// Replay semantics (the ones of the model README's routing statistics): one global cache over all
// (layer, expert) keys, cold start, accessed token by token, layer by layer, one access per
// selected expert in router order. An access to a resident key is a hit; otherwise it is a miss,
// the key is loaded (evicting a victim when the cache is full) and stays resident. By default
// every resident key is evictable (strictly sequential accesses, as the README's numbers were
// made); with protect_layer, all experts selected for the current layer are in use and not
// evictable while that layer runs (the engine's behaviour: it loads a layer's experts together).
//
// Optional, engine-like extras (off by default, reported separately):
//  - predictions: while layer l is routed, an (emulated) cross-layer predictor names its top-m
//    experts for layer l+1; they reach the policy through on_predict(). Layer 0 is never predicted.
//  - prefetch: predicted experts that are not resident are also loaded ahead of use (one
//    background read each; these are not demand accesses and do not count as hits or misses).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "les/cache/policy.h"
#include "les/cache/trace.h"

namespace les::cache {

// Emulated cross-layer predictions: for each (token, layer) a ranking of the layer's experts that
// a predictor running one layer earlier could produce. EMULATION, not a real predictor: derived
// from the true router probabilities of the same token (never other tokens) by adding seeded
// Gaussian noise to ln(prob). The noise is a two-level mixture per (token, layer): with
// probability hard_fraction the layer is "hard" (std-dev hard_sigma, the prediction is nearly
// useless), otherwise the std-dev is sigma. With hard_fraction 0.2 and hard_sigma 3, calibrating
// sigma to recall@4 = 0.696 gives recall@6 0.808 and recall@8 0.856, matching the README's real
// predictor A (0.696 / 0.805 / 0.855); plain Gaussian noise cannot match recall@8 (0.90).
struct PredictorModel {
  double sigma = 0.33;         // noise std-dev on ln(prob), easy layers
  double hard_fraction = 0.2;  // share of (token, layer) pairs that are hard
  double hard_sigma = 3.0;     // noise std-dev on hard pairs
  uint64_t seed = 1;
};

struct Predictions {
  int n_tokens = 0, n_layers = 0, depth = 0;   // depth = experts ranked per (token, layer)
  std::vector<int32_t> ranked;                 // [T][L][depth], best first; layer 0 rows unused
  PredictorModel model;
  const int32_t* at(int t, int l) const {
    return ranked.data() + (static_cast<size_t>(t) * n_layers + l) * depth;
  }
};

// Requires trace.has_probs(); 1 <= depth <= n_experts. Deterministic for a given model.
Predictions emulate_predictions(const RoutingTrace& trace, const PredictorModel& model, int depth);
// Emulated predictions for a trace without router probabilities (expert ids only): for each
// (token, layer) each selected expert is in the ranking's first K positions with probability
// `recall` (at a random one of them); a missed one lands in positions K..2K-1 with probability
// `recall` again, else further down; unselected experts, drawn uniformly, fill the other positions.
// So recall@K is `recall` in expectation and recall@2K about 1 - (1 - recall)^2, as a real
// predictor's recall grows with depth. EMULATION: uses only the same token's selection. Requires
// depth >= 2K when possible (depth <= n_experts).
Predictions emulate_predictions_at_recall(const RoutingTrace& trace, double recall, int depth, uint64_t seed);

// Fraction of layer l's true top-K found in the predicted top-m, averaged over layers 1..L-1.
double prediction_recall(const RoutingTrace& trace, const Predictions& pred, int m);
// Returns `model` with sigma set (by bisection) so that recall@4 is closest to the target.
PredictorModel calibrate_predictor(const RoutingTrace& trace, PredictorModel model, double target_recall_at_4);

struct ReplayOptions {
  size_t capacity = 0;                   // slots; must be >= top_k
  const Predictions* predictions = nullptr;
  int predict_m = 0;                     // experts per layer passed to on_predict (0 = none)
  bool prefetch = false;                 // also load the predicted experts ahead of use
  bool protect_layer = false;            // the current layer's selected experts are not evictable
};

struct ReplayStats {
  uint64_t accesses = 0;
  uint64_t hits = 0;
  uint64_t misses = 0;                   // demand loads
  uint64_t evictions = 0;
  uint64_t prefetches = 0;               // background loads (prefetch mode)
  uint64_t prefetch_unused = 0;          // prefetched experts evicted before any use
  std::vector<uint64_t> layer_accesses;  // [n_layers]: demand accesses of each layer (replay() only)
  std::vector<uint64_t> layer_misses;    // [n_layers]: demand loads of each layer (replay() only)
  double hit_rate() const { return accesses ? static_cast<double>(hits) / static_cast<double>(accesses) : 0.0; }
};

// Replays the trace through `policy` (fresh, empty). Throws les::Error if capacity < top_k or the
// policy returns a key that is not resident or not evictable.
ReplayStats replay(const RoutingTrace& trace, EvictionPolicy& policy, const ReplayOptions& opt);

// Belady's MIN: on a miss with a full cache, evict the resident key whose next use is furthest in
// the future (never-used-again first). Same access semantics as replay() without predictions.
ReplayStats replay_belady(const RoutingTrace& trace, size_t capacity, bool protect_layer = false);

}  // namespace les::cache
