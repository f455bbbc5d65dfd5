// "2q": the full 2Q algorithm (Johnson & Shasha, VLDB 1994). New keys enter A1in, a FIFO of about
// 25% of the cache; hits there do not promote. Keys evicted from A1in are remembered in the ghost
// FIFO A1out (50% of the capacity in keys); a key that returns while in A1out goes to Am, an LRU
// for keys with proven reuse. The victim comes from A1in while it is over its share, else from
// Am's LRU end (falling back to the other queue when one has no evictable key).
#include <algorithm>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class TwoQPolicy final : public EvictionPolicy {
 public:
  explicit TwoQPolicy(size_t capacity)
      : kin_(std::max<size_t>(1, capacity / 4)), kout_(std::max<size_t>(1, capacity / 2)) {}

  void on_insert(ExpertKey k, uint64_t) override {
    if (a1out_.contains(k)) {
      a1out_.erase(k);
      am_.push_front(k);
    } else {
      a1in_.push_front(k);
    }
  }
  void on_hit(ExpertKey k, uint64_t) override {
    if (am_.contains(k)) am_.touch(k);  // hits in A1in leave it in place (correlated references)
  }
  void on_evict(ExpertKey k) override {
    if (a1in_.contains(k)) {
      a1in_.erase(k);
      a1out_.push_front(k);
      while (a1out_.size() > kout_) a1out_.pop_back();
    } else {
      am_.erase(k);
    }
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    const bool in_first = a1in_.size() > kin_ || am_.empty();
    return in_first ? find_victim_in({&a1in_, &am_}, evictable, out) : find_victim_in({&am_, &a1in_}, evictable, out);
  }
  const char* name() const override { return "2q"; }

 private:
  size_t kin_, kout_;
  KeyList a1in_, a1out_, am_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_2q(const PolicyParams& p) {
  require_capacity(p, "2q");
  return std::make_unique<TwoQPolicy>(p.capacity);
}

}  // namespace les::cache
