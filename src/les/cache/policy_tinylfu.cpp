// "tinylfu": W-TinyLFU (Einziger, Friedman & Manes, 2017). New keys enter an LRU window; the
// main area is a segmented LRU (probation, and protected = 80% of the main area). When the
// window is over its share, its LRU key competes with the main area's victim: whichever was used
// more often recently stays, so one-hit keys are not admitted into the main area. Frequencies are
// exact per-key counters (the key space of an MoE is small, so no count-min sketch is needed),
// incremented on every use and all halved every 10 x capacity uses (TinyLFU's reset aging).
// Window share: half the cache. Caffeine's 1% window fails at small caches here: a key's next use
// is at least a token (top_k x layers accesses) away, so a small window never hits and the
// frequency contest, mostly ties between counts of 0-2, rejects nearly every newcomer (tiny-model
// trace, 51 slots: window 1% -> 0.092 hits, 20% -> 0.077, 50% -> 0.237, 80% -> 0.183).
#include <algorithm>
#include <unordered_map>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class TinyLfuPolicy final : public EvictionPolicy {
 public:
  explicit TinyLfuPolicy(size_t capacity)
      : window_cap_(std::max<size_t>(1, capacity / 2)),
        main_cap_(capacity - std::min(capacity, window_cap_)),
        protected_cap_(std::max<size_t>(1, main_cap_ * 4 / 5)),
        sample_(std::max<size_t>(16, 10 * capacity)) {}

  void on_insert(ExpertKey k, uint64_t) override {
    count(k);
    window_.push_front(k);
    // While the main area has room, the window's overflow moves there without a contest.
    while (window_.size() > window_cap_ && probation_.size() + protected_.size() < main_cap_) {
      probation_.push_front(window_.pop_back());
    }
  }
  void on_hit(ExpertKey k, uint64_t) override {
    count(k);
    if (window_.contains(k)) {
      window_.touch(k);
    } else if (probation_.contains(k)) {
      probation_.erase(k);
      protected_.push_front(k);
      while (protected_.size() > protected_cap_) probation_.push_front(protected_.pop_back());
    } else if (protected_.contains(k)) {
      protected_.touch(k);
    }
  }
  void on_evict(ExpertKey k) override {
    window_.erase(k);
    probation_.erase(k);
    protected_.erase(k);
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    constexpr size_t kScan = 2 * kFreeSkips;
    ExpertKey main_victim = 0;
    const bool have_main = probation_.find_victim(evictable, &main_victim, kScan) ||
                           protected_.find_victim(evictable, &main_victim, kScan);
    if (window_.size() > window_cap_ || !have_main) {
      ExpertKey cand = 0;
      if (window_.find_victim(evictable, &cand, kScan)) {
        if (!have_main || freq(cand) <= freq(main_victim)) {
          *out = cand;  // not admitted
          return true;
        }
        window_.erase(cand);  // admitted: the main area's victim leaves instead
        probation_.push_front(cand);
      }
    }
    if (have_main) {
      *out = main_victim;
      return true;
    }
    // Every list's eviction end is blocked by non-evictable keys: full scans.
    return find_victim_in({&probation_, &protected_, &window_}, evictable, out);
  }
  const char* name() const override { return "tinylfu"; }

 private:
  void count(ExpertKey k) {
    ++freq_[k];
    if (++events_ >= sample_) {
      events_ = 0;
      for (auto it = freq_.begin(); it != freq_.end();) {
        it->second /= 2;
        it = it->second == 0 ? freq_.erase(it) : std::next(it);
      }
    }
  }
  uint32_t freq(ExpertKey k) const {
    auto it = freq_.find(k);
    return it == freq_.end() ? 0 : it->second;
  }

  size_t window_cap_, main_cap_, protected_cap_, sample_;
  size_t events_ = 0;
  KeyList window_, probation_, protected_;
  std::unordered_map<ExpertKey, uint32_t> freq_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_tinylfu(const PolicyParams& p) {
  require_capacity(p, "tinylfu");
  return std::make_unique<TinyLfuPolicy>(p.capacity);
}

}  // namespace les::cache
