// Routed experts streamed from storage through a fixed expert cache, with lookahead expert
// scheduling (policy) over the storage engine (mechanism):
//
//  - ondemand:  after a layer's router picks, read the missing experts, wait for all, compute.
//  - lookahead: while layer l computes, layer l+1's router applied to layer l's router input
//               predicts layer l+1's experts (top k+m); predicted experts that are not resident are
//               prefetched behind demand reads, within a per-token byte budget, and protected from
//               eviction until used or expired. At layer l+1 the resident selected experts compute
//               first while missing ones are read at demand priority (queued prefetches of needed
//               experts are promoted), each computing as soon as it arrives. Predictions that were
//               not selected are cancelled if their read has not started.
//
// Results never depend on the schedule: the forward pass combines expert outputs in router order.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "les/cache/policy.h"
#include "les/model/expert_source.h"
#include "les/model/matmul.h"
#include "les/model/model.h"
#include "les/util/thread_pool.h"
#include "les/storage/expert_layout.h"
#include "les/sched/routing_oracle.h"
#include "les/storage/io.h"

namespace les {

enum class Schedule { ondemand, lookahead };
const char* schedule_name(Schedule s);
Schedule parse_schedule(const std::string& s);  // throws les::Error listing the choices

struct StreamingOptions {
  Schedule schedule = Schedule::lookahead;
  uint64_t cache_bytes = 0;     // bytes for expert slots (slots = cache_bytes / slot bytes)
  // Of cache_bytes, bytes of slots withheld until release_withheld() (at least this many; each
  // pool keeps at least n_expert_used slots in use).
  uint64_t withheld_bytes = 0;
  int predict_extra = 0;        // m: prefetch the top k+m (0 measured best: docs/benchmarks.md)
  // Refine: when layer l's output is known, apply layer l+1's norm and router to it and prefetch
  // the experts of its top k that the early guess missed (a better guess with less time left).
  bool refine = true;
  // Cancel early-guess prefetches the refined guess drops, if their reads have not started.
  bool refine_cancel = true;
  // Also compute a guess two layers ahead (layer l+2's router on layer l's router input) for
  // the statistics (raw_ahead2_hits_k); it costs one more router product per layer.
  bool measure_ahead2 = false;
  // Prefetch that two-ahead guess too (implies measure_ahead2), at speculative I/O priority:
  // its reads start only when the disk has nothing else to do, a deeper pipeline at lower
  // precision that never delays the next layer's reads. A nearer guess for the same expert
  // raises its read to prefetch priority; unstarted reads a later guess drops are cancelled.
  bool prefetch_ahead2 = false;
  // ... but only while the disk's busy fraction with demand and prefetch reads (recent tokens)
  // is at most this: above it there is too little idle time to fill, and a speculative read in
  // flight delays the demand read that arrives behind it.
  double ahead2_max_busy = 0.7;
  // Throttle: skip a prefetch whose guess source has recently been right less often than
  // 0.5 x the disk's busy fraction over the last token. A wrong read costs nothing when the disk
  // would have idled and a whole read's time when it is saturated, while a right one saves a
  // read's stall: at utilisation u, prefetching pays when precision > u / 2. Off by default:
  // measured, it did not pay in the configurations of docs/benchmarks.md (a skipped right guess
  // becomes a stall, and the disk was never saturated enough for wrong ones to cost as much).
  bool throttle = false;
  double throttle_factor = 0.5;  // the throttle's threshold is this x the disk's busy fraction
  // >= 0: the throttle takes this as the disk's busy fraction instead of measuring it (tests and
  // experiments that must not depend on how fast this machine computes beside the disk).
  double fixed_disk_busy = -1;
  // Replay a recorded routing as a perfect guess (a benchmark instrument, routing_oracle.h):
  // the lookahead schedule then prefetches the recorded selection of the next oracle_depth
  // layers (1 .. n_layer-1; the next step's first layers included) instead of the router's
  // guesses, and does not refine. With oracle_record the run records its routing instead.
  std::shared_ptr<RoutingOracle> oracle;
  bool oracle_record = false;
  int oracle_depth = 1;
  double prefetch_budget = 1.5; // per pass, prefetch bytes at most this x (k x n_layer x expert) x its positions (<= 8)
  std::string policy = cache::kDefaultPolicy;  // eviction policy name (cache/policy.h)
  storage::IoMode io_mode = storage::default_io_mode();  // uring where the kernel allows it, else pread
  int queue_depth = 8;
  // Prefetch bytes in the device at a time (0: auto, two experts' reads). Demand reads wait
  // behind whatever is in flight, so this bounds the latency prefetching adds to a miss.
  uint64_t prefetch_inflight = 0;
  int io_threads = 0;           // pread/naive worker threads (0: queue depth)
  // io_uring: who reaps completions (storage::IoOptions::uring_completion_thread). -1: decided
  // by the layout, measured (docs/io.md): a completion thread where an expert is several reads
  // (the original GGUF layout, or chunked reads), the decoding thread where it is one (packed).
  int io_completion_thread = -1;
  // Read shaping: an expert's extents are read as aligned chunks of at most this many bytes, in
  // flight at once and landing in the same slot (0: each extent in one read). A disk that serves
  // several parallel reads faster than one large one reads a packed expert faster this way.
  uint64_t read_chunk = 0;
  // Choose read_chunk from the device probe (sched/io_probe.h) when the engine starts: chunks
  // where the probe says they read an expert faster than whole reads (by 5% or more), else 0.
  // Resolved by les::Engine (StreamingExperts itself reads read_chunk only).
  bool read_chunk_auto = false;
  // io_uring: register the expert slots in use as fixed buffers (reads go as READ_FIXED, without
  // the kernel pinning each read's pages). Falls back to plain reads when the kernel refuses.
  bool register_buffers = true;
  std::shared_ptr<storage::ReadFile> file;  // null: open the model file (direct unless naive)
  // Check every expert read against the checksum recorded by les pack (xxh3-64 of its bytes, on
  // the calling thread as the read completes). A mismatch is retried like a failed read, then
  // reported as an error naming the layer and expert; its bytes are never computed with. Needs
  // a packed model (the constructor throws otherwise).
  bool verify_reads = false;
  storage::IoOptions io{};      // fake-backend faults for tests (io_mode fake)
};

struct LayerStreamStats {
  uint64_t selected = 0;         // experts the router selected (summed over tokens/batches)
  uint64_t hits = 0;             // selected and resident (ready) when the layer started
  uint64_t in_flight = 0;        // selected and being read when the layer started
  uint64_t predicted = 0;        // selected and in the layer's prediction
  uint64_t misses = 0;           // selected, neither resident nor in flight: demand read
  uint64_t prefetch_issued = 0;  // prefetch reads submitted
  uint64_t prefetch_used = 0;    // prefetched experts later selected
  uint64_t prefetch_cancelled = 0;
  uint64_t prefetch_throttled = 0;  // prefetches skipped by the throttle
  uint64_t bytes_demand = 0, bytes_prefetch = 0, bytes_wasted = 0;  // wasted: prefetched, never used
  double stall_s = 0;            // waiting for reads inside the layer
  double compute_s = 0;          // computing the layer's experts
  uint64_t raw_pred_hits_k = 0;  // raw predictor: selected experts in its top k
  uint64_t raw_pred_hits_km = 0; // ... in its top k+m
  uint64_t raw_refined_hits_k = 0;  // selected experts in the refined guess's top k (layer l's output)
  uint64_t raw_ahead2_hits_k = 0;   // selected experts in the top k of a guess two layers ahead
  uint64_t ahead2_selected = 0;     // selected experts of layers that had a two-ahead guess
};

// Prefetches by where their guess came from: the early guess's position (best logit first;
// positions past kGuessPositions-1 share the last), the refined guess's additions, the
// two-ahead guess. Precision per source says which guesses pay for their reads.
inline constexpr int kGuessPositions = 16;
inline constexpr int kGuessRefined = kGuessPositions;
inline constexpr int kGuessAhead2 = kGuessPositions + 1;
inline constexpr int kGuessSources = kGuessPositions + 2;

struct StreamStats {
  std::vector<LayerStreamStats> layers;
  uint64_t guess_issued[kGuessSources] = {};  // prefetches issued per guess source
  uint64_t guess_used[kGuessSources] = {};    // ... later selected
  LayerStreamStats total() const;
  uint64_t tokens = 0;           // tokens evaluated (batches count their tokens)
  int n_slots = 0;
  uint64_t slot_bytes = 0;      // the largest slot
  std::vector<std::pair<uint64_t, int>> slot_classes;  // (slot bytes, slots) per pool
  storage::IoCounters io{};
  uint64_t registered_bytes = 0;  // expert slot bytes registered as io_uring fixed buffers
  std::string register_note;      // why none were, when register_buffers was asked for
  std::string completions_by;     // which thread collects completed reads (IoEngine::completions_reaped_by)
};

// Slot classes: a file whose layers hold experts of different types (mixed precision) needs slots
// of different sizes. Layers whose experts need the same slot size share a pool of slots with its
// own eviction policy; the cache's bytes are split between the pools in proportion to the bytes of
// the experts each pool serves (every pool then holds about the same fraction of its experts, as
// one pool of equal slots would), at least min_slots slots each, leftovers to the pool holding the
// smallest fraction. One size: one pool of cache_bytes / size slots, as before.
struct SlotClassPlan {
  uint64_t slot_bytes = 0;
  std::vector<int> layers;
  int n_slots = 0;
};
// layer_slot_bytes: [n_layer]. Throws les::Error (naming the sizes) when the cache cannot give
// every pool min_slots slots.
std::vector<SlotClassPlan> plan_slot_classes(const std::vector<uint64_t>& layer_slot_bytes, int n_expert,
                                             int min_slots, uint64_t cache_bytes);

// One file per concern: streaming_experts.cpp (construction, stats), streaming_slots.cpp (slot
// pools and eviction), streaming_io.cpp (reads, priorities, prefetch issue), streaming_predictor.cpp
// (guesses), streaming_executor.cpp (with_experts: resident first). Each file's head states its
// contract.
class StreamingExperts final : public ExpertSource {
 public:
  // model must have been loaded with map_experts = false (or true: then only the layout is used).
  StreamingExperts(const Model& model, const StreamingOptions& opt);
  ~StreamingExperts() override;

