// The resident-first executor: with_experts, one layer's routed experts computed from the cache.
//
// Owns: the order in which one layer's selected experts are computed, and the per-layer counts
//   of what the router selected (selected, hits, in_flight, misses, predicted, raw_*_hits_*),
//   what the layer's computation used (prefetch_used, guess_used) and where its time went
//   (compute_s, stall_s).
// Promises: run(i, view) is called exactly once for every i of ids, with the bytes of expert
//   ids[i] of `layer` fully read (and verified when verify_reads). lookahead: the experts
//   resident when the layer starts compute first (router order), then each missing one as soon
//   as its read completes; ondemand: in router order once none of the layer's reads is in
//   flight. A cache too small to progress (every slot pinned) is an Error, never a hang.
// Relies on: the slot cache (streaming_slots.cpp) for slots, pins and eviction; the I/O queue
//   (streaming_io.cpp) for demand reads, promotion of queued prefetches and completions; the
//   predictor (streaming_predictor.cpp) for this layer's guesses, which are settled here (unused
//   ones cancelled or counted as waste) and which it must not change while this runs.
#include <algorithm>

#include "les/sched/streaming_experts.h"
#include "les/util/error.h"
#include "les/util/clock.h"

namespace les {

// One with_experts call's state: which slot each selected expert has, what is computed, and
// what waits (ready: resident at the start; waiting: being read; deferred: no slot yet).
struct StreamingExperts::LayerRun {
  LayerRun(int layer_, std::span<const int32_t> ids_, const std::function<void(size_t, const ExpertView&)>& run_,
           LayerStreamStats& ls_, uint64_t eb_)
      : layer(layer_), ids(ids_), run(run_), ls(ls_), eb(eb_), slot_of_i(ids_.size(), -1), done(ids_.size(), 0) {}
  const int layer;
  const std::span<const int32_t> ids;
  const std::function<void(size_t, const ExpertView&)>& run;
  LayerStreamStats& ls;
  const uint64_t eb;               // bytes of one expert of the layer
  std::vector<int> slot_of_i;      // [n]: slot of ids[i], -1 while it has none
  std::vector<uint8_t> done;       // [n]: computed
  std::vector<size_t> ready, waiting, deferred;  // indices into ids
  double compute = 0;              // seconds inside run()
};

void StreamingExperts::with_experts(int layer, std::span<const int32_t> ids,
                                    const std::function<void(size_t, const ExpertView&)>& run) {
  const double t_start = now_s();
  ++step_;
  drain(false, 0);
  LayerRun r(layer, ids, run, stats_.layers[static_cast<size_t>(layer)], layout_.expert_bytes(layer));
  Prediction& pd = pred_[static_cast<size_t>(layer)];
  const bool have_pred = pd.valid;
  pd.valid = false;  // consumed: stale after this layer
  settle_guesses(r, have_pred);
  const bool have_refined = pd.has_refined;
  pd.has_refined = false;
  const bool have_ahead2 = ahead2_valid_[static_cast<size_t>(layer)] != 0;
  ahead2_valid_[static_cast<size_t>(layer)] = 0;

  policy_of_layer(layer).on_route(layer, ids.data(), static_cast<int>(ids.size()), clock_);
  // The MTP block's expert layer (layer == n_layer) is outside the trunk's chain of predictions: it
  // is neither recorded for the oracle nor a point to prefetch the next layer from.
  const bool trunk = layer < cfg_.n_layer;
  if (trunk && opt_.oracle && opt_.oracle_record) opt_.oracle->record(oracle_step_, layer, ids);

  classify(r, have_pred, have_refined, have_ahead2);

  // Demand reads of this layer are queued first; then the next layer's predicted experts: one
  // submission for all of them.
  begin_batch();
  issue_demand_reads(r);
  if (trunk && opt_.schedule == Schedule::lookahead) issue_lookahead_prefetches(layer);
  flush_batch();
  if (opt_.schedule == Schedule::lookahead) run_residents(r);
  run_arrivals(r);
  r.ls.compute_s += r.compute;
  r.ls.stall_s += (now_s() - t_start) - r.compute;
}

void StreamingExperts::settle_guesses(LayerRun& r, bool have_pred) {
  const int layer = r.layer;
  const std::span<const int32_t> ids = r.ids;
  LayerStreamStats& ls = r.ls;
  const uint64_t eb = r.eb;
  // Predictions for this layer that were not selected: cancel reads that have not started; the
  // others' bytes are wasted (counted now; the slot is evicted first when space is needed).
  std::vector<cache::ExpertKey> guessed;
  if (have_pred) guessed = pred_[static_cast<size_t>(layer)].keys;
  for (cache::ExpertKey key : ahead2_issued_[static_cast<size_t>(layer)]) {
    if (std::find(guessed.begin(), guessed.end(), key) == guessed.end()) guessed.push_back(key);
  }
  ahead2_issued_[static_cast<size_t>(layer)].clear();
  {
    for (cache::ExpertKey key : guessed) {
      if (std::find(ids.begin(), ids.end(), cache::key_expert(key)) != ids.end()) continue;
      const int si = slot_of(key);
      if (si < 0) continue;
      const bool was_prefetch = slots_[static_cast<size_t>(si)].prefetched;
      const int guess = slots_[static_cast<size_t>(si)].guess;
      if (cancel_prefetch(si)) {
        ++ls.prefetch_cancelled;
        if (was_prefetch) record_guess(guess, false);  // a wrong guess, caught before its read
        continue;
      }
      Slot& s = slots_[static_cast<size_t>(si)];
      s.protect_until = 0;
      if (s.prefetched && !s.waste_counted) record_guess(s.guess, false);
      if (s.prefetched) {
        pools_[static_cast<size_t>(s.cls)].stale.push_back(si);
        if (!s.waste_counted) ls.bytes_wasted += eb;
        s.waste_counted = true;
      }
    }
  }
}

void StreamingExperts::classify(LayerRun& r, bool have_pred, bool have_refined, bool have_ahead2) {
  const int layer = r.layer;
  const std::span<const int32_t> ids = r.ids;
  LayerStreamStats& ls = r.ls;
  const Prediction& pd = pred_[static_cast<size_t>(layer)];
  const std::vector<uint8_t>& pred_rank_ = pd.rank;
  // Classify: resident (compute first), in flight (promote), missing (demand read).
  for (size_t i = 0; i < ids.size(); ++i) {
    const cache::ExpertKey key = cache::make_key(layer, ids[i]);
    ++ls.selected;
    if (have_pred) {
      const uint8_t rk = pred_rank_[static_cast<size_t>(ids[i])];
      const bool refined = have_refined && pd.refined[static_cast<size_t>(ids[i])];
      if (rk == 1) ++ls.raw_pred_hits_k;
      if (rk >= 1) ++ls.raw_pred_hits_km;
      if (refined) ++ls.raw_refined_hits_k;
      if (rk >= 1 || refined) ++ls.predicted;
    }
    if (have_ahead2) {
      ++ls.ahead2_selected;
      if (ahead2_[static_cast<size_t>(layer)][static_cast<size_t>(ids[i])]) ++ls.raw_ahead2_hits_k;
    }
    const int si = slot_of(key);
    if (si >= 0 && slots_[static_cast<size_t>(si)].state == SlotState::ready) {
      ++ls.hits;
      ++slots_[static_cast<size_t>(si)].pins;
      r.slot_of_i[i] = si;
      r.ready.push_back(i);
    } else if (si >= 0) {
      ++ls.in_flight;
      ++slots_[static_cast<size_t>(si)].pins;
      io_->promote(slots_[static_cast<size_t>(si)].tag);
      slots_[static_cast<size_t>(si)].speculative = false;
      r.slot_of_i[i] = si;
      r.waiting.push_back(i);
    } else {
      ++ls.misses;
      r.deferred.push_back(i);
    }
  }
}

void StreamingExperts::issue_demand_reads(LayerRun& r) {
  const int layer = r.layer;
  while (!r.deferred.empty()) {
    const int si = acquire_slot(layer, true);
    if (si < 0) return;
    const size_t i = r.deferred.front();
    r.deferred.erase(r.deferred.begin());
    const cache::ExpertKey key = cache::make_key(layer, r.ids[i]);
    Slot& s = slots_[static_cast<size_t>(si)];
    s.prefetched = false;
    s.demand_fresh = true;  // the policy counts a demand insert as this use
    s.pins = 1;
    policy_of(key).on_insert(key, clock_++);
    submit_read(si, key, storage::IoPriority::demand);
    r.ls.bytes_demand += r.eb;
    r.slot_of_i[i] = si;
    r.waiting.push_back(i);
  }
}

void StreamingExperts::run_expert(LayerRun& r, size_t i) {
  Slot& s = slots_[static_cast<size_t>(r.slot_of_i[i])];
  LES_ASSERT(s.state == SlotState::ready);
  const double t0 = now_s();
  r.run(i, layout_.view(r.layer, r.ids[i], s.data));
  r.compute += now_s() - t0;
  if (s.prefetched) {
    s.prefetched = false;
    ++r.ls.prefetch_used;
    ++stats_.guess_used[s.guess];
    record_guess(s.guess, true);
  }
  s.protect_until = 0;
  --s.pins;
  if (s.demand_fresh) {
    s.demand_fresh = false;
  } else {
    policy_of(s.key).on_hit(s.key, clock_++);
  }
  r.done[i] = 1;
}

void StreamingExperts::run_residents(LayerRun& r) {
  for (size_t i : r.ready) run_expert(r, i);
  r.ready.clear();
}

void StreamingExperts::run_arrivals(LayerRun& r) {
  const bool eager = opt_.schedule == Schedule::lookahead;
  const size_t n = r.ids.size();
  size_t remaining = 0;
  for (size_t i = 0; i < n; ++i) remaining += !r.done[i];
  while (remaining > 0) {
    // Compute whatever is ready (lookahead: as soon as it arrives; ondemand: once nothing of this
    // layer is in flight, in router order).
    bool any_in_flight = false;
    for (size_t i : r.waiting) {
      if (!r.done[i] && slots_[static_cast<size_t>(r.slot_of_i[i])].state == SlotState::loading) any_in_flight = true;
    }
    if (eager || !any_in_flight) {
      std::vector<size_t> now;
      for (size_t i : r.ready) if (!r.done[i]) now.push_back(i);
      for (size_t i : r.waiting) {
        if (!r.done[i] && slots_[static_cast<size_t>(r.slot_of_i[i])].state == SlotState::ready) now.push_back(i);
      }
      if (!eager) std::sort(now.begin(), now.end());
      for (size_t i : now) {
        run_expert(r, i);
        --remaining;
      }
      if (!now.empty()) {
        issue_demand_reads(r);
        continue;
      }
    }
    if (remaining == 0) break;
    if (io_->pending() == 0 && !any_in_flight) {
      issue_demand_reads(r);
      if (r.deferred.size() == remaining) {
        throw Error(strfmt("expert cache of %zu slots cannot make progress at layer %d (all slots pinned)",
                           slots_.size(), r.layer));
      }
      continue;
    }
    drain(true, 1000000);
    issue_demand_reads(r);
  }
}

}  // namespace les
