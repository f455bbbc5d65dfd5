// StreamingExperts: construction, options, statistics and per-token accounting. The scheduler's
// other concerns have their own files: the slot cache (streaming_slots.cpp), the I/O queue and its
// priorities (streaming_io.cpp), the predictor (streaming_predictor.cpp) and the resident-first
// executor (streaming_executor.cpp).
//
// Owns: opening the model file, the slot arena (its pages taken up front), the I/O engine and its
//   options, the per-token prefetch byte budget, StreamStats (reset_stats, the I/O counters since
//   the last reset) and the disk's measured busy fraction (on_token_done), which the throttle and
//   the two-ahead prefetches read.
// Promises: the destructor cancels what it can and waits for reads in flight before the arena
//   they write into is freed. Statistics never influence results.
// Relies on: ExpertLayout for slot sizes and reads; cache::make_policy for each pool's policy.
#include "les/sched/streaming_experts.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "les/util/error.h"
#include "les/util/clock.h"

namespace les {

namespace {

std::shared_ptr<storage::ReadFile> open_model_file(const Model& model, const StreamingOptions& opt) {
  if (opt.file) return opt.file;
  if (opt.io_mode == storage::IoMode::naive) return storage::open_buffered(model.path());
  return storage::open_direct(model.path());
}

// Threads that zero the expert arena at startup (nothing else runs yet): every core, at most 8.
int startup_threads() { return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 8u)); }

// The engine's counters since `base` (max_in_flight is a maximum, kept as is). A counter added to
// IoCounters changes its size and stops the build here until it is subtracted too (fixed_reads
// once was not, and the stats compared counts of different intervals).
storage::IoCounters counters_since(const storage::IoCounters& now, const storage::IoCounters& base) {
  static_assert(sizeof(storage::IoCounters) == 14 * sizeof(uint64_t), "subtract the new IoCounters field below");
  storage::IoCounters d = now;
  d.requests -= base.requests;
  d.errors -= base.errors;
  d.cancelled -= base.cancelled;
  d.promoted -= base.promoted;
  d.ops -= base.ops;
  d.syscalls -= base.syscalls;
  d.submit_calls -= base.submit_calls;
  d.bytes -= base.bytes;
  d.retries -= base.retries;
  d.short_reads -= base.short_reads;
  d.busy_us -= base.busy_us;
  d.busy_nonspec_us -= base.busy_nonspec_us;
  d.fixed_reads -= base.fixed_reads;
  return d;
}

}  // namespace

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

std::vector<uint64_t> StreamingExperts::layer_slot_bytes_for(const Model& model, storage::IoMode mode) {
  const ExpertLayout layout(model, mode == storage::IoMode::naive ? 1 : storage::kDirectIoAlign);
  std::vector<uint64_t> out(static_cast<size_t>(layout.n_layer()));
  for (int l = 0; l < layout.n_layer(); ++l) out[static_cast<size_t>(l)] = layout.slot_bytes(l);
  return out;
}