  void on_router_input(int layer, const float* x_norm, int64_t n_tok) override;
  void on_layer_output(int layer, const float* h, int64_t n_tok) override;
  void with_experts(int layer, std::span<const int32_t> ids,
                    const std::function<void(size_t, const ExpertView&)>& run) override;
  void on_token_done() override;
  void service_io() override { drain(false, 0); }
  uint64_t bytes_read() const override {
    const LayerStreamStats t = stats_.total();
    return t.bytes_demand + t.bytes_prefetch;
  }

  const StreamStats& stats() const { return stats_; }
  void reset_stats();
  // Forgets every cached expert and prediction (a cold cache, as after construction) without
  // giving the arena back: waits for the reads in flight, then frees every slot, restarts each
  // pool's eviction policy and resets the statistics. For benchmarks that start each run cold
  // (allocating and touching a multi-GiB arena again would cost seconds).
  void clear();
  // Slots withheld at construction (StreamingOptions::withheld_bytes): their memory is never
  // touched and they hold no expert until release_withheld() puts them in use (e.g. when a
  // speculative drafter whose bytes the budget set aside has been released). Returns the bytes
  // put in use (0 if none were withheld).
  uint64_t release_withheld();
  uint64_t withheld_bytes() const;
  double withheld_share() const;  // withheld bytes / the arena's bytes
  int active_slots() const;  // slots in use (n_slots() less the withheld ones)
  int n_slots() const { return static_cast<int>(slots_.size()); }
  const std::vector<SlotClassPlan>& slot_classes() const { return class_plan_; }
  uint64_t slot_bytes() const { return layout_.slot_bytes(); }
  // The largest expert slot of the model read through `mode` (for budget arithmetic).
  static uint64_t slot_bytes_for(const Model& model, storage::IoMode mode);
  // The slot size of every expert layer ([n expert layers]: the trunk's, and the MTP block's).
  static std::vector<uint64_t> layer_slot_bytes_for(const Model& model, storage::IoMode mode);

