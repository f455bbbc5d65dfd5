// "lfu": least frequently used with dynamic aging (LFU-DA, Arlitt et al. 2000). A resident key's
// value is K = L + n, where n counts its uses since it became resident and L is the cache age:
// the value of the last key evicted. New keys therefore start at L + 1 and can outlive old keys
// whose counts were earned long ago, which is the aging that plain LFU lacks. The victim is the
// evictable key with the smallest K, the least recently used first among equal values.
#include <set>
#include <algorithm>
#include <unordered_map>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class LfuPolicy final : public EvictionPolicy {
 public:
  void on_insert(ExpertKey k, uint64_t t) override {
    now_ = std::max(now_, t);
    Entry& e = entries_[k];
    e.value = age_ + 1;
    e.seq = ++seq_;
    order_.insert({{e.value, e.seq}, k});
  }
  void on_hit(ExpertKey k, uint64_t t) override {
    now_ = std::max(now_, t);
    auto it = entries_.find(k);
    if (it == entries_.end()) return;
    Entry& e = it->second;
    order_.erase({{e.value, e.seq}, k});
    e.value += 1;
    e.seq = ++seq_;
    order_.insert({{e.value, e.seq}, k});
  }
  void on_evict(ExpertKey k) override {
    auto it = entries_.find(k);
    if (it == entries_.end()) return;
    order_.erase({{it->second.value, it->second.seq}, k});
    if (it->second.value > age_) age_ = it->second.value;
    entries_.erase(it);
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    return scan_victim(order_, evictable, out, [this](ExpertKey k) { on_hit(k, now_); });
  }
  const char* name() const override { return "lfu"; }

 private:
  struct Entry {
    uint64_t value = 0;
    uint64_t seq = 0;  // recency tie-break
  };
  using Rank = std::pair<uint64_t, uint64_t>;
  uint64_t age_ = 0;
  uint64_t seq_ = 0;
  uint64_t now_ = 0;
  std::unordered_map<ExpertKey, Entry> entries_;
  std::set<std::pair<Rank, ExpertKey>> order_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lfu(const PolicyParams&) { return std::make_unique<LfuPolicy>(); }

}  // namespace les::cache
