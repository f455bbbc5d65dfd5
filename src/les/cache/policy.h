// Eviction policies for the expert cache.
//
// The cache (mechanism) owns the slots and decides *when* something must go; an EvictionPolicy
// decides *which* resident expert goes. The cache reports every event to the policy in the order it
// happens, on one thread (policies are not thread-safe; the cache serialises calls):
//
//   on_route   layer l's router picked its experts (every routing decision, hits and misses alike);
//              called before those experts are looked up.
//   on_predict a predictor expects k soon (cross-layer prediction); k may or may not be resident.
//   victim     the cache is full and needs a slot: the policy names a resident key for which
//              evictable(key) is true; the cache then evicts it and calls on_evict(key).
//   on_insert  k became resident; never called for a key already resident. For a demand load (k
//              was routed and missed) this is also k's use: no on_hit follows. For a prefetch (k
//              loaded ahead of use) the first use later calls on_hit.
//   on_hit     k was used while resident (including the first use of a prefetched expert).
//   on_evict   k left the cache (after victim() chose it, or because the cache dropped it itself).
//
// `t` is the cache's access clock: non-decreasing, +1 per expert access (half-lives and
// prediction lifetimes below are in these units).
// Keys are (layer << 16) | expert. A policy keeps state only for resident keys plus bounded
// history (ghost lists, frequency sketches), so memory stays O(capacity + keys).
//
// Cost: every call is O(1) or O(log n) amortised for caches of ~10k entries ("lpart": O(layers)
// per victim()). victim() skips keys that are not evictable: the first 64 it passes keep their
// rank; any further skipped key is re-ranked as if referenced now (moved away from the eviction
// end), so many non-evictable keys cost O(64 + moved) per call, not O(n), and are not rescanned
// by the next call. Keys pinned for the whole run are best not registered with the policy at all
// (never on_insert them).
//
// Determinism: a policy's choices depend only on the sequence of calls (no clocks, no addresses,
// no unseeded randomness), so replays are reproducible.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace les::cache {

using ExpertKey = uint32_t;  // (layer << 16) | expert

inline constexpr ExpertKey make_key(int layer, int expert) {
  return (static_cast<uint32_t>(layer) << 16) | (static_cast<uint32_t>(expert) & 0xffffu);
}
inline constexpr int key_layer(ExpertKey k) { return static_cast<int>(k >> 16); }
inline constexpr int key_expert(ExpertKey k) { return static_cast<int>(k & 0xffffu); }

class EvictionPolicy {
 public:
  virtual ~EvictionPolicy() = default;

  // k became resident at access clock t. Precondition: k is not resident.
  virtual void on_insert(ExpertKey k, uint64_t t) = 0;
  // k was used while resident. Precondition: k is resident.
  virtual void on_hit(ExpertKey k, uint64_t t) = 0;
  // k is no longer resident. Precondition: k is resident.
  virtual void on_evict(ExpertKey k) = 0;
  // Every routing decision: layer's top-k experts (descending router probability), before they
  // are looked up. Default: ignored.
  virtual void on_route(int layer, const int32_t* experts, int k, uint64_t t) {
    (void)layer; (void)experts; (void)k; (void)t;
  }
  // A predictor expects k to be used soon (e.g. layer l+1's predicted experts while layer l runs).
  // Default: ignored.
  virtual void on_predict(ExpertKey k, uint64_t t) { (void)k; (void)t; }
  // Picks a resident key with evictable(key) == true and stores it in *out; returns false if no
  // resident key is evictable. Does not remove it: the cache calls on_evict() when it does.
  virtual bool victim(const std::function<bool(ExpertKey)>& evictable, ExpertKey* out) = 0;

  virtual const char* name() const = 0;  // the name make_policy() knows it by
};

// Construction parameters. capacity is required by the size-aware policies (arc, 2q, s3fifo,
// tinylfu, lpart); everything else has defaults chosen on the tiny model's routing trace
// (docs/cache_policy.md). n_layers and top_k only scale those defaults to a model's shape.
struct PolicyParams {
  size_t capacity = 0;     // cache slots (experts)
  int n_layers = 0;        // MoE layers (0 = unknown)
  int top_k = 0;           // experts routed per token and layer (0 = unknown)
  double half_life = 0;    // lrfu decay half-life / lpart utility half-life, in accesses;
                           // 0 = default: lrfu 24 tokens (24 * n_layers * top_k, else 768),
                           // lpart 4096
  double predict_ttl = 0;  // "+pred": accesses a prediction stays pending; 0 = 2 * top_k (else 8)
};

// The base policy names, in a stable order. Each can also be wrapped as "<name>+pred".
const std::vector<std::string>& policy_names();
// Creates the named policy ("lru", "lrfu+pred", ...). Unknown name -> les::Error listing the
// valid names; a size-aware policy without capacity -> les::Error naming the parameter.
std::unique_ptr<EvictionPolicy> make_policy(std::string_view name, const PolicyParams& p);
// The recommended default (see docs/cache_policy.md).
inline constexpr const char* kDefaultPolicy = "lrfu+pred";

}  // namespace les::cache
