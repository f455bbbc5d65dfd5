#include "les/server/metrics.h"

#include <unistd.h>

#include <cstdio>
#include <iterator>

#include "les/sched/budget.h"
#include "les/util/error.h"

namespace les::server {

uint64_t current_rss_bytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (!f) return 0;
  unsigned long long size = 0, resident = 0;
  const int got = std::fscanf(f, "%llu %llu", &size, &resident);
  std::fclose(f);
  return got == 2 ? resident * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) : 0;
}

void Metrics::record_request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::record_generation(const GenerationRecord& g) {
  std::lock_guard<std::mutex> lk(mu_);
  ++generations_;
  if (g.cancelled) ++cancelled_;
  prompt_tokens_ += static_cast<uint64_t>(g.prompt_tokens);
  reused_tokens_ += static_cast<uint64_t>(g.reused_tokens);
  generated_tokens_ += static_cast<uint64_t>(g.generated_tokens);
  prompt_seconds_ += g.prompt_seconds;
  generation_seconds_ += g.generation_seconds;
  queue_seconds_ += g.queue_seconds;
  const int evaluated = g.prompt_tokens - g.reused_tokens;
  if (g.prompt_seconds > 0 && evaluated > 0) last_prefill_tps_ = evaluated / g.prompt_seconds;
  if (g.generation_seconds > 0 && g.generated_tokens > 1) last_decode_tps_ = (g.generated_tokens - 1) / g.generation_seconds;
}

