// "arc": Adaptive Replacement Cache (Megiddo & Modha, FAST 2003). T1 holds keys used once since
// they became resident, T2 keys used at least twice; ghost lists B1/B2 remember keys recently
// evicted from T1/T2. A returning ghost moves the target size p of T1 (B1 hit: grow p; B2 hit:
// shrink p) and is inserted into T2. The victim is T1's LRU key if |T1| > p (or T2 has no
// evictable key), otherwise T2's LRU key.
//
// Adaptation to this interface: ARC's REPLACE runs after it has looked at the missing key; here
// victim() is called before on_insert() names it, so p moves on insert, one replacement late,
// and the "|T1| == p and the miss is in B2" tie rule is dropped. Ghost lists are capped so that
// |T1| + |B1| <= c and |T1| + |T2| + |B1| + |B2| <= 2c, as in the paper.
#include <algorithm>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class ArcPolicy final : public EvictionPolicy {
 public:
  explicit ArcPolicy(size_t capacity) : c_(capacity) {}

  void on_insert(ExpertKey k, uint64_t) override {
    if (b1_.contains(k)) {
      const double d = std::max(1.0, static_cast<double>(b2_.size()) / static_cast<double>(b1_.size()));
      p_ = std::min(static_cast<double>(c_), p_ + d);
      b1_.erase(k);
      t2_.push_front(k);
    } else if (b2_.contains(k)) {
      const double d = std::max(1.0, static_cast<double>(b1_.size()) / static_cast<double>(b2_.size()));
      p_ = std::max(0.0, p_ - d);
      b2_.erase(k);
      t2_.push_front(k);
    } else {
      t1_.push_front(k);
    }
    trim_ghosts();
  }
  void on_hit(ExpertKey k, uint64_t) override {
    if (t1_.contains(k)) {
      t1_.erase(k);
      t2_.push_front(k);
    } else if (t2_.contains(k)) {
      t2_.touch(k);
    }
  }
  void on_evict(ExpertKey k) override {
    if (t1_.contains(k)) {
      t1_.erase(k);
      b1_.push_front(k);
    } else if (t2_.contains(k)) {
      t2_.erase(k);
      b2_.push_front(k);
    }
    trim_ghosts();
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    const bool t1_first = !t1_.empty() && static_cast<double>(t1_.size()) > p_;
    return t1_first ? find_victim_in({&t1_, &t2_}, evictable, out) : find_victim_in({&t2_, &t1_}, evictable, out);
  }
  const char* name() const override { return "arc"; }

 private:
  void trim_ghosts() {
    while (!b1_.empty() && t1_.size() + b1_.size() > c_) b1_.pop_back();
    while (!b2_.empty() && t1_.size() + t2_.size() + b1_.size() + b2_.size() > 2 * c_) b2_.pop_back();
    while (!b1_.empty() && t1_.size() + t2_.size() + b1_.size() + b2_.size() > 2 * c_) b1_.pop_back();
  }

  size_t c_;
  double p_ = 0;  // target size of T1
  KeyList t1_, t2_, b1_, b2_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_arc(const PolicyParams& p) {
  require_capacity(p, "arc");
  return std::make_unique<ArcPolicy>(p.capacity);
}

}  // namespace les::cache
