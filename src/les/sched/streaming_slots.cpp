// The slot cache: fixed-size slots in one arena, grouped in pools by slot size, each pool with its
// own eviction policy, a free list and a list of stale (wrongly guessed) slots.
//
// Owns: plan_slot_classes (how the cache's bytes split into pools), the key -> slot map's
//   indexing, eviction, and which slot a new read gets.
// Promises: acquire_slot hands out a free slot of the layer's pool, or evicts one: expired
//   wrong guesses first, then the policy's victim among ready, unpinned slots (unprotected ones
//   unless demand); -1 when none can be had. Eviction forgets the key, tells the policy, and
//   counts a prefetched-but-never-used expert's bytes as wasted (once). A slot being read or
//   pinned is never evicted.
// Relies on: callers pin a slot for as long as they compute from it (streaming_executor.cpp),
//   and set its state through submit_read / on_complete (streaming_io.cpp); step_ advances once
//   per layer (protection epochs).
#include <algorithm>
#include <cstring>

#include "les/sched/streaming_experts.h"
#include "les/util/error.h"

namespace les {

std::vector<SlotClassPlan> plan_slot_classes(const std::vector<uint64_t>& layer_slot_bytes, int n_expert,
                                             int min_slots, uint64_t cache_bytes) {
  std::vector<SlotClassPlan> cls;
  for (size_t l = 0; l < layer_slot_bytes.size(); ++l) {
    if (layer_slot_bytes[l] == 0) continue;  // a layer without experts (dense lead layer)
    auto it = std::find_if(cls.begin(), cls.end(), [&](const SlotClassPlan& c) { return c.slot_bytes == layer_slot_bytes[l]; });
    if (it == cls.end()) {
      cls.push_back(SlotClassPlan{layer_slot_bytes[l], {}, 0});
      it = cls.end() - 1;
    }
    it->layers.push_back(static_cast<int>(l));
  }
  std::sort(cls.begin(), cls.end(), [](const SlotClassPlan& a, const SlotClassPlan& b) { return a.slot_bytes > b.slot_bytes; });
  auto sizes = [&] {
    std::string s;
    for (const auto& c : cls) s += strfmt("%s%.2f MiB (%zu layers)", s.empty() ? "" : ", ", c.slot_bytes / 1048576.0, c.layers.size());
    return s;
  };
  // A pool never needs more slots than it has experts.
  auto cap = [&](const SlotClassPlan& c) { return static_cast<int>(c.layers.size()) * n_expert; };
  if (cls.size() == 1) {
    cls[0].n_slots = static_cast<int>(std::min<uint64_t>(cache_bytes / cls[0].slot_bytes, static_cast<uint64_t>(cap(cls[0]))));
  } else {
    double total = 0;  // bytes of all experts, in slots
    for (const auto& c : cls) total += static_cast<double>(c.slot_bytes) * static_cast<double>(c.layers.size()) * n_expert;
    uint64_t used = 0;
    for (auto& c : cls) {
      const double share = static_cast<double>(cache_bytes) * static_cast<double>(c.slot_bytes) *
                           static_cast<double>(c.layers.size()) * n_expert / total;
      const double want = std::min(share / static_cast<double>(c.slot_bytes), static_cast<double>(cap(c)));
      c.n_slots = std::max(min_slots, static_cast<int>(want));
      used += static_cast<uint64_t>(c.n_slots) * c.slot_bytes;
    }
    uint64_t need = 0;
    for (const auto& c : cls) need += static_cast<uint64_t>(min_slots) * c.slot_bytes;
    if (need > cache_bytes) {
      throw Error(strfmt("the expert cache (%.1f MiB) cannot hold %d experts of each expert size this model has "
                         "(%s): at least %.1f MiB are needed",
                         cache_bytes / 1048576.0, min_slots, sizes().c_str(), need / 1048576.0));
    }
    // Pools raised to min_slots took bytes from the others: give back one slot at a time from the
    // pool holding the largest fraction of its experts (never below min_slots).
    auto frac = [&](const SlotClassPlan& c) {
      return static_cast<double>(c.n_slots) / (static_cast<double>(c.layers.size()) * n_expert);
    };
    while (used > cache_bytes) {
      SlotClassPlan* most = nullptr;
      for (auto& c : cls) {
        if (c.n_slots > min_slots && (!most || frac(c) > frac(*most))) most = &c;
      }
      LES_ASSERT(most != nullptr);  // need <= cache_bytes
      --most->n_slots;
      used -= most->slot_bytes;
    }
    // Leftover bytes: one slot at a time to the pool holding the smallest fraction of its experts.
    for (;;) {
      SlotClassPlan* best = nullptr;
      double best_frac = 0;
      for (auto& c : cls) {
        if (used + c.slot_bytes > cache_bytes || c.n_slots >= cap(c)) continue;
        if (!best || frac(c) < best_frac) { best = &c; best_frac = frac(c); }
      }
      if (!best) break;
      ++best->n_slots;
      used += best->slot_bytes;
    }
  }
  for (const auto& c : cls) {
    if (c.n_slots < min_slots) {
      throw Error(strfmt("the expert cache (%.1f MiB) holds %d experts; at least %d (%.1f MiB) are needed to "
                         "compute one token's layer",
                         cache_bytes / 1048576.0, c.n_slots, min_slots, min_slots * c.slot_bytes / 1048576.0));
    }
  }
  return cls;
}

std::unique_ptr<cache::EvictionPolicy> StreamingExperts::make_pool_policy(size_t capacity) const {
  cache::PolicyParams pp;
  pp.capacity = capacity;
  pp.n_layers = layout_.n_layer();
  pp.top_k = cfg_.n_expert_used;
  return cache::make_policy(opt_.policy, pp);
}

void StreamingExperts::reset_pools() {
  for (size_t c = 0; c < pools_.size(); ++c) {
    SlotPool& pool = pools_[c];
    const int active = class_plan_[c].n_slots - withheld_[c];
    pool.free.clear();
    pool.stale.clear();
    // Lowest slot first out of the free list; withheld slots (the pool's last) are left out.
    for (size_t i = pool.first + static_cast<size_t>(active); i > pool.first; --i) pool.free.push_back(static_cast<int>(i - 1));
    pool.policy = make_pool_policy(static_cast<size_t>(active));
  }
}

int StreamingExperts::active_slots() const {
  int n = 0;
  for (size_t c = 0; c < class_plan_.size(); ++c) n += class_plan_[c].n_slots - withheld_[c];
  return n;
}

uint64_t StreamingExperts::withheld_bytes() const {
  uint64_t b = 0;
  for (size_t c = 0; c < class_plan_.size(); ++c) b += static_cast<uint64_t>(withheld_[c]) * class_plan_[c].slot_bytes;
  return b;
}

double StreamingExperts::withheld_share() const {
  return arena_.size() ? static_cast<double>(withheld_bytes()) / static_cast<double>(arena_.size()) : 0.0;
}

uint64_t StreamingExperts::release_withheld() {
  const uint64_t released = withheld_bytes();
  if (released == 0) return 0;
  for (size_t c = 0; c < pools_.size(); ++c) {
    if (withheld_[c] == 0) continue;
    const SlotClassPlan& cp = class_plan_[c];
    SlotPool& pool = pools_[c];
    const size_t begin = pool.first + static_cast<size_t>(cp.n_slots - withheld_[c]);
    const size_t end = pool.first + static_cast<size_t>(cp.n_slots);
    arena_.populate(static_cast<size_t>(slots_[begin].data - arena_.data()), (end - begin) * cp.slot_bytes);
    for (size_t i = end; i > begin; --i) pool.free.push_back(static_cast<int>(i - 1));
    // A policy's capacity is fixed at construction: a new one for the larger pool, told about
    // what is resident (in slot order; the recency it had is lost once).
    pool.policy = make_pool_policy(static_cast<size_t>(cp.n_slots));
    for (size_t i = pool.first; i < begin; ++i) {
      if (slots_[i].state != SlotState::free) pool.policy->on_insert(slots_[i].key, clock_);
    }
    withheld_[c] = 0;
    stats_.slot_classes[c].second = cp.n_slots;
  }
  stats_.n_slots = active_slots();
  return released;
}

void StreamingExperts::clear() {
  while (!tag_slot_.empty()) drain(true, 100000);
  for (Slot& s : slots_) reset_slot(s);
  std::fill(key_slot_.begin(), key_slot_.end(), -1);
  reset_pools();
  for (Prediction& p : pred_) {
    p.valid = p.issued = p.has_refined = false;
    p.keys.clear();
    std::fill(p.rank.begin(), p.rank.end(), 0);
    std::fill(p.refined.begin(), p.refined.end(), 0);
  }
  std::fill(ahead2_valid_.begin(), ahead2_valid_.end(), 0);
  for (auto& k : ahead2_keys_) k.clear();
  for (auto& k : ahead2_issued_) k.clear();
  token_prefetch_bytes_ = 0;
  reset_stats();
}

void StreamingExperts::reset_slot(Slot& s) {
  uint8_t* data = s.data;
  const int cls = s.cls;
  s = Slot{};
  s.data = data;
  s.cls = cls;
}

size_t StreamingExperts::index(cache::ExpertKey k) const {
  return static_cast<size_t>(cache::key_layer(k)) * static_cast<size_t>(cfg_.n_expert) +
         static_cast<size_t>(cache::key_expert(k));
}

void StreamingExperts::evict(int si) {
  Slot& s = slots_[static_cast<size_t>(si)];
  LES_ASSERT(s.state == SlotState::ready && s.pins == 0);
  policy_of(s.key).on_evict(s.key);
  if (s.prefetched && !s.waste_counted) {
    stats_.layers[static_cast<size_t>(cache::key_layer(s.key))].bytes_wasted += layout_.expert_bytes(cache::key_layer(s.key));
  }
  key_slot_[index(s.key)] = -1;
  reset_slot(s);
}

int StreamingExperts::acquire_slot(int layer, bool demand) {
  SlotPool& pool = pools_[static_cast<size_t>(layer_pool_[static_cast<size_t>(layer)])];
  if (!pool.free.empty()) {
    const int si = pool.free.back();
    pool.free.pop_back();
    return si;
  }
  // Expired guesses go first: a prefetched expert whose layer passed without selecting it is
  // the least valuable entry (it must not push out experts that real routing used).
  if (!pool.stale.empty()) {
    while (!pool.stale.empty()) {
      const int si = pool.stale.back();
      pool.stale.pop_back();
      Slot& s = slots_[static_cast<size_t>(si)];
      if (s.state == SlotState::ready && s.pins == 0 && s.prefetched && s.protect_until < step_) {
        evict(si);
        return si;
      }
    }
  }
  cache::ExpertKey victim = 0;
  const bool found = pool.policy->victim(
      [&](cache::ExpertKey k) {
        const int si = slot_of(k);
        if (si < 0) return false;
        const Slot& s = slots_[static_cast<size_t>(si)];
        return s.state == SlotState::ready && s.pins == 0 && (demand || s.protect_until < step_);
      },
      &victim);
  if (!found) return -1;
  const int si = slot_of(victim);
  evict(si);
  // evict() left the slot free; hand it out directly.
  return si;
}

}  // namespace les