 private:
  enum class SlotState : uint8_t { free, loading, ready };
  struct Slot {
    cache::ExpertKey key = 0;
    SlotState state = SlotState::free;
    int pins = 0;
    uint64_t tag = 0;
    bool prefetched = false;     // filled by a prefetch and not used since
    bool demand_fresh = false;   // demand-loaded, first use not yet computed
    bool waste_counted = false;  // prefetched for a layer that did not select it (bytes counted)
    uint8_t guess = 0;           // guess source of a prefetch (kGuess*)
    bool speculative = false;    // being read at speculative I/O priority
    uint64_t protect_until = 0;  // step (layer counter) until which a prediction protects it
    uint8_t* data = nullptr;
    int cls = 0;                 // slot class (pool) of the slot
    int retries = 0;
  };
  // A pool of equal slots (plan_slot_classes) with its own eviction policy.
  struct SlotPool {
    size_t first = 0;        // its slots are slots_[first, first + n_slots) of its class plan
    std::unique_ptr<cache::EvictionPolicy> policy;
    std::vector<int> free;   // free slots
    std::vector<int> stale;  // slots holding prefetched experts predicted wrongly
  };

  static void reset_slot(Slot& s);  // back to free, keeping its memory
  // Cancels the unstarted prefetch read of slot si (an unpinned prefetched slot), freeing the
  // slot; false if the read started or the slot is not such a prefetch.
  bool cancel_prefetch(int si);
  int slot_of(cache::ExpertKey k) const { return key_slot_[index(k)]; }
  size_t index(cache::ExpertKey k) const;
  // A free slot of `layer`'s pool, evicting if needed; -1 if none can be had. demand: may evict
  // protected slots.
  int acquire_slot(int layer, bool demand);
  cache::EvictionPolicy& policy_of_layer(int layer) {
    return *pools_[static_cast<size_t>(layer_pool_[static_cast<size_t>(layer)])].policy;
  }
  cache::EvictionPolicy& policy_of(cache::ExpertKey k) { return policy_of_layer(cache::key_layer(k)); }
  void evict(int slot);
  void submit_read(int slot, cache::ExpertKey key, storage::IoPriority prio);
  // Processes completions (blocking up to timeout_us if block); returns how many arrived.
  size_t drain(bool block, int64_t timeout_us);
  void on_complete(const storage::IoCompletion& c);
  // Computes the prediction for layer+1 (no I/O); issue_prefetch submits its reads later, behind
  // the demand reads of the current layer.
  void predict_next(int layer, const float* x_norm, int64_t n_tok);
  // Oracle replay: the recorded selections of the next oracle_depth layers as the guesses.
  void oracle_predict(int layer);
  bool oracle_replay() const { return opt_.oracle && !opt_.oracle_record; }
  void issue_prefetch(int layer);
  // Between begin_batch() and flush_batch(), reads are collected and then submitted at once
  // (one io_uring_submit for a layer's demand reads and prefetches).
  void begin_batch();
  void flush_batch();
  // Prefetches one expert of `layer` unless resident, in flight or over budget; false when no
  // slot or budget is left.
  bool prefetch_one(cache::ExpertKey key, int layer, int guess);
  // `layer`'s router on x [n_tok][n_embd]: rank[e] = 1 when e is in some token's top k, 2 when
  // only in a top km (km >= k), else 0; order = the ranked experts, rank 1 first, each rank by
  // the expert's best logit over the tokens (descending).
  void router_ranks(int layer, const float* x, int64_t n_tok, int k, int km, std::vector<uint8_t>& rank,
                    std::vector<int>& order);
  // After a layer's demand reads: the next layer's guesses at prefetch priority, then the deeper
  // ones (two-ahead, or the oracle's) nearest layer first, at speculative priority.
  void issue_lookahead_prefetches(int layer);

