// Predicting layer l's experts from routing history alone (no hidden states): what the engine
// could add to its cross-layer predictor. Online and causal: a prediction for (token t, layer l)
// uses only the selections made before it (earlier tokens, and token t's layers below l), and the
// statistics are updated after it.
//
//   transition: counts of "expert a at layer l-1 and expert b at layer l for the same token",
//     learned as the trace runs; layer l's ranking is the sum of the rows of token t's layer l-1
//     selection (decayed with a half-life in tokens, so a conversation's pattern dominates).
//   recent: the experts layer l used for the latest tokens, most recent first (the temporal
//     locality a cache already has).
//   combined: transition scores, plus a bonus for the previous token's experts at layer l.
#pragma once

#include <cstdint>
#include <string>

#include "les/cache/replay.h"
#include "les/cache/trace.h"

namespace les::cache {

enum class HistoryMode { transition, recent, combined };
const char* history_mode_name(HistoryMode m);

struct HistoryOptions {
  HistoryMode mode = HistoryMode::combined;
  double half_life = 256;      // tokens: the transition counts' decay
  double recent_bonus = 0.5;   // combined: the previous token's experts' bonus, in units of the
                               // layer's largest transition score
  bool reset_at_starts = false;  // forget the statistics at each sequence start
};

// Rankings of `depth` experts for every (token, layer >= 1); layer 0 rows are left as ranked by
// recency only (no layer below). depth in [K, n_experts].
Predictions predict_from_history(const RoutingTrace& trace, int depth, const HistoryOptions& o);

// Precision of the top-m: the share of predicted experts that were selected (layers 1..L-1).
double prediction_precision(const RoutingTrace& trace, const Predictions& pred, int m);

}  // namespace les::cache
