// "lru": least recently used. Every insert and hit moves the key to the front; the victim is the
// least recently used evictable key.
#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class LruPolicy final : public EvictionPolicy {
 public:
  void on_insert(ExpertKey k, uint64_t) override { list_.push_front(k); }
  void on_hit(ExpertKey k, uint64_t) override { list_.touch(k); }
  void on_evict(ExpertKey k) override { list_.erase(k); }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    return list_.find_victim(evictable, out);
  }
  const char* name() const override { return "lru"; }

 private:
  KeyList list_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_lru(const PolicyParams&) { return std::make_unique<LruPolicy>(); }

}  // namespace les::cache
