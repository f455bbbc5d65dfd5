// "<base>+pred": prediction-aware wrapper around any policy.
//  - on_predict(k, t) marks k as expected until it is used (on_hit) or the prediction expires at
//    t + ttl. While a prediction is pending, k is protected: victim() first asks the base policy
//    for a victim among the evictable keys that are not protected.
//  - A key inserted while its prediction is pending and that was not routed (a prefetch, as
//    opposed to a demand load of a routed key) and that is not used before the prediction
//    expires was a wrong guess: it becomes the first victim (oldest first), whatever rank the
//    base policy gave it when it was inserted.
//  - Only if neither yields a victim does the base policy choose among all evictable keys.
// Everything else is forwarded to the base policy. Per call O(1) amortised plus the base cost.
#include <deque>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class PredictAware final : public EvictionPolicy {
 public:
  PredictAware(std::unique_ptr<EvictionPolicy> base, uint64_t ttl)
      : base_(std::move(base)), ttl_(ttl), name_(std::string(base_->name()) + "+pred") {}

  void on_insert(ExpertKey k, uint64_t t) override {
    advance(t);
    auto it = pending_.find(k);
    if (routed_.erase(k) != 0) {
      if (it != pending_.end()) pending_.erase(it);  // demand load: used now
    } else if (it != pending_.end()) {
      it->second.prefetched = true;
      stale_queue_.push_back({it->second.expiry, k});
    }
    base_->on_insert(k, t);
  }
  void on_hit(ExpertKey k, uint64_t t) override {
    advance(t);
    routed_.erase(k);
    pending_.erase(k);
    stale_.erase(k);
    base_->on_hit(k, t);
  }
  void on_evict(ExpertKey k) override {
    pending_.erase(k);
    stale_.erase(k);
    base_->on_evict(k);
  }
  void on_route(int layer, const int32_t* experts, int k, uint64_t t) override {
    advance(t);
    if (routed_.size() > 4096) routed_.clear();  // keys routed but never looked up: contract breach
    for (int i = 0; i < k; ++i) routed_.insert(make_key(layer, experts[i]));
    base_->on_route(layer, experts, k, t);
  }
  void on_predict(ExpertKey k, uint64_t t) override {
    advance(t);
    Pending& p = pending_[k];
    p.expiry = t + ttl_;
    if (stale_.contains(k)) {  // a wrong guess predicted again: pending (and prefetched) once more
      stale_.erase(k);
      p.prefetched = true;
    }
    if (p.prefetched) stale_queue_.push_back({p.expiry, k});
    base_->on_predict(k, t);
    if (pending_.size() > 64 + 4 * live_hint_) purge();
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    // 1. Wrong guesses (prefetched, never used, prediction expired), oldest first.
    if (!stale_.empty() && stale_.find_victim(evictable, out, 2 * kFreeSkips)) return true;
    // 2. The base policy's choice among unprotected keys.
    if (!pending_.empty()) {
      auto unprotected = [&](ExpertKey k) {
        if (!evictable(k)) return false;
        auto it = pending_.find(k);
        return it == pending_.end() || it->second.expiry < now_;
      };
      if (base_->victim(unprotected, out)) return true;
    }
    // 3. Anything evictable.
    return base_->victim(evictable, out);
  }
  const char* name() const override { return name_.c_str(); }

 private:
  struct Pending {
    uint64_t expiry = 0;
    bool prefetched = false;  // inserted while pending, not used since
  };

  // Moves expired predictions out of pending_; expired prefetched ones become stale.
  void advance(uint64_t t) {
    if (t > now_) now_ = t;
    while (!stale_queue_.empty() && stale_queue_.front().first < now_) {
      const ExpertKey k = stale_queue_.front().second;
      stale_queue_.pop_front();
      auto it = pending_.find(k);
      if (it != pending_.end() && it->second.prefetched && it->second.expiry < now_) {
        pending_.erase(it);
        stale_.push_front(k);
      }
    }
  }
  // Drops expired predictions of keys that were not prefetched (they need no further action).
  void purge() {
    size_t live = 0;
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (it->second.expiry < now_ && !it->second.prefetched) {
        it = pending_.erase(it);
      } else {
        ++live;
        ++it;
      }
    }
    live_hint_ = live;
  }

  std::unique_ptr<EvictionPolicy> base_;
  uint64_t ttl_;
  uint64_t now_ = 0;
  size_t live_hint_ = 0;
  std::unordered_map<ExpertKey, Pending> pending_;
  std::deque<std::pair<uint64_t, ExpertKey>> stale_queue_;  // (expiry, key) of prefetched keys
  std::unordered_set<ExpertKey> routed_;  // routed, not looked up yet
  KeyList stale_;                         // wrong guesses, oldest at the back
  std::string name_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_predict_aware(std::unique_ptr<EvictionPolicy> base, const PolicyParams& p) {
  // Default: a prediction for layer l+1 made while layer l runs lives through both layers.
  uint64_t ttl = p.top_k > 0 ? 2 * static_cast<uint64_t>(p.top_k) : 8;
  if (p.predict_ttl > 0) ttl = static_cast<uint64_t>(p.predict_ttl);
  return std::make_unique<PredictAware>(std::move(base), ttl);
}

}  // namespace les::cache
