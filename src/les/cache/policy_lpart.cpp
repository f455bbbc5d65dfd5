// "lpart": layer-partitioned LRU with shares that follow each layer's measured reuse. Each layer
// keeps its own LRU list and a ghost list of its recently evicted keys. A layer's utility is a
// decayed count of its hits plus its ghost hits (misses a larger share would have turned into
// hits); the victim is the LRU key of the layer holding the most slots per unit of utility, so
// layers with little reuse (e.g. layers 1-3 of the tiny model) shrink and high-reuse layers grow.
// victim() costs O(layers) (plus the skips of KeyList; O(layers log layers) when the preferred
// layer has nothing evictable).
#include <algorithm>
#include <cmath>
#include <memory>
#include <vector>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class LpartPolicy final : public EvictionPolicy {
 public:
  LpartPolicy(size_t capacity, double half_life) : capacity_(capacity), inv_h_(1.0 / half_life) {}

  void on_insert(ExpertKey k, uint64_t) override {
    Layer& L = layer(key_layer(k));
    tick();
    if (L.ghost.contains(k)) {
      L.ghost.erase(k);
      credit(L);
    }
    L.lru.push_front(k);
  }
  void on_hit(ExpertKey k, uint64_t) override {
    Layer& L = layer(key_layer(k));
    tick();
    credit(L);
    L.lru.touch(k);
  }
  void on_evict(ExpertKey k) override {
    Layer& L = layer(key_layer(k));
    if (!L.lru.contains(k)) return;
    L.lru.erase(k);
    L.ghost.push_front(k);
    // Ghosts cover the slots this layer could gain: up to a quarter of the cache.
    while (L.ghost.size() > std::max<size_t>(4, capacity_ / 4)) L.ghost.pop_back();
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    // Layers by slots per utility, largest first; the first with an evictable key gives the victim
    // (bounded scans first, so a layer whose LRU end is blocked does not cost O(n) per call).
    std::vector<std::pair<double, size_t>> order;
    order.reserve(layers_.size());
    for (size_t i = 0; i < layers_.size(); ++i) {
      const Layer& L = *layers_[i];
      if (L.lru.empty()) continue;
      const double util = L.utility * std::exp2(-static_cast<double>(clock_ - L.stamp) * inv_h_) + 1e-3;
      order.push_back({static_cast<double>(L.lru.size()) / util, i});
    }
    auto better = [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first > b.first : a.second < b.second;
    };
    if (order.empty()) return false;
    auto best = std::min_element(order.begin(), order.end(), better);
    if (layers_[best->second]->lru.find_victim(evictable, out, 2 * kFreeSkips)) return true;
    std::sort(order.begin(), order.end(), better);
    for (size_t limit : {2 * kFreeSkips, SIZE_MAX}) {
      for (const auto& o : order) {
        if (layers_[o.second]->lru.find_victim(evictable, out, limit)) return true;
      }
    }
    return false;
  }
  const char* name() const override { return "lpart"; }

 private:
  struct Layer {
    KeyList lru, ghost;
    double utility = 0;  // decayed as of `stamp`
    uint64_t stamp = 0;
  };
  Layer& layer(int l) {
    while (layers_.size() <= static_cast<size_t>(l)) layers_.push_back(std::make_unique<Layer>());
    return *layers_[static_cast<size_t>(l)];
  }
  void tick() { ++clock_; }
  void credit(Layer& L) {
    L.utility = L.utility * std::exp2(-static_cast<double>(clock_ - L.stamp) * inv_h_) + 1.0;
    L.stamp = clock_;
  }

  size_t capacity_;
  double inv_h_;
  uint64_t clock_ = 0;
  std::vector<std::unique_ptr<Layer>> layers_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lpart(const PolicyParams& p) {
  require_capacity(p, "lpart");
  return std::make_unique<LpartPolicy>(p.capacity, p.half_life > 0 ? p.half_life : 4096.0);
}

}  // namespace les::cache
