// Internals shared by the policy implementations: factories and a small intrusive LRU list.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <unordered_map>
#include <vector>

#include "les/cache/policy.h"

namespace les::cache {

std::unique_ptr<EvictionPolicy> make_lru(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_lfu(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_lrfu(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_arc(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_2q(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_s3fifo(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_tinylfu(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_lpart(const PolicyParams& p);
std::unique_ptr<EvictionPolicy> make_predict_aware(std::unique_ptr<EvictionPolicy> base, const PolicyParams& p);

// victim() leaves the first kFreeSkips non-evictable keys it passes where they are; keys skipped
// beyond that are re-ranked as if referenced now (moved away from the eviction end), so a call
// costs O(kFreeSkips + moved) and many long-lived non-evictable keys do not make every call O(n).
inline constexpr size_t kFreeSkips = 64;

// Throws les::Error if a size-aware policy was created without a capacity.
void require_capacity(const PolicyParams& p, const char* policy);

// Recency list of keys with O(1) insert-at-front, move-to-front, remove and back(). Nodes live in
// a hash map keyed by ExpertKey (stable addresses), linked into a circular list through a sentinel.
class KeyList {
 public:
  KeyList() { head_.prev = head_.next = &head_; }
  KeyList(const KeyList&) = delete;
  KeyList& operator=(const KeyList&) = delete;

  bool contains(ExpertKey k) const { return nodes_.count(k) != 0; }
  size_t size() const { return nodes_.size(); }
  bool empty() const { return nodes_.empty(); }
  // Inserts k at the front (most recent). Precondition: !contains(k).
  void push_front(ExpertKey k) {
    Node& n = nodes_[k];
    n.key = k;
    link_after(&head_, &n);
  }
  void push_back(ExpertKey k) {
    Node& n = nodes_[k];
    n.key = k;
    link_after(head_.prev, &n);
  }
  // Moves k to the front. Precondition: contains(k).
  void touch(ExpertKey k) {
    Node& n = nodes_.at(k);
    unlink(&n);
    link_after(&head_, &n);
  }
  void erase(ExpertKey k) {
    auto it = nodes_.find(k);
    if (it == nodes_.end()) return;
    unlink(&it->second);
    nodes_.erase(it);
  }
  ExpertKey back() const { return head_.prev->key; }  // least recent; precondition: !empty()
  ExpertKey pop_back() {
    const ExpertKey k = back();
    erase(k);
    return k;
  }

  // Scans from the back (least recent) for an evictable key, looking at no more than `limit`
  // keys; keys skipped beyond kFreeSkips are moved to the front. Returns false if none was found.
  template <class Pred>
  bool find_victim(const Pred& evictable, ExpertKey* out, size_t limit = SIZE_MAX) {
    size_t left = std::min(limit, nodes_.size());
    size_t skipped = 0;
    Node* n = head_.prev;
    while (left-- > 0) {
      Node* prev = n->prev;
      if (evictable(n->key)) { *out = n->key; return true; }
      if (++skipped > kFreeSkips) {
        unlink(n);
        link_after(&head_, n);
      }
      n = prev;
    }
    return false;
  }

 private:
  struct Node {
    Node* prev = nullptr;
    Node* next = nullptr;
    ExpertKey key = 0;
  };
  static void unlink(Node* n) {
    n->prev->next = n->next;
    n->next->prev = n->prev;
  }
  static void link_after(Node* pos, Node* n) {
    n->prev = pos;
    n->next = pos->next;
    pos->next->prev = n;
    pos->next = n;
  }
  Node head_;
  std::unordered_map<ExpertKey, Node> nodes_;
};

// For policies with several lists: looks for a victim in `lists` in order of preference, first
// with a bounded scan of each (so one list whose eviction end is blocked by non-evictable keys
// does not cost O(n) per call), then with full scans.
template <class Pred>
bool find_victim_in(std::initializer_list<KeyList*> lists, const Pred& evictable, ExpertKey* out) {
  for (KeyList* l : lists) {
    if (l->find_victim(evictable, out, 2 * kFreeSkips)) return true;
  }
  for (KeyList* l : lists) {
    if (l->find_victim(evictable, out)) return true;
  }
  return false;
}

// Scans an ordered set of (rank, key) pairs from the lowest rank for an evictable key. Keys
// skipped beyond kFreeSkips are collected and handed to refresh(key) after the scan (which must
// re-rank them, e.g. as if referenced now). Returns false if none is evictable.
template <class Set, class Pred, class Refresh>
bool scan_victim(Set& order, const Pred& evictable, ExpertKey* out, Refresh refresh) {
  size_t skipped = 0;
  std::vector<ExpertKey> moved;
  bool found = false;
  for (auto it = order.begin(); it != order.end(); ++it) {
    if (evictable(it->second)) {
      *out = it->second;
      found = true;
      break;
    }
    if (++skipped > kFreeSkips) moved.push_back(it->second);
  }
  for (ExpertKey k : moved) refresh(k);
  return found;
}

}  // namespace les::cache
