// "lrfu": least recently/frequently used (Lee et al. 2001) with exponential decay. Each key has a
// combined recency-frequency value C(t) = sum over its past uses u of 2^(-(t - u) / H); the victim
// is the evictable resident key with the smallest C now. Values are kept for evicted keys too
// (bounded by the number of distinct keys), so a returning key remembers its history.
//
// Since all values decay at the same rate, the order is time-invariant in the log domain:
// P = log2(C(t)) + t / H does not change while a key is idle, so resident keys sit in an ordered
// set by P (O(log n) per call) and nothing is ever rescaled.
#include <algorithm>
#include <cmath>
#include <set>
#include <unordered_map>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class LrfuPolicy final : public EvictionPolicy {
 public:
  explicit LrfuPolicy(double half_life) : inv_h_(1.0 / half_life) {}
  void on_route(int, const int32_t*, int, uint64_t t) override { now_ = std::max(now_, t); }

  void on_insert(ExpertKey k, uint64_t t) override {
    bump(k, t);
    order_.insert({prio_[k], k});
  }
  void on_hit(ExpertKey k, uint64_t t) override {
    order_.erase({prio_[k], k});
    bump(k, t);
    order_.insert({prio_[k], k});
  }
  void on_evict(ExpertKey k) override {
    auto it = prio_.find(k);
    if (it != prio_.end()) order_.erase({it->second, k});
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    return scan_victim(order_, evictable, out, [this](ExpertKey k) { on_hit(k, now_); });
  }
  const char* name() const override { return "lrfu"; }

 private:
  // C <- C * 2^(-(t - t_last)/H) + 1, in the log domain: P <- t/H + log2(2^(P - t/H) + 1).
  void bump(ExpertKey k, uint64_t t) {
    if (t > now_) now_ = t;
    const double base = static_cast<double>(t) * inv_h_;
    auto it = prio_.find(k);
    if (it == prio_.end()) {
      prio_.emplace(k, base);  // log2(1) + t/H
    } else {
      it->second = base + std::log2(std::exp2(it->second - base) + 1.0);
    }
  }

  double inv_h_;
  uint64_t now_ = 0;
  std::unordered_map<ExpertKey, double> prio_;  // every key seen (resident or not)
  std::set<std::pair<double, ExpertKey>> order_;  // resident keys by priority
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lrfu(const PolicyParams& p) {
  // Default half-life: 24 tokens' worth of accesses (best on the tiny model's trace at 10%, 25%
  // and 50% capacity: 768 accesses = 24 tokens x 8 layers x top-4).
  double h = p.half_life;
  if (h <= 0) h = p.n_layers > 0 && p.top_k > 0 ? 24.0 * p.n_layers * p.top_k : 768.0;
  return std::make_unique<LrfuPolicy>(h);
}

}  // namespace les::cache
