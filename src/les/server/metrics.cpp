#include "les/server/metrics.h"

#include <unistd.h>

#include <cstdio>

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

std::string Metrics::render(int queue_waiting, bool busy) const {
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
  single(o, "les_requests_running", "gauge", "requests generating (0 or 1)", busy ? 1 : 0);
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