  // with_experts in steps (streaming_executor.cpp); LayerRun is one call's state.
  struct LayerRun;
  // The layer's guesses that it did not select: unstarted reads cancelled, the rest counted as
  // wasted and marked stale (evicted first).
  void settle_guesses(LayerRun& r, bool have_pred);
  // Counts the selection against the guesses; sorts it into resident (pinned), in flight
  // (pinned, promoted to demand) and missing (deferred).
  void classify(LayerRun& r, bool have_pred, bool have_refined, bool have_ahead2);
  // Demand reads for deferred experts while slots can be had.
  void issue_demand_reads(LayerRun& r);
  void run_expert(LayerRun& r, size_t i);
  void run_residents(LayerRun& r);  // lookahead: the resident experts, before any wait
  // The rest: each as it arrives (lookahead) or all once none is in flight (ondemand).
  void run_arrivals(LayerRun& r);

  const Model& model_;
  const ModelConfig& cfg_;
  StreamingOptions opt_;
  std::shared_ptr<storage::ReadFile> file_;
  ExpertLayout layout_;
  std::unique_ptr<storage::IoEngine> io_;
  std::vector<SlotClassPlan> class_plan_;
  std::vector<SlotPool> pools_;               // [class]
  std::vector<int> withheld_;                 // [class]: the pool's last slots, out of use
  void reset_pools();                         // free lists of the slots in use, new policies
  std::unique_ptr<cache::EvictionPolicy> make_pool_policy(size_t capacity) const;
  std::vector<int> layer_pool_;               // [layer] -> class
  storage::AlignedBuffer arena_;
  std::vector<Slot> slots_;
  std::vector<int> key_slot_;                 // [layer * n_expert + e] -> slot or -1
  std::unordered_map<uint64_t, int> tag_slot_;  // pending read tag -> slot
  uint64_t next_tag_ = 1;
  uint64_t clock_ = 0;                        // access clock for the policy
  uint64_t step_ = 0;                         // layers processed (protection epochs)
  int64_t oracle_step_ = -1;                  // forward calls started (RoutingOracle steps)
  uint64_t token_prefetch_bytes_ = 0;         // prefetch bytes issued for the current pass
  int64_t pass_tokens_ = 1;                   // positions of the current pass (its layer 0's n_tok)
  uint64_t prefetch_budget_bytes_ = 0;
  // Predictions per target layer (made while the layer before computes): keys in priority order,
  // and per expert 0 = not predicted, 1 = in the raw top k, 2 = in the raw top k+m.
  struct Prediction {
    bool valid = false;
    bool issued = false;        // its prefetches were submitted
    std::vector<cache::ExpertKey> keys;
    std::vector<uint8_t> rank;  // [n_expert]
    std::vector<uint8_t> refined;  // [n_expert]: in the refined guess's top k
    bool has_refined = false;
  };
  std::vector<Prediction> pred_;              // [n_layer]
  ThreadPool pred_pool_{1};                   // predictor products run on the calling thread
  QuantizedActs pred_acts_;
  std::vector<float> pred_logits_;
  std::vector<float> refine_x_;
  std::vector<std::vector<uint8_t>> ahead2_;  // [layer][n_expert]: two-ahead guess (statistics)
  std::vector<uint8_t> ahead2_valid_;
  std::vector<std::vector<cache::ExpertKey>> ahead2_keys_;  // [layer]: two-ahead guess, best first
  std::vector<std::vector<cache::ExpertKey>> ahead2_issued_;  // [layer]: prefetched from that guess
  // Throttle state: recent outcomes per guess source (exponentially decayed counts) and the
  // disk's busy fraction over the last token.
  double guess_n_[kGuessSources] = {};
  double guess_hit_[kGuessSources] = {};
  double disk_busy_ = 0;
  double disk_busy_nonspec_ = 0;              // recent tokens (exponential average)
  uint64_t last_busy_nonspec_us_ = 0;
  double last_token_t_ = 0;
  uint64_t last_busy_us_ = 0;
  uint64_t guess_skips_[kGuessSources] = {};
  bool throttled(int guess);
  void record_guess(int guess, bool used);
  std::vector<storage::IoCompletion> completions_;
  std::vector<storage::IoRequest> batch_;
  bool batching_ = false;
  StreamStats stats_;
  storage::IoCounters io_base_{};             // engine counters at the last reset_stats()
};

}  // namespace les
