// The I/O queue: expert reads into slots, their priorities, batching, completion and cancellation,
// and which prefetches are issued.
//
// Owns: submit_read (a slot's reads as one request), the tag -> slot map of reads in flight,
//   completions (retry of failed or, with verify_reads, corrupt reads; then an Error), batching
//   (a layer's reads in one submission), prefetching within the per-token byte budget, the
//   throttle and the guess sources' recent precision.
// Promises: three priorities: demand (the current layer's misses, and every retry) before
//   prefetch (the next layer's guesses, and nearer guesses of an expert read speculatively) before
//   speculative (deeper guesses, read only while the disk would otherwise idle). A slot turns
//   ready only when its read completed without error; a cancelled prefetch frees its slot and is
//   never counted as read. A prefetched slot is protected for two layers from eviction by other
//   prefetches (a demand read may still evict it).
// Relies on: storage::IoEngine (storage/io.h) for ordering by priority, promotion and cancel;
//   the slot cache (streaming_slots.cpp) for slots; the predictor (streaming_predictor.cpp) for
//   the keys to prefetch, best first.
#include <algorithm>
#include <chrono>

#include "les/sched/streaming_experts.h"
#include "les/util/error.h"

namespace les {

void StreamingExperts::submit_read(int si, cache::ExpertKey key, storage::IoPriority prio) {
  Slot& s = slots_[static_cast<size_t>(si)];
  const int layer = cache::key_layer(key), e = cache::key_expert(key);
  storage::IoRequest req;
  req.tag = next_tag_++;
  req.priority = prio;
  const uint64_t chunk = opt_.read_chunk;
  for (const SlotRead& r : layout_.reads(layer, e)) {
    // Chunks end on chunk-sized boundaries of the extent (chunk is a multiple of the file's
    // alignment), so every chunk's file offset and destination stay aligned for direct I/O.
    for (uint64_t done = 0; done < r.length;) {
      const uint64_t n = chunk > 0 ? std::min(chunk, r.length - done) : r.length - done;
      req.ops.push_back(storage::IoOp{r.file_offset + done, n, s.data + r.slot_offset + done});
      done += n;
    }
  }
  s.key = key;
  s.state = SlotState::loading;
  s.tag = req.tag;
  key_slot_[index(key)] = si;
  tag_slot_[req.tag] = si;
  if (batching_) {
    batch_.push_back(std::move(req));
  } else {
    io_->submit(std::move(req));
  }
}

void StreamingExperts::on_complete(const storage::IoCompletion& c) {
  auto it = tag_slot_.find(c.tag);
  if (it == tag_slot_.end()) return;
  const int si = it->second;
  tag_slot_.erase(it);
  Slot& s = slots_[static_cast<size_t>(si)];
  const int layer = cache::key_layer(s.key);
  std::string failure = c.error;
  if (c.ok() && opt_.verify_reads && !layout_.verify(layer, cache::key_expert(s.key), s.data)) {
    failure = strfmt("%s: checksum mismatch: the bytes read differ from those les pack recorded (xxh3-64)",
                     file_->path().c_str());
  }
  if (!failure.empty()) {
    // A failed (or, with verify_reads, corrupt) read is retried (demand priority) a few times;
    // then the error surfaces. The slot's bytes are never used unless a read completed without
    // error.
    if (s.retries < 2) {
      ++s.retries;
      s.speculative = false;
      submit_read(si, s.key, storage::IoPriority::demand);
      return;
    }
    const cache::ExpertKey key = s.key;
    key_slot_[index(key)] = -1;
    policy_of(key).on_evict(key);
    reset_slot(s);
    pools_[static_cast<size_t>(s.cls)].free.push_back(si);
    throw Error(strfmt("reading expert %d of layer %d failed after retries: %s", cache::key_expert(key), layer,
                       failure.c_str()));
  }
  s.state = SlotState::ready;
  s.retries = 0;
  if (s.prefetched) stats_.layers[static_cast<size_t>(layer)].bytes_prefetch += layout_.expert_bytes(layer);
}

size_t StreamingExperts::drain(bool block, int64_t timeout_us) {
  completions_.clear();
  const size_t n = block ? io_->wait(completions_, std::chrono::microseconds(timeout_us)) : io_->poll(completions_);
  for (const auto& c : completions_) on_complete(c);
  return n;
}

void StreamingExperts::begin_batch() { batching_ = true; }

void StreamingExperts::flush_batch() {
  batching_ = false;
  if (batch_.empty()) return;
  std::vector<storage::IoRequest> reqs;
  reqs.swap(batch_);
  io_->submit_batch(std::move(reqs));
}

bool StreamingExperts::cancel_prefetch(int si) {
  Slot& s = slots_[static_cast<size_t>(si)];
  if (s.state != SlotState::loading || !s.prefetched || s.pins > 0 || !io_->cancel(s.tag)) return false;
  tag_slot_.erase(s.tag);
  policy_of(s.key).on_evict(s.key);
  key_slot_[index(s.key)] = -1;
  reset_slot(s);
  pools_[static_cast<size_t>(s.cls)].free.push_back(si);
  return true;
}

void StreamingExperts::issue_prefetch(int layer) {
  if (layer >= cfg_.n_layer) return;
  Prediction& pd = pred_[static_cast<size_t>(layer)];
  if (!pd.valid || pd.issued) return;
  pd.issued = true;
  for (size_t i = 0; i < pd.keys.size(); ++i) {
    if (!prefetch_one(pd.keys[i], layer, static_cast<int>(std::min<size_t>(i, kGuessPositions - 1)))) break;
  }
}

void StreamingExperts::issue_lookahead_prefetches(int layer) {
  // Targets wrap to the next step's first layers (only the oracle predicts those).
  issue_prefetch((layer + 1) % cfg_.n_layer);
  // Deeper guesses (two-ahead, or the oracle's up to n_layer-1 ahead), nearest layer first.
  const bool deep_guess = opt_.prefetch_ahead2 && disk_busy_nonspec_ <= opt_.ahead2_max_busy;
  const int deepest = oracle_replay() ? std::min(opt_.oracle_depth, cfg_.n_layer - 1) : (deep_guess ? 2 : 1);
  bool room = true;
  for (int d = 2; d <= deepest && room; ++d) {
    const int lt = (layer + d) % cfg_.n_layer;
    if (!ahead2_valid_[static_cast<size_t>(lt)]) continue;
    std::vector<cache::ExpertKey>& issued = ahead2_issued_[static_cast<size_t>(lt)];
    for (cache::ExpertKey key : ahead2_keys_[static_cast<size_t>(lt)]) {
      const bool was_absent = slot_of(key) < 0;
      if (!prefetch_one(key, lt, kGuessAhead2)) {
        room = false;
        break;
      }
      if (was_absent && slot_of(key) >= 0) issued.push_back(key);
    }
  }
}
bool StreamingExperts::prefetch_one(cache::ExpertKey key, int layer, int guess) {
  LayerStreamStats& ls = stats_.layers[static_cast<size_t>(layer)];
  const uint64_t eb = layout_.expert_bytes(layer);
  policy_of(key).on_predict(key, clock_);
  const int si = slot_of(key);
  if (si >= 0) {
    Slot& s = slots_[static_cast<size_t>(si)];
    s.protect_until = std::max(s.protect_until, step_ + 2);
    // A nearer guess for an expert that a deep guess is reading speculatively: a prefetch now.
    if (s.speculative && s.state == SlotState::loading && guess != kGuessAhead2) {
      io_->promote(s.tag, storage::IoPriority::prefetch);
      s.speculative = false;
    }
    return true;
  }
  // The budget is per position: a pass over n <= 8 positions (a verification batch) needs the
  // union of their experts, up to n times one token's.
  const uint64_t budget = prefetch_budget_bytes_ * static_cast<uint64_t>(std::clamp<int64_t>(pass_tokens_, 1, 8));
  if (token_prefetch_bytes_ + eb > budget) return false;
  if (throttled(guess)) {
    ++ls.prefetch_throttled;
    return true;  // later guesses may be better ones
  }
  const int ns = acquire_slot(cache::key_layer(key), false);
  if (ns < 0) return false;
  Slot& s = slots_[static_cast<size_t>(ns)];
  s.prefetched = true;
  s.guess = static_cast<uint8_t>(guess);
  ++stats_.guess_issued[guess];
  s.protect_until = step_ + 2;
  policy_of(key).on_insert(key, clock_);
  // Deep guesses read only into the disk's idle time (they must not delay nearer reads); the
  // oracle's are certain and go as prefetches.
  s.speculative = guess == kGuessAhead2 && !oracle_replay();
  submit_read(ns, key, s.speculative ? storage::IoPriority::speculative : storage::IoPriority::prefetch);
  token_prefetch_bytes_ += eb;
  ++ls.prefetch_issued;
  return true;
}

bool StreamingExperts::throttled(int guess) {
  if (!opt_.throttle || guess_n_[guess] < 8) return false;  // too few outcomes to judge
  const double busy = opt_.fixed_disk_busy >= 0 ? opt_.fixed_disk_busy : disk_busy_;
  if (guess_hit_[guess] / guess_n_[guess] >= opt_.throttle_factor * busy) return false;
  // Let every 8th one through so that the source's precision keeps being measured.
  return ++guess_skips_[guess] % 8 != 0;
}

void StreamingExperts::record_guess(int guess, bool used) {
  constexpr double kDecay = 0.99;  // ~100 recent outcomes per source
  guess_n_[guess] = guess_n_[guess] * kDecay + 1.0;
  guess_hit_[guess] = guess_hit_[guess] * kDecay + (used ? 1.0 : 0.0);
}

}  // namespace les
