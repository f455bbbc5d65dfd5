#include "les/cache/history_predictor.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "les/util/error.h"

namespace les::cache {

const char* history_mode_name(HistoryMode m) {
  switch (m) {
    case HistoryMode::transition: return "transition";
    case HistoryMode::recent: return "recent";
    case HistoryMode::combined: return "combined";
  }
  return "?";
}

Predictions predict_from_history(const RoutingTrace& tr, int depth, const HistoryOptions& o) {
  const int L = tr.n_layers, E = tr.n_experts, K = tr.top_k;
  if (depth < K || depth > E) throw Error(strfmt("predict_from_history: depth %d not in [%d, %d]", depth, K, E));
  if (!(o.half_life > 0)) throw Error("predict_from_history: the half-life must be > 0");
  Predictions p;
  p.n_tokens = tr.n_tokens;
  p.n_layers = L;
  p.depth = depth;
  p.ranked.assign(static_cast<size_t>(tr.n_tokens) * L * depth, 0);
  // counts[l][a][b]: layer l-1 expert a -> layer l expert b (l >= 1), scaled by `scale` so that
  // decaying is one multiplication per token: a count added at token t weighs growth^t.
  std::vector<double> counts(static_cast<size_t>(L) * E * E, 0.0);
  const double growth = std::exp(std::log(2.0) / o.half_life);
  double weight = 1.0;  // growth^t, renormalised when it grows large
  // last_use[l][e]: the last token at which layer l used e (-1: never).
  std::vector<int> last_use(static_cast<size_t>(L) * E, -1);
  std::vector<double> score(static_cast<size_t>(E));
  std::vector<int32_t> idx(static_cast<size_t>(E));
  size_t next_start = 1;
  for (int t = 0; t < tr.n_tokens; ++t) {
    if (o.reset_at_starts && next_start < tr.starts.size() && tr.starts[next_start] == t) {
      std::fill(counts.begin(), counts.end(), 0.0);
      std::fill(last_use.begin(), last_use.end(), -1);
      weight = 1.0;
      ++next_start;
    }
    if (weight > 1e100) {  // renormalise the decayed counts
      for (double& c : counts) c /= weight;
      weight = 1.0;
    }
    for (int l = 0; l < L; ++l) {
      const int* lu = last_use.data() + static_cast<size_t>(l) * E;
      double top = 0;
      std::fill(score.begin(), score.end(), 0.0);
      if (l > 0 && o.mode != HistoryMode::recent) {
        const int32_t* below = tr.selected(t, l - 1);
        for (int j = 0; j < K; ++j) {
          const double* row = counts.data() + (static_cast<size_t>(l) * E + below[j]) * E;
          for (int e = 0; e < E; ++e) score[static_cast<size_t>(e)] += row[e];
        }
        top = *std::max_element(score.begin(), score.end());
      }
      // Recency: tie-break for transition, the ranking for recent, a bonus for combined.
      for (int e = 0; e < E; ++e) {
        const double rec = lu[e] < 0 ? 0.0 : 1.0 / (1.0 + (t - lu[e]));  // 1/2 for the previous token
        if (o.mode == HistoryMode::recent || (l == 0)) score[static_cast<size_t>(e)] += rec;
        else if (o.mode == HistoryMode::combined) score[static_cast<size_t>(e)] += (top > 0 ? top : 1.0) * o.recent_bonus * 2 * rec;
        else score[static_cast<size_t>(e)] += 1e-12 * rec;
      }
      std::iota(idx.begin(), idx.end(), 0);
      std::partial_sort(idx.begin(), idx.begin() + depth, idx.end(), [&](int32_t a, int32_t b) {
        return score[static_cast<size_t>(a)] != score[static_cast<size_t>(b)] ? score[static_cast<size_t>(a)] > score[static_cast<size_t>(b)]
                                                                              : a < b;
      });
      std::copy(idx.begin(), idx.begin() + depth, p.ranked.begin() + (static_cast<ptrdiff_t>(t) * L + l) * depth);
    }
    // Learn from token t (after every prediction for it).
    for (int l = 0; l < L; ++l) {
      const int32_t* sel = tr.selected(t, l);
      for (int j = 0; j < K; ++j) last_use[static_cast<size_t>(l) * E + sel[j]] = t;
      if (l == 0) continue;
      const int32_t* below = tr.selected(t, l - 1);
      for (int a = 0; a < K; ++a) {
        double* row = counts.data() + (static_cast<size_t>(l) * E + below[a]) * E;
        for (int b = 0; b < K; ++b) row[sel[b]] += weight;
      }
    }
    weight *= growth;
  }
  return p;
}

double prediction_precision(const RoutingTrace& tr, const Predictions& pred, int m) {
  m = std::min(m, pred.depth);
  uint64_t hit = 0, total = 0;
  for (int t = 0; t < tr.n_tokens; ++t) {
    for (int l = 1; l < tr.n_layers; ++l) {
      const int32_t* sel = tr.selected(t, l);
      const int32_t* pr = pred.at(t, l);
      for (int j = 0; j < m; ++j) hit += std::find(sel, sel + tr.top_k, pr[j]) != sel + tr.top_k;
      total += static_cast<uint64_t>(m);
    }
  }
  return total ? static_cast<double>(hit) / static_cast<double>(total) : 0.0;
}

}  // namespace les::cache