namespace metrics_detail {
// Upper bounds of the tokens-per-step histogram's buckets (the last one is +Inf).
constexpr int kStepTokenBounds[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
}  // namespace metrics_detail

void Metrics::set_slots(int total) {
  std::lock_guard<std::mutex> lk(mu_);
  slots_total_ = total;
  batched_ = true;
}

void Metrics::record_step(int decode_tokens, int prompt_tokens, int slots_busy) {
  using metrics_detail::kStepTokenBounds;
  static_assert(std::size(kStepTokenBounds) + 1 == kStepBuckets);
  std::lock_guard<std::mutex> lk(mu_);
  slots_busy_ = slots_busy;
  if (decode_tokens + prompt_tokens == 0) return;
  const int n = decode_tokens + prompt_tokens;
  ++steps_;
  step_tokens_ += static_cast<uint64_t>(n);
  decode_tokens_ += static_cast<uint64_t>(decode_tokens);
  prompt_tokens_stepped_ += static_cast<uint64_t>(prompt_tokens);
  if (decode_tokens > 0) prompt_tokens_joined_ += static_cast<uint64_t>(prompt_tokens);
  int b = 0;
  while (b < kStepBuckets - 1 && n > kStepTokenBounds[b]) ++b;
  ++step_buckets_[b];
}

void Metrics::record_experts(const LayerStreamStats& total, int n_slots, uint64_t cache_bytes) {
  std::lock_guard<std::mutex> lk(mu_);
  have_experts_ = true;
  experts_ = total;
  n_slots_ = n_slots;
  cache_bytes_ = cache_bytes;
}

namespace {

void metric(std::string& out, const char* name, const char* type, const char* help) {
  out += strfmt("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

void value(std::string& out, const char* name, double v, const std::string& labels = {}) {
  out += strfmt("%s%s %.17g\n", name, labels.c_str(), v);
}

// A metric with one unlabelled sample.
void single(std::string& out, const char* name, const char* type, const char* help, double v) {
  metric(out, name, type, help);
  value(out, name, v);
}

}  // namespace

std::string Metrics::render(int queue_waiting, int running) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string o;
  metric(o, "les_requests_total", "counter", "HTTP requests answered, by endpoint and status");
  for (const auto& [key, n] : requests_) {
    value(o, "les_requests_total", static_cast<double>(n),
          strfmt("{endpoint=\"%s\",status=\"%d\"}", key.first.c_str(), key.second));
  }
  single(o, "les_generations_total", "counter", "generations run (completed or cancelled)", static_cast<double>(generations_));
  single(o, "les_generations_cancelled_total", "counter", "generations stopped because the client went away", static_cast<double>(cancelled_));
  single(o, "les_prompt_tokens_total", "counter", "prompt tokens of all generations", static_cast<double>(prompt_tokens_));
  single(o, "les_prompt_tokens_reused_total", "counter", "prompt tokens taken from the KV cache of the previous request", static_cast<double>(reused_tokens_));
  single(o, "les_generated_tokens_total", "counter", "tokens generated", static_cast<double>(generated_tokens_));
  single(o, "les_prompt_seconds_total", "counter", "seconds spent evaluating prompts", prompt_seconds_);
  single(o, "les_generation_seconds_total", "counter", "seconds spent generating after the first token", generation_seconds_);
  single(o, "les_queue_seconds_total", "counter", "seconds requests waited for their turn", queue_seconds_);
  single(o, "les_decode_tokens_per_second", "gauge", "decode speed of the last generation", last_decode_tps_);
  single(o, "les_prefill_tokens_per_second", "gauge", "prompt evaluation speed of the last generation", last_prefill_tps_);
  single(o, "les_requests_waiting", "gauge", "requests waiting for their turn", queue_waiting);
  single(o, "les_requests_running", "gauge", "requests generating (at most the slots)", running);
  single(o, "les_slots_total", "gauge", "requests that can generate together (--parallel)", slots_total_);
  single(o, "les_slots_busy", "gauge", "slots holding a request after the last step (batched serving)", slots_busy_);
  if (batched_) {
    single(o, "les_batch_steps_total", "counter", "batched steps (one evaluation of every active request's tokens)", static_cast<double>(steps_));
    single(o, "les_batch_decode_tokens_total", "counter", "tokens evaluated for decoding requests in batched steps (one per request and step)", static_cast<double>(decode_tokens_));
    single(o, "les_batch_prompt_tokens_total", "counter", "prompt tokens evaluated in batched steps", static_cast<double>(prompt_tokens_stepped_));
    single(o, "les_batch_prompt_tokens_joined_total", "counter", "prompt tokens evaluated in steps that also decoded (chunked prefill joining decodes)", static_cast<double>(prompt_tokens_joined_));
    metric(o, "les_batch_step_tokens", "histogram", "tokens evaluated per batched step");
    uint64_t cum = 0;
    for (int b = 0; b < kStepBuckets; ++b) {
      cum += step_buckets_[b];
      const std::string le = b < kStepBuckets - 1 ? std::to_string(metrics_detail::kStepTokenBounds[b]) : std::string("+Inf");
      value(o, "les_batch_step_tokens_bucket", static_cast<double>(cum), "{le=\"" + le + "\"}");
    }
    value(o, "les_batch_step_tokens_sum", static_cast<double>(step_tokens_));
    value(o, "les_batch_step_tokens_count", static_cast<double>(steps_));
  }
  if (have_experts_) {
    const LayerStreamStats& e = experts_;
    const double sel = static_cast<double>(e.selected);
    single(o, "les_expert_selected_total", "counter", "routed experts selected", sel);
    single(o, "les_expert_cache_hits_total", "counter", "selected experts already in the cache", static_cast<double>(e.hits));
    single(o, "les_expert_cache_hit_ratio", "gauge", "selected experts already in the cache, over all selected", sel > 0 ? static_cast<double>(e.hits) / sel : 0);
    single(o, "les_expert_prepared_ratio", "gauge", "selected experts resident or being read when their layer started", sel > 0 ? static_cast<double>(e.hits + e.in_flight) / sel : 0);
    single(o, "les_expert_bytes_read_total", "counter", "expert bytes read from storage (demand and prefetch)", static_cast<double>(e.bytes_demand + e.bytes_prefetch));
    single(o, "les_expert_bytes_wasted_total", "counter", "prefetched expert bytes never used", static_cast<double>(e.bytes_wasted));
    single(o, "les_expert_stall_seconds_total", "counter", "seconds layers waited for expert reads", e.stall_s);
    single(o, "les_expert_cache_slots", "gauge", "expert cache slots", n_slots_);
    single(o, "les_expert_cache_bytes", "gauge", "expert cache size in bytes", static_cast<double>(cache_bytes_));
  }
  single(o, "les_memory_budget_bytes", "gauge", "the --mem budget (0: experts resident, no budget)", static_cast<double>(budget_bytes_));
  single(o, "les_resident_bytes", "gauge", "resident set size of the process", static_cast<double>(current_rss_bytes()));
  single(o, "les_peak_resident_bytes", "gauge", "peak resident set size of the process", static_cast<double>(peak_rss_bytes()));
  return o;
}

}  // namespace les::server
