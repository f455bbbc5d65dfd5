#include "les/spec/depth.h"

#include <algorithm>
#include <cmath>

#include "les/util/error.h"

namespace les {

DepthController::DepthController(const DepthParams& p) : p_(p) {
  if (p_.k_max < 0) throw Error(strfmt("--draft-max must be >= 0 (got %d)", p_.k_max));
  if (p_.k_min < 0 || p_.k_min > p_.k_max) {
    throw Error(strfmt("--draft-min must be in [0, --draft-max = %d] (got %d)", p_.k_max, p_.k_min));
  }
  t_verify_.assign(static_cast<size_t>(p_.k_max) + 2, -1.0);
  n_verify_.assign(static_cast<size_t>(p_.k_max) + 2, 0);
  probe_interval_ = std::max(1, p_.probe_every);
  t_draft_.assign(static_cast<size_t>(p_.k_max) + 1, -1.0);
  t_draft_[0] = 0.0;
  acc_n_.assign(static_cast<size_t>(p_.k_max) + 1, 0.0);
  acc_d_.assign(static_cast<size_t>(p_.k_max) + 1, 0.0);
}

double DepthController::acceptance(int pos) const {
  // prior: 1 accepted of 2 drafted (a neutral 0.5 that two rounds of evidence outweigh)
  const size_t i = static_cast<size_t>(pos);
  return (acc_n_[i] + 1.0) / (acc_d_[i] + 2.0);
}

double DepthController::expected_tokens(int k, const std::vector<float>* confidence) const {
  double e = 1.0, run = 1.0;
  for (int i = 1; i <= k; ++i) {
    const bool have_conf = confidence && static_cast<size_t>(i) <= confidence->size();
    run *= have_conf ? std::clamp(static_cast<double>((*confidence)[static_cast<size_t>(i) - 1]), 0.0, 1.0)
                     : acceptance(i);
    e += run;
  }
  return e;
}

// Linear interpolation between the nearest measured entries; beyond the last measured one the
// slope of the last two (or proportional growth from one) extends it.
double DepthController::estimate(const std::vector<double>& v, int i) const {
  const int n = static_cast<int>(v.size());
  if (v[static_cast<size_t>(i)] >= 0) return v[static_cast<size_t>(i)];
  int lo = i - 1, hi = i + 1;
  while (lo >= 0 && v[static_cast<size_t>(lo)] < 0) --lo;
  while (hi < n && v[static_cast<size_t>(hi)] < 0) ++hi;
  if (lo >= 0 && hi < n) {
    const double f = static_cast<double>(i - lo) / (hi - lo);
    return v[static_cast<size_t>(lo)] * (1 - f) + v[static_cast<size_t>(hi)] * f;
  }
  if (lo >= 0) {
    int lo2 = lo - 1;
    while (lo2 >= 0 && v[static_cast<size_t>(lo2)] < 0) --lo2;
    const double slope = lo2 >= 0 ? (v[static_cast<size_t>(lo)] - v[static_cast<size_t>(lo2)]) / (lo - lo2)
                                  : v[static_cast<size_t>(lo)] / std::max(lo, 1) * 0.5;
    return v[static_cast<size_t>(lo)] + std::max(slope, 0.0) * (i - lo);
  }
  if (hi < n) return v[static_cast<size_t>(hi)];
  return -1;
}

double DepthController::verify_seconds(int n) const { return estimate(t_verify_, n); }
double DepthController::rate(int k, const std::vector<float>* confidence) const {
  return expected_tokens(k, confidence) / (draft_seconds(k) + verify_seconds(k + 1));
}
double DepthController::draft_seconds(int k) const { return std::max(estimate(t_draft_, k), 0.0); }

int DepthController::choose(const std::vector<float>* confidence) {
  if (p_.k_max == 0 || gave_up_) return 0;
  if (!p_.adaptive) return p_.k_max;
  if (t_verify_[1] < 0) return 0;  // measure a plain step first: everything is compared with it
  const double t1 = t_verify_[1];
  // Speculation must beat a plain step by a margin: the estimates are noisy, and a depth that
  // only ties costs memory traffic and drafting for nothing.
  const double plain_rate = p_.margin * (1.0 + memory_cost_) / t1;
  // The shallowest depth is measured first. Where experts stream, a round of k_max + 1 positions
  // reads the union of their experts (several steps' reads), so a first full-depth round is
  // dear exactly where speculation does not pay; and where the shallowest depth does not pay,
  // deeper ones (extrapolated from it) are left to the probes.
  const int k_first = std::max(p_.k_min, 1);
  if (t_verify_[static_cast<size_t>(k_first) + 1] < 0) return k_first;
  // Once it pays, one full-depth round measures the acceptance of every position and the
  // dearest verification; depths between are interpolated until they are measured themselves.
  if (t_verify_[static_cast<size_t>(p_.k_max) + 1] < 0 && rate(k_first, confidence) > plain_rate) return p_.k_max;
  int best = 0, second = -1;
  double best_rate = plain_rate, second_rate = -1;
  for (int k = std::max(p_.k_min, 1); k <= p_.k_max; ++k) {
    const double r = rate(k, confidence);
    if (r > best_rate) {
      second = best;
      second_rate = best_rate;
      best_rate = r;
      best = k;
    } else if (r > second_rate) {
      second = k;
      second_rate = r;
    }
  }
  // Every probe_every rounds a plain step (or, when it wins, the runner-up) runs once, so that the estimates of the choice not
  // taken (a plain step's time included) follow the machine's load and the text.
  // While plain steps win, each probe that confirms it doubles the interval (up to 16x): a probe
  // round costs a drafting pass and a dearer verification, which adds up when it keeps losing.
  if (best != 0) {
    probe_interval_ = p_.probe_every;
    lost_probes_ = 0;
  }
  if (++rounds_since_probe_ >= probe_interval_) {
    rounds_since_probe_ = 0;
    if (best != 0) return 0;           // a plain step: the measure everything is compared with
    if (second >= 0) {
      // Plain steps still win at this probe: the previous probes (if any) all lost.
      if (p_.give_up_after > 0 && lost_probes_ >= p_.give_up_after) {
        gave_up_ = true;
        return 0;
      }
      ++lost_probes_;
      probe_interval_ = std::min(probe_interval_ * 2, p_.probe_every * 16);
      return second;
    }
  }
  return best;
}

int DepthController::trim(int drafted, double draft_s, const std::vector<float>& confidence) const {
  if (!p_.adaptive || drafted <= 0 || drafted > p_.k_max || t_verify_[1] < 0) return drafted;
  if (t_verify_[static_cast<size_t>(drafted) + 1] < 0) return drafted;  // exploring this depth: measure it
  int best = 0;
  double best_rate = -1;
  for (int j = 0; j <= drafted && j <= p_.k_max; ++j) {
    const double tv = verify_seconds(j + 1);
    if (tv <= 0) return drafted;  // unmeasured: verify all and measure
    const double rate = expected_tokens(j, &confidence) / (draft_s + tv);
    if (rate > best_rate) {
      best_rate = rate;
      best = j;
    }
  }
  return best;
}

void DepthController::record_draft(int k, double seconds) {
  if (k <= 0 || k > p_.k_max) return;
  double& t = t_draft_[static_cast<size_t>(k)];
  t = t < 0 ? seconds : t + p_.ema * (seconds - t);
}

void DepthController::record_verify(int n, double seconds) {
  if (n < 1 || n > p_.k_max + 1) return;
  double& t = t_verify_[static_cast<size_t>(n)];
  int& c = n_verify_[static_cast<size_t>(n)];
  // The first pass of a depth is often cold (caches, page faults): the second replaces it.
  t = c < 2 ? seconds : t + p_.ema * (seconds - t);
  ++c;
}

void DepthController::record_round(int drafted, int accepted) {
  // Older rounds fade (the text, and so the acceptance, changes as generation goes on).
  for (size_t i = 0; i < acc_n_.size(); ++i) {
    acc_n_[i] *= p_.decay;
    acc_d_[i] *= p_.decay;
  }
  // Position i is evidence only if every earlier one was accepted (conditional acceptance).
  for (int i = 1; i <= drafted && i <= p_.k_max; ++i) {
    acc_d_[static_cast<size_t>(i)] += 1;
    if (i <= accepted) {
      acc_n_[static_cast<size_t>(i)] += 1;
    } else {
      break;
    }
  }
}

}  // namespace les
