// "s3fifo": S3-FIFO (Yang et al., SOSP 2023). New keys enter a small FIFO S (10% of the cache);
// the main FIFO M holds the rest; a ghost FIFO G remembers keys recently evicted from S (as many
// keys as M's share). Each resident key has a 2-bit use counter. Eviction from S: a key used again
// while in S (counter >= 1) moves to M instead of leaving, otherwise it is the victim (and goes to
// G). Eviction from M: a key with counter > 0 is reinserted at M's head with counter - 1 (lazy
// promotion, as CLOCK), otherwise it is the victim. S is drained while it holds at least its share.
// A key that returns while in G is inserted straight into M. Scan resistance: one-hit keys only
// ever pass through S.
#include <algorithm>
#include <unordered_map>

#include "les/cache/policy_impl.h"

namespace les::cache {

namespace {

class S3FifoPolicy final : public EvictionPolicy {
 public:
  explicit S3FifoPolicy(size_t capacity)
      : s_target_(std::max<size_t>(1, capacity / 10)), g_cap_(std::max<size_t>(1, capacity - capacity / 10)) {}

  void on_insert(ExpertKey k, uint64_t) override {
    freq_[k] = 0;
    if (g_.contains(k)) {
      g_.erase(k);
      m_.push_front(k);
    } else {
      s_.push_front(k);
    }
  }
  void on_hit(ExpertKey k, uint64_t) override {
    auto it = freq_.find(k);
    if (it != freq_.end() && it->second < 3) ++it->second;
  }
  void on_evict(ExpertKey k) override {
    freq_.erase(k);
    if (s_.contains(k)) {
      s_.erase(k);
      g_.push_front(k);
      while (g_.size() > g_cap_) g_.pop_back();
    } else {
      m_.erase(k);
    }
  }
  bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) override {
    // Every iteration either returns, moves a key from S to M, or spends one use of an M key.
    size_t guard = s_.size() + 4 * m_.size() + 4;
    while (guard-- > 0) {
      ExpertKey k = 0;
      const bool from_s = s_.size() >= s_target_ || m_.empty();
      if (from_s ? s_.find_victim(evictable, &k, kScan) : m_.find_victim(evictable, &k, kScan)) {
        if (from_s) {
          if (freq_[k] >= 1) {
            s_.erase(k);
            m_.push_front(k);
            continue;
          }
        } else if (freq_[k] > 0) {
          --freq_[k];
          m_.touch(k);
          continue;
        }
        *out = k;
        return true;
      }
      // The chosen queue's end is blocked: take the other queue's oldest evictable key.
      break;
    }
    const bool s_first = s_.size() >= s_target_ || m_.empty();
    return s_first ? find_victim_in({&s_, &m_}, evictable, out) : find_victim_in({&m_, &s_}, evictable, out);
  }
  const char* name() const override { return "s3fifo"; }

 private:
  static constexpr size_t kScan = 2 * kFreeSkips;
  size_t s_target_, g_cap_;
  KeyList s_, m_, g_;
  std::unordered_map<ExpertKey, uint8_t> freq_;
};

}  // namespace

std::unique_ptr<EvictionPolicy> make_s3fifo(const PolicyParams& p) {
  require_capacity(p, "s3fifo");
  return std::make_unique<S3FifoPolicy>(p.capacity);
}

}  // namespace les::cache
