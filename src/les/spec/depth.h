// Load-aware speculation depth: before each verification choose k (0 = a plain decode step)
// maximising expected committed tokens per second,
//     E(k) / (t_draft(k) + t_verify(k + 1)),   E(k) = 1 + sum_{i<=k} prod_{j<=i} a_j,
// where a_j is the measured acceptance of draft position j given the earlier ones were accepted
// (or the drafter's confidence for this round), and t_verify(n) is the measured time of a target
// pass over n positions under the current load: with streamed experts it holds the reads of the
// union of the positions' missing experts at the measured disk speed, resident it is compute.
// Costs are exponential moving averages per n; an unmeasured n is interpolated from measured
// neighbours. Every `probe_every` rounds the runner-up (a plain step when speculation wins, a
// speculative round when it does not) runs once, so both estimates follow the load and the text.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace les {

struct DepthParams {
  int k_max = 8;           // --draft-max
  int k_min = 0;           // --draft-min: a round drafts at least this many or none
  bool adaptive = true;    // false: always k_max
  int probe_every = 24;    // rounds between runs of the runner-up depth
  double ema = 0.25;       // weight of a new cost measurement
  double decay = 0.98;     // per round, of the acceptance counts
  double margin = 1.05;    // a depth k > 0 is chosen only if its expected rate beats a plain step's by this
  // Give speculation up for good after this many probes of the runner-up in a row that left plain
  // steps ahead (0: never). The caller then releases the drafter (its memory goes back to the
  // expert cache, its observers stop costing). Probes double their interval while they lose, so
  // 3 means about 24 + 48 + 96 + 192 rounds without a win.
  int give_up_after = 3;
};

class DepthController {
 public:
  explicit DepthController(const DepthParams& p);

  // k for the next round: 0 (plain step) or k_min..k_max. confidence: the drafter's per-position
  // estimates for this round, if it has them (used instead of the measured acceptance).
  int choose(const std::vector<float>* confidence = nullptr);
  void record_draft(int k, double seconds);
  void record_verify(int n_positions, double seconds);
  // Given a drafted block (its cost already paid) and the drafter's per-token confidence, the
  // prefix length (0..drafted) worth verifying: argmax E(j) / (draft_s + t_verify(j + 1)).
  int trim(int drafted, double draft_s, const std::vector<float>& confidence) const;
  // A round drafted `drafted` tokens and the target accepted the first `accepted` of them.
  void record_round(int drafted, int accepted);

  // Whether speculation was given up (choose() then always returns 0).
  bool gave_up() const { return gave_up_; }
  // The share of the expert cache the drafter's memory withholds while it is held (0 when
  // resident or released). Plain steps on the full cache would be faster than the plain steps this
  // controller measures, by up to about this share, so speculation must also beat that:
  // a depth k > 0 needs margin x (1 + share) over a measured plain step.
  void set_memory_cost(double cache_share) { memory_cost_ = cache_share > 0 ? cache_share : 0; }

  double acceptance(int pos) const;          // a_pos (1-based), measured with a prior
  double expected_tokens(int k, const std::vector<float>* confidence = nullptr) const;
  double verify_seconds(int n) const;         // estimate of t_verify(n)
  double draft_seconds(int k) const;          // estimate of t_draft(k)
  double rate(int k, const std::vector<float>* confidence = nullptr) const;  // E(k) / (t_draft(k) + t_verify(k + 1))
  const DepthParams& params() const { return p_; }

 private:
  double estimate(const std::vector<double>& v, int i) const;

  DepthParams p_;
  std::vector<double> t_verify_, t_draft_;    // [n], [k]; < 0: not measured
  std::vector<int> n_verify_;                 // [n]: passes measured
  std::vector<double> acc_n_, acc_d_;         // per position: accepted / drafted counts
  int rounds_since_probe_ = 0;
  int lost_probes_ = 0;                       // probes in a row after which plain steps still won
  double memory_cost_ = 0;
  bool gave_up_ = false;
  int probe_interval_ = 24;
};

}  // namespace les
