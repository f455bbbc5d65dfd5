#include "les/spec/accept.h"

#include <algorithm>
#include <unordered_map>

#include "les/util/error.h"

namespace les {

double prob_of(const std::vector<TokenProb>& dist, int32_t id) {
  for (const TokenProb& t : dist) {
    if (t.id == id) return t.p;
  }
  return 0.0;
}

AcceptResult accept_or_resample(const std::vector<TokenProb>& p, int32_t d, const std::vector<TokenProb>& q, Rng& rng) {
  if (p.empty()) throw Error("speculative acceptance: empty target distribution");
  const double pd = prob_of(p, d);
  const double qd = q.empty() ? 1.0 : prob_of(q, d);
  if (pd > 0.0) {
    if (qd <= pd) return {true, d};          // min(1, p/q) = 1: no draw needed
    if (rng.uniform() * qd < pd) return {true, d};
  }
  // Residual max(0, p - q), in p's order (the draw order of the target's sampler).
  std::vector<TokenProb> res;
  res.reserve(p.size());
  double sum = 0.0;
  if (q.empty()) {
    for (const TokenProb& t : p) {
      if (t.id != d && t.p > 0.0) {
        res.push_back(t);
        sum += t.p;
      }
    }
  } else {
    std::unordered_map<int32_t, double> qm;
    qm.reserve(q.size() * 2);
    for (const TokenProb& t : q) qm[t.id] = t.p;
    for (const TokenProb& t : p) {
      const auto it = qm.find(t.id);
      const double r = t.p - (it == qm.end() ? 0.0 : it->second);
      if (r > 0.0) {
        res.push_back({t.id, r});
        sum += r;
      }
    }
  }
  if (res.empty() || sum <= 0.0) return {false, p.front().id};  // p == q up to rounding: p's mode
  if (res.size() == 1) return {false, res.front().id};          // greedy targets draw nothing
  const double u = rng.uniform() * sum;
  double cum = 0.0;
  for (const TokenProb& t : res) {
    cum += t.p;
    if (u < cum) return {false, t.id};
  }
  return {false, res.back().id};
}

}  // namespace les
