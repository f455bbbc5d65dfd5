// Server counters and their Prometheus text exposition (/metrics). Request handlers record into
// it from any thread; the expert-streaming figures are snapshots taken after each generation
// (by the thread that ran it), so reading them never races with a running generation.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include "les/sched/streaming_experts.h"

namespace les::server {

struct GenerationRecord {
  int prompt_tokens = 0, reused_tokens = 0, generated_tokens = 0;
  double prompt_seconds = 0, generation_seconds = 0, queue_seconds = 0;
  bool cancelled = false;
};

class Metrics {
 public:
  void record_request(const std::string& endpoint, int status);
  void record_generation(const GenerationRecord& g);
  // The expert cache's totals since start (StreamingExperts::stats().total()) and the budget.
  void record_experts(const LayerStreamStats& total, int n_slots, uint64_t cache_bytes);
  void set_memory_budget(uint64_t bytes) { budget_bytes_ = bytes; }
  // Batched serving (--parallel): the slots, and one step's tokens (one per decoding request,
  // prompt chunks) with the slots busy after it.
  void set_slots(int total);
  void record_step(int decode_tokens, int prompt_tokens, int slots_busy);

  // Prometheus text format 0.0.4; queue figures are passed in (they are live).
  std::string render(int queue_waiting, int running) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  uint64_t generations_ = 0, cancelled_ = 0;
  uint64_t prompt_tokens_ = 0, reused_tokens_ = 0, generated_tokens_ = 0;
  double prompt_seconds_ = 0, generation_seconds_ = 0, queue_seconds_ = 0;
  double last_decode_tps_ = 0, last_prefill_tps_ = 0;
  bool have_experts_ = false;
  LayerStreamStats experts_{};
  int n_slots_ = 0;
  uint64_t cache_bytes_ = 0;
  uint64_t budget_bytes_ = 0;
  int slots_total_ = 1, slots_busy_ = 0;
  bool batched_ = false;
  uint64_t steps_ = 0, step_tokens_ = 0, decode_tokens_ = 0, prompt_tokens_joined_ = 0, prompt_tokens_stepped_ = 0;
  // Steps by tokens evaluated: [i] counts steps of at most kStepTokenBounds[i] tokens (the last: any).
  static constexpr int kStepBuckets = 10;
  uint64_t step_buckets_[kStepBuckets] = {};
};

// Current resident set size of this process (bytes), 0 if unknown.
uint64_t current_rss_bytes();

}  // namespace les::server
