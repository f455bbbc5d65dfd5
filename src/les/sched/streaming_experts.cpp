#include "les/sched/streaming_experts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "les/model/matmul.h"
#include "les/model/ops.h"
#include "les/util/error.h"

namespace les {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::shared_ptr<storage::ReadFile> open_model_file(const Model& model, const StreamingOptions& opt) {
  if (opt.file) return opt.file;
  if (opt.io_mode == storage::IoMode::naive) return storage::open_buffered(model.path());
  return storage::open_direct(model.path());
}

}  // namespace

void StreamingExperts::reset_slot(Slot& s) {
  uint8_t* data = s.data;
  const int cls = s.cls;
  s = Slot{};
  s.data = data;
  s.cls = cls;
}

std::vector<SlotClassPlan> plan_slot_classes(const std::vector<uint64_t>& layer_slot_bytes, int n_expert,
                                             int min_slots, uint64_t cache_bytes) {
  std::vector<SlotClassPlan> cls;
  for (size_t l = 0; l < layer_slot_bytes.size(); ++l) {
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
  if (cls.size() == 1) {
    cls[0].n_slots = static_cast<int>(std::min<uint64_t>(cache_bytes / cls[0].slot_bytes, INT32_MAX));
  } else {
    double total = 0;  // bytes of all experts, in slots
    for (const auto& c : cls) total += static_cast<double>(c.slot_bytes) * static_cast<double>(c.layers.size()) * n_expert;
    uint64_t used = 0;
    for (auto& c : cls) {
      const double share = static_cast<double>(cache_bytes) * static_cast<double>(c.slot_bytes) *
                           static_cast<double>(c.layers.size()) * n_expert / total;
      c.n_slots = std::max(min_slots, static_cast<int>(share / static_cast<double>(c.slot_bytes)));
      used += static_cast<uint64_t>(c.n_slots) * c.slot_bytes;
    }
    if (used > cache_bytes) {
      uint64_t need = 0;
      for (const auto& c : cls) need += static_cast<uint64_t>(min_slots) * c.slot_bytes;
      throw Error(strfmt("the expert cache (%.1f MiB) cannot hold %d experts of each expert size this model has "
                         "(%s): at least %.1f MiB are needed",
                         cache_bytes / 1048576.0, min_slots, sizes().c_str(), need / 1048576.0));
    }
    // Leftover bytes: one slot at a time to the pool holding the smallest fraction of its experts.
    for (;;) {
      SlotClassPlan* best = nullptr;
      double best_frac = 0;
      for (auto& c : cls) {
        if (used + c.slot_bytes > cache_bytes) continue;
        const double frac = static_cast<double>(c.n_slots) / (static_cast<double>(c.layers.size()) * n_expert);
        if (!best || frac < best_frac) { best = &c; best_frac = frac; }
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

const char* schedule_name(Schedule s) { return s == Schedule::ondemand ? "ondemand" : "lookahead"; }

Schedule parse_schedule(const std::string& s) {
  if (s == "ondemand" || s == "on-demand") return Schedule::ondemand;
  if (s == "lookahead") return Schedule::lookahead;
  throw Error(strfmt("unknown schedule '%s' (ondemand, lookahead)", s.c_str()));
}

LayerStreamStats StreamStats::total() const {
  LayerStreamStats t;
  for (const auto& l : layers) {
    t.selected += l.selected; t.hits += l.hits; t.in_flight += l.in_flight; t.predicted += l.predicted;
    t.misses += l.misses; t.prefetch_issued += l.prefetch_issued; t.prefetch_used += l.prefetch_used;
    t.prefetch_cancelled += l.prefetch_cancelled; t.prefetch_throttled += l.prefetch_throttled; t.bytes_demand += l.bytes_demand;
    t.bytes_prefetch += l.bytes_prefetch; t.bytes_wasted += l.bytes_wasted; t.stall_s += l.stall_s;
    t.compute_s += l.compute_s; t.raw_pred_hits_k += l.raw_pred_hits_k; t.raw_pred_hits_km += l.raw_pred_hits_km;
    t.raw_refined_hits_k += l.raw_refined_hits_k; t.raw_ahead2_hits_k += l.raw_ahead2_hits_k;
    t.ahead2_selected += l.ahead2_selected;
  }
  return t;
}

uint64_t StreamingExperts::slot_bytes_for(const Model& model, storage::IoMode mode) {
  return ExpertLayout(model, mode == storage::IoMode::naive ? 1 : storage::kDirectIoAlign).slot_bytes();
}

StreamingExperts::StreamingExperts(const Model& model, const StreamingOptions& opt)
    : model_(model),
      cfg_(model.config()),
      opt_(opt),
      file_(open_model_file(model, opt)),
      layout_(model, file_->alignment()) {
  if (!cfg_.moe) throw Error("expert streaming needs a mixture-of-experts model");
  if (opt.verify_reads && !layout_.has_checksums()) {
    throw Error(strfmt("%s: verifying expert reads needs a packed model with expert checksums (les pack); this "
                       "file has none", model.path().c_str()));
  }
  const uint64_t sb = layout_.slot_bytes();
  std::vector<uint64_t> layer_slot(static_cast<size_t>(cfg_.n_layer));
  for (int l = 0; l < cfg_.n_layer; ++l) layer_slot[static_cast<size_t>(l)] = layout_.slot_bytes(l);
  class_plan_ = plan_slot_classes(layer_slot, cfg_.n_expert, cfg_.n_expert_used, opt.cache_bytes);
  storage::IoOptions io = opt.io;
  io.queue_depth = opt.queue_depth;
  io.n_threads = opt.io_threads;
  io.prefetch_bytes = opt.prefetch_inflight > 0 ? opt.prefetch_inflight : 2 * sb;
  io_ = storage::make_io_engine(opt.io_mode, file_, io);
  uint64_t arena_bytes = 0;
  size_t n_slots = 0;
  for (const auto& c : class_plan_) {
    arena_bytes += static_cast<uint64_t>(c.n_slots) * c.slot_bytes;
    n_slots += static_cast<size_t>(c.n_slots);
  }
  arena_ = storage::AlignedBuffer(static_cast<size_t>(arena_bytes), storage::kDirectIoAlign);
  // The cache is the budget's: take its pages now (first-touch faults would otherwise land on the
  // first reads into each slot, inside the token loop).
  std::memset(arena_.data(), 0, arena_.size());
  slots_.resize(n_slots);
  layer_pool_.assign(static_cast<size_t>(cfg_.n_layer), 0);
  pools_.resize(class_plan_.size());
  uint64_t offset = 0;
  size_t si = 0;
  for (size_t c = 0; c < class_plan_.size(); ++c) {
    const SlotClassPlan& cp = class_plan_[c];
    for (int l : cp.layers) layer_pool_[static_cast<size_t>(l)] = static_cast<int>(c);
    const size_t first = si;
    for (int i = 0; i < cp.n_slots; ++i, ++si) {
      slots_[si].data = arena_.data() + offset;
      slots_[si].cls = static_cast<int>(c);
      offset += cp.slot_bytes;
    }
    for (size_t i = si; i > first; --i) pools_[c].free.push_back(static_cast<int>(i - 1));
    cache::PolicyParams pp;
    pp.capacity = static_cast<size_t>(cp.n_slots);
    pp.n_layers = cfg_.n_layer;
    pp.top_k = cfg_.n_expert_used;
    pools_[c].policy = cache::make_policy(opt.policy, pp);
    stats_.slot_classes.emplace_back(cp.slot_bytes, cp.n_slots);
  }
  key_slot_.assign(static_cast<size_t>(cfg_.n_layer) * static_cast<size_t>(cfg_.n_expert), -1);
  uint64_t per_token = 0;
  for (int l = 0; l < cfg_.n_layer; ++l) per_token += layout_.expert_bytes(l) * static_cast<uint64_t>(cfg_.n_expert_used);
  prefetch_budget_bytes_ = static_cast<uint64_t>(opt.prefetch_budget * static_cast<double>(per_token));
  pred_.resize(static_cast<size_t>(cfg_.n_layer));
  for (auto& p : pred_) {
    p.rank.assign(static_cast<size_t>(cfg_.n_expert), 0);
    p.refined.assign(static_cast<size_t>(cfg_.n_expert), 0);
  }
  ahead2_.assign(static_cast<size_t>(cfg_.n_layer), std::vector<uint8_t>(static_cast<size_t>(cfg_.n_expert), 0));
  ahead2_valid_.assign(static_cast<size_t>(cfg_.n_layer), 0);
  ahead2_keys_.resize(static_cast<size_t>(cfg_.n_layer));
  ahead2_issued_.resize(static_cast<size_t>(cfg_.n_layer));
  stats_.layers.resize(static_cast<size_t>(cfg_.n_layer));
  stats_.n_slots = static_cast<int>(slots_.size());
  stats_.slot_bytes = sb;
}

StreamingExperts::~StreamingExperts() {
  // Cancel what can be cancelled; the engine's destructor waits for reads in flight, which write
  // into arena_: destroy the engine first.
  for (const auto& [tag, slot] : tag_slot_) io_->cancel(tag);
  io_.reset();
}

void StreamingExperts::reset_stats() {
  for (auto& l : stats_.layers) l = LayerStreamStats{};
  std::fill(std::begin(stats_.guess_issued), std::end(stats_.guess_issued), 0);
  std::fill(std::begin(stats_.guess_used), std::end(stats_.guess_used), 0);
  stats_.tokens = 0;
  io_base_ = io_->counters();
  stats_.io = storage::IoCounters{};
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

void StreamingExperts::submit_read(int si, cache::ExpertKey key, storage::IoPriority prio) {
  Slot& s = slots_[static_cast<size_t>(si)];
  const int layer = cache::key_layer(key), e = cache::key_expert(key);
  storage::IoRequest req;
  req.tag = next_tag_++;
  req.priority = prio;
  for (const SlotRead& r : layout_.reads(layer, e)) req.ops.push_back(storage::IoOp{r.file_offset, r.length, s.data + r.slot_offset});
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

void StreamingExperts::on_router_input(int layer, const float* x_norm, int64_t n_tok) {
  if (layer == 0) {
    stats_.tokens += static_cast<uint64_t>(n_tok);
    ++oracle_step_;
  }
  drain(false, 0);
  if (oracle_replay()) {
    if (opt_.schedule == Schedule::lookahead && n_tok <= 8) oracle_predict(layer);
    return;
  }
  if (opt_.schedule == Schedule::lookahead && layer + 1 < cfg_.n_layer && n_tok <= 8) {
    predict_next(layer, x_norm, n_tok);
    // Two layers ahead: measured (statistics) only; see docs/benchmarks.md for why it is not used.
    if (layer + 2 < cfg_.n_layer && (opt_.measure_ahead2 || opt_.prefetch_ahead2)) {
      const size_t l2 = static_cast<size_t>(layer + 2);
      std::vector<int> order;
      router_ranks(layer + 2, x_norm, n_tok, cfg_.n_expert_used, cfg_.n_expert_used, ahead2_[l2], order);
      ahead2_valid_[l2] = 1;
      ahead2_keys_[l2].clear();
      for (int e : order) ahead2_keys_[l2].push_back(cache::make_key(layer + 2, e));
    }
  }
}

void StreamingExperts::router_ranks(int layer, const float* x, int64_t n_tok, int k, int km,
                                    std::vector<uint8_t>& rank, std::vector<int>& order) {
  const int E = cfg_.n_expert;
  const Matrix& router = model_.weights().layers[static_cast<size_t>(layer)].router;
  pred_logits_.resize(static_cast<size_t>(E) * static_cast<size_t>(n_tok));
  matmul(router, x, n_tok, cfg_.n_embd, pred_logits_.data(), E, pred_pool_, pred_acts_);
  rank.assign(static_cast<size_t>(E), 0);
  std::vector<float> best(static_cast<size_t>(E), -INFINITY);  // best logit of each expert over tokens
  std::vector<int> idx(static_cast<size_t>(E));
  for (int64_t t = 0; t < n_tok; ++t) {
    const float* lg = pred_logits_.data() + static_cast<size_t>(t) * static_cast<size_t>(E);
    for (int e = 0; e < E; ++e) idx[static_cast<size_t>(e)] = e;
    std::partial_sort(idx.begin(), idx.begin() + km, idx.end(),
                      [&](int a, int b) { return lg[a] > lg[b] || (lg[a] == lg[b] && a < b); });
    for (int r = 0; r < km; ++r) {
      const size_t e = static_cast<size_t>(idx[static_cast<size_t>(r)]);
      const uint8_t rk = r < k ? 1 : 2;
      if (rank[e] == 0 || rk < rank[e]) rank[e] = rk;
      best[e] = std::max(best[e], lg[e]);
    }
  }
  order.clear();
  for (int e = 0; e < E; ++e) if (rank[static_cast<size_t>(e)]) order.push_back(e);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    const size_t ua = static_cast<size_t>(a), ub = static_cast<size_t>(b);
    return rank[ua] != rank[ub] ? rank[ua] < rank[ub] : best[ua] > best[ub];
  });
}

void StreamingExperts::on_layer_output(int layer, const float* h, int64_t n_tok) {
  const int next = layer + 1;
  if (opt_.schedule != Schedule::lookahead || !opt_.refine || next >= cfg_.n_layer || n_tok > 8 || oracle_replay()) return;
  const LayerWeights& L = model_.weights().layers[static_cast<size_t>(next)];
  if (!L.router.present() || L.ffn_norm.data == nullptr) return;
  drain(false, 0);
  const int64_t E = cfg_.n_embd;
  refine_x_.resize(static_cast<size_t>(n_tok * E));
  for (int64_t t = 0; t < n_tok; ++t) {
    ops::rms_norm(h + t * E, L.ffn_norm.data, refine_x_.data() + t * E, E, cfg_.rms_eps);
  }
  Prediction& pd = pred_[static_cast<size_t>(next)];
  std::vector<int> order;
  router_ranks(next, refine_x_.data(), n_tok, cfg_.n_expert_used, cfg_.n_expert_used, pd.refined, order);
  pd.has_refined = true;
  if (!pd.valid) {
    pd.valid = true;
    pd.issued = true;
    pd.keys.clear();
    std::fill(pd.rank.begin(), pd.rank.end(), 0);
  }
  LayerStreamStats& ls = stats_.layers[static_cast<size_t>(next)];
  if (opt_.refine_cancel) {
    for (const auto* keys : {&pd.keys, &ahead2_issued_[static_cast<size_t>(next)]}) {
      for (cache::ExpertKey key : *keys) {
        if (pd.refined[static_cast<size_t>(cache::key_expert(key))]) continue;
        const int si = slot_of(key);
        if (si >= 0 && cancel_prefetch(si)) ++ls.prefetch_cancelled;
      }
    }
  }
  begin_batch();
  for (int e : order) {
    if (pd.rank[static_cast<size_t>(e)] != 0) continue;  // the early guess has it already
    const cache::ExpertKey key = cache::make_key(next, e);
    pd.keys.push_back(key);
    if (!prefetch_one(key, next, kGuessRefined)) break;
  }
  flush_batch();
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

void StreamingExperts::predict_next(int layer, const float* x_norm, int64_t n_tok) {
  const int next = layer + 1;
  const int K = cfg_.n_expert_used;
  const int KM = std::min(cfg_.n_expert, K + std::max(0, opt_.predict_extra));
  Prediction& pd = pred_[static_cast<size_t>(next)];
  std::vector<int> order;
  router_ranks(next, x_norm, n_tok, K, KM, pd.rank, order);
  pd.keys.clear();
  for (int e : order) pd.keys.push_back(cache::make_key(next, e));
  pd.valid = true;

  pd.issued = false;
}

void StreamingExperts::oracle_predict(int layer) {
  const int L = cfg_.n_layer;
  const int depth = std::clamp(opt_.oracle_depth, 1, L - 1);
  for (int d = 1; d <= depth; ++d) {
    const int target = (layer + d) % L;
    const std::vector<int32_t>* ids = opt_.oracle->lookup(oracle_step_ + (layer + d) / L, target);
    if (ids == nullptr) continue;
    const size_t t = static_cast<size_t>(target);
    std::vector<uint8_t>& rank = d == 1 ? pred_[t].rank : ahead2_[t];
    std::vector<cache::ExpertKey>& keys = d == 1 ? pred_[t].keys : ahead2_keys_[t];
    std::fill(rank.begin(), rank.end(), 0);
    keys.clear();
    for (int32_t e : *ids) {
      rank[static_cast<size_t>(e)] = 1;
      keys.push_back(cache::make_key(target, e));
    }
    if (d == 1) {
      pred_[t].valid = true;
      pred_[t].issued = false;
    } else {
      ahead2_valid_[t] = 1;
    }
  }
}

void StreamingExperts::begin_batch() { batching_ = true; }

void StreamingExperts::flush_batch() {
  batching_ = false;
  if (batch_.empty()) return;
  std::vector<storage::IoRequest> reqs;
  reqs.swap(batch_);
  io_->submit_batch(std::move(reqs));
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
  if (token_prefetch_bytes_ + eb > prefetch_budget_bytes_) return false;
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

void StreamingExperts::with_experts(int layer, std::span<const int32_t> ids,
                                    const std::function<void(size_t, const ExpertView&)>& run) {
  const double t_start = now_s();
  double compute = 0;
  ++step_;
  drain(false, 0);
  LayerStreamStats& ls = stats_.layers[static_cast<size_t>(layer)];
  const uint64_t eb = layout_.expert_bytes(layer);
  const size_t n = ids.size();
  Prediction& pd = pred_[static_cast<size_t>(layer)];
  const bool have_pred = pd.valid;
  pd.valid = false;  // consumed: stale after this layer
  const std::vector<cache::ExpertKey>& predicted_ = pd.keys;
  const std::vector<uint8_t>& pred_rank_ = pd.rank;

  // Predictions for this layer that were not selected: cancel reads that have not started; the
  // others' bytes are wasted (counted now; the slot is evicted first when space is needed).
  std::vector<cache::ExpertKey> guessed;
  if (have_pred) guessed = predicted_;
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
  const bool have_refined = pd.has_refined;
  pd.has_refined = false;
  const bool have_ahead2 = ahead2_valid_[static_cast<size_t>(layer)] != 0;
  ahead2_valid_[static_cast<size_t>(layer)] = 0;

  policy_of_layer(layer).on_route(layer, ids.data(), static_cast<int>(n), clock_);
  if (opt_.oracle && opt_.oracle_record) opt_.oracle->record(oracle_step_, layer, ids);

  // Classify: resident (compute first), in flight (promote), missing (demand read).
  std::vector<int> slot_of_i(n, -1);
  std::vector<uint8_t> done(n, 0);
  std::vector<size_t> ready, waiting, deferred;
  for (size_t i = 0; i < n; ++i) {
    const cache::ExpertKey key = cache::make_key(layer, ids[i]);
    ++ls.selected;
    if (have_pred) {
      const uint8_t r = pred_rank_[static_cast<size_t>(ids[i])];
      const bool refined = have_refined && pd.refined[static_cast<size_t>(ids[i])];
      if (r == 1) ++ls.raw_pred_hits_k;
      if (r >= 1) ++ls.raw_pred_hits_km;
      if (refined) ++ls.raw_refined_hits_k;
      if (r >= 1 || refined) ++ls.predicted;
    }
    if (have_ahead2) {
      ++ls.ahead2_selected;
      if (ahead2_[static_cast<size_t>(layer)][static_cast<size_t>(ids[i])]) ++ls.raw_ahead2_hits_k;
    }
    const int si = slot_of(key);
    if (si >= 0 && slots_[static_cast<size_t>(si)].state == SlotState::ready) {
      ++ls.hits;
      ++slots_[static_cast<size_t>(si)].pins;
      slot_of_i[i] = si;
      ready.push_back(i);
    } else if (si >= 0) {
      ++ls.in_flight;
      ++slots_[static_cast<size_t>(si)].pins;
      io_->promote(slots_[static_cast<size_t>(si)].tag);
      slots_[static_cast<size_t>(si)].speculative = false;
      slot_of_i[i] = si;
      waiting.push_back(i);
    } else {
      ++ls.misses;
      deferred.push_back(i);
    }
  }

  auto issue_deferred = [&] {
    while (!deferred.empty()) {
      const int si = acquire_slot(layer, true);
      if (si < 0) return;
      const size_t i = deferred.front();
      deferred.erase(deferred.begin());
      const cache::ExpertKey key = cache::make_key(layer, ids[i]);
      Slot& s = slots_[static_cast<size_t>(si)];
      s.prefetched = false;
      s.demand_fresh = true;  // the policy counts a demand insert as this use
      s.pins = 1;
      policy_of(key).on_insert(key, clock_++);
      submit_read(si, key, storage::IoPriority::demand);
      ls.bytes_demand += eb;
      slot_of_i[i] = si;
      waiting.push_back(i);
    }
  };
  auto run_one = [&](size_t i) {
    Slot& s = slots_[static_cast<size_t>(slot_of_i[i])];
    LES_ASSERT(s.state == SlotState::ready);
    const double t0 = now_s();
    run(i, layout_.view(layer, ids[i], s.data));
    compute += now_s() - t0;
    if (s.prefetched) {
      s.prefetched = false;
      ++ls.prefetch_used;
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
    done[i] = 1;
  };

  // Demand reads of this layer are queued first; then the next layer's predicted experts: one
  // submission for all of them.
  begin_batch();
  issue_deferred();
  if (opt_.schedule == Schedule::lookahead) {
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
  flush_batch();
  const bool eager = opt_.schedule == Schedule::lookahead;
  if (eager) {
    for (size_t i : ready) run_one(i);
    ready.clear();
  }
  size_t remaining = 0;
  for (size_t i = 0; i < n; ++i) remaining += !done[i];
  while (remaining > 0) {
    // Compute whatever is ready (lookahead: as soon as it arrives; ondemand: once nothing of this
    // layer is in flight, in router order).
    bool any_in_flight = false;
    for (size_t i : waiting) {
      if (!done[i] && slots_[static_cast<size_t>(slot_of_i[i])].state == SlotState::loading) any_in_flight = true;
    }
    if (eager || !any_in_flight) {
      std::vector<size_t> now;
      for (size_t i : ready) if (!done[i]) now.push_back(i);
      for (size_t i : waiting) {
        if (!done[i] && slots_[static_cast<size_t>(slot_of_i[i])].state == SlotState::ready) now.push_back(i);
      }
      if (!eager) std::sort(now.begin(), now.end());
      for (size_t i : now) {
        run_one(i);
        --remaining;
      }
      if (!now.empty()) {
        issue_deferred();
        continue;
      }
    }
    if (remaining == 0) break;
    if (io_->pending() == 0 && !any_in_flight) {
      issue_deferred();
      if (deferred.size() == remaining) {
        throw Error(strfmt("expert cache of %zu slots cannot make progress at layer %d (all slots pinned)",
                           slots_.size(), layer));
      }
      continue;
    }
    drain(true, 1000000);
    issue_deferred();
  }
  ls.compute_s += compute;
  ls.stall_s += (now_s() - t_start) - compute;
}

bool StreamingExperts::throttled(int guess) {
  if (!opt_.throttle || guess_n_[guess] < 8) return false;  // too few outcomes to judge
  if (guess_hit_[guess] / guess_n_[guess] >= opt_.throttle_factor * disk_busy_) return false;
  // Let every 8th one through so that the source's precision keeps being measured.
  return ++guess_skips_[guess] % 8 != 0;
}

void StreamingExperts::record_guess(int guess, bool used) {
  constexpr double kDecay = 0.99;  // ~100 recent outcomes per source
  guess_n_[guess] = guess_n_[guess] * kDecay + 1.0;
  guess_hit_[guess] = guess_hit_[guess] * kDecay + (used ? 1.0 : 0.0);
}

void StreamingExperts::on_token_done() {
  token_prefetch_bytes_ = 0;
  const storage::IoCounters c = io_->counters();
  const double t = now_s();
  if (last_token_t_ > 0 && t > last_token_t_) {
    disk_busy_ = std::min(1.0, 1e-6 * static_cast<double>(c.busy_us - last_busy_us_) / (t - last_token_t_));
    const double nonspec =
        std::min(1.0, 1e-6 * static_cast<double>(c.busy_nonspec_us - last_busy_nonspec_us_) / (t - last_token_t_));
    disk_busy_nonspec_ = 0.7 * disk_busy_nonspec_ + 0.3 * nonspec;
  }
  last_busy_nonspec_us_ = c.busy_nonspec_us;
  last_token_t_ = t;
  last_busy_us_ = c.busy_us;
  storage::IoCounters d = c;
  d.requests -= io_base_.requests; d.errors -= io_base_.errors; d.cancelled -= io_base_.cancelled;
  d.promoted -= io_base_.promoted; d.ops -= io_base_.ops; d.syscalls -= io_base_.syscalls;
  d.submit_calls -= io_base_.submit_calls; d.bytes -= io_base_.bytes; d.retries -= io_base_.retries;
  d.short_reads -= io_base_.short_reads; d.busy_us -= io_base_.busy_us;
  d.busy_nonspec_us -= io_base_.busy_nonspec_us;
  stats_.io = d;
}

}  // namespace les