StreamingExperts::StreamingExperts(const Model& model, const StreamingOptions& opt)
    : model_(model),
      cfg_(model.config()),
      opt_(opt),
      file_(open_model_file(model, opt)),
      layout_(model, file_->alignment()) {
  if (!cfg_.moe) throw Error("expert streaming needs a mixture-of-experts model");
  if (opt.read_chunk > 0 && opt.read_chunk % std::max<size_t>(file_->alignment(), 1) != 0) {
    throw Error(strfmt("the read chunk (%llu bytes) must be a multiple of %zu (the file's direct I/O alignment)",
                       static_cast<unsigned long long>(opt.read_chunk), file_->alignment()));
  }
  if (opt.verify_reads && !layout_.has_checksums()) {
    throw Error(strfmt("%s: verifying expert reads needs a packed model with expert checksums (les pack); this "
                       "file has none", model.path().c_str()));
  }
  const uint64_t sb = layout_.slot_bytes();
  // Expert layers: the trunk's, plus layer n_layer when the model has an MTP block (its experts go
  // through the same cache; the predictor and the per-token prefetch budget cover the trunk only).
  const size_t n_xl = static_cast<size_t>(layout_.n_layer());
  std::vector<uint64_t> layer_slot(n_xl);
  for (int l = 0; l < layout_.n_layer(); ++l) layer_slot[static_cast<size_t>(l)] = layout_.slot_bytes(l);
  class_plan_ = plan_slot_classes(layer_slot, cfg_.n_expert, cfg_.n_expert_used, opt.cache_bytes);
  storage::IoOptions io = opt.io;
  io.queue_depth = opt.queue_depth;
  io.n_threads = opt.io_threads;
  io.prefetch_bytes = opt.prefetch_inflight > 0 ? opt.prefetch_inflight : 2 * sb;
  bool one_read = opt.read_chunk == 0;
  for (int l = 0; l < layout_.n_layer() && one_read; ++l) one_read = !layout_.has_experts(l) || layout_.one_extent(l);
  io.uring_completion_thread = opt.io_completion_thread >= 0 ? opt.io_completion_thread != 0 : !one_read;
  io_ = storage::make_io_engine(opt.io_mode, file_, io);
  stats_.completions_by = io_->completions_reaped_by();
  uint64_t arena_bytes = 0;
  size_t n_slots = 0;
  for (const auto& c : class_plan_) {
    arena_bytes += static_cast<uint64_t>(c.n_slots) * c.slot_bytes;
    n_slots += static_cast<size_t>(c.n_slots);
  }
  if (opt.withheld_bytes > arena_bytes) {
    throw Error(strfmt("withheld expert cache bytes (%.1f MiB) exceed the cache (%.1f MiB)",
                       opt.withheld_bytes / 1048576.0, arena_bytes / 1048576.0));
  }
  arena_ = storage::AlignedBuffer(static_cast<size_t>(arena_bytes), storage::kDirectIoAlign);
  slots_.resize(n_slots);
  layer_pool_.assign(n_xl, 0);
  pools_.resize(class_plan_.size());
  withheld_.assign(class_plan_.size(), 0);
  uint64_t offset = 0;
  size_t si = 0;
  std::vector<std::pair<uint8_t*, size_t>> active_regions;
  for (size_t c = 0; c < class_plan_.size(); ++c) {
    const SlotClassPlan& cp = class_plan_[c];
    for (int l : cp.layers) layer_pool_[static_cast<size_t>(l)] = static_cast<int>(c);
    pools_[c].first = si;
    for (int i = 0; i < cp.n_slots; ++i, ++si) {
      slots_[si].data = arena_.data() + offset;
      slots_[si].cls = static_cast<int>(c);
      offset += cp.slot_bytes;
    }
    // Withheld: each pool's share of withheld_bytes (in proportion to its bytes, rounded up so
    // that at least withheld_bytes stay untouched), its last slots, never below the minimum.
    const uint64_t pool_bytes = static_cast<uint64_t>(cp.n_slots) * cp.slot_bytes;
    const double share = static_cast<double>(opt.withheld_bytes) * static_cast<double>(pool_bytes) /
                         static_cast<double>(std::max<uint64_t>(arena_bytes, 1));
    const int want = static_cast<int>(std::ceil(share / static_cast<double>(cp.slot_bytes)));
    withheld_[c] = std::clamp(want, 0, std::max(0, cp.n_slots - cfg_.n_expert_used));
    // The cache is the budget's: take the pages of the slots in use now (first-touch faults would
    // otherwise land on the first reads into each slot, inside the token loop); withheld slots
    // stay untouched (not resident) until release_withheld().
    const int active = cp.n_slots - withheld_[c];
    arena_.populate_parallel(static_cast<size_t>(slots_[pools_[c].first].data - arena_.data()),
                             static_cast<size_t>(active) * cp.slot_bytes, startup_threads());
    if (active > 0) active_regions.emplace_back(slots_[pools_[c].first].data, static_cast<size_t>(active) * cp.slot_bytes);
    stats_.slot_classes.emplace_back(cp.slot_bytes, active);
  }
  // Registered buffers: the slots in use now (withheld slots stay untouched, and read as before
  // once released).
  if (opt.register_buffers && !active_regions.empty()) {
    stats_.registered_bytes = io_->register_buffers(active_regions, &stats_.register_note);
  }
  reset_pools();
  key_slot_.assign(n_xl * static_cast<size_t>(cfg_.n_expert), -1);
  uint64_t per_token = 0;
  for (int l = 0; l < cfg_.n_layer; ++l) per_token += layout_.expert_bytes(l) * static_cast<uint64_t>(cfg_.n_expert_used);
  prefetch_budget_bytes_ = static_cast<uint64_t>(opt.prefetch_budget * static_cast<double>(per_token));
  pred_.resize(n_xl);
  for (auto& p : pred_) {
    p.rank.assign(static_cast<size_t>(cfg_.n_expert), 0);
    p.refined.assign(static_cast<size_t>(cfg_.n_expert), 0);
  }
  ahead2_.assign(n_xl, std::vector<uint8_t>(static_cast<size_t>(cfg_.n_expert), 0));
  ahead2_valid_.assign(n_xl, 0);
  ahead2_keys_.resize(n_xl);
  ahead2_issued_.resize(n_xl);
  stats_.layers.resize(n_xl);
  stats_.n_slots = active_slots();
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
  stats_.io = counters_since(c, io_base_);
}

}  // namespace les
