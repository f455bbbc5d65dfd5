#include "les/plan/speed_model.h"

#include <algorithm>
#include <cmath>

#include "les/cache/policy.h"
#include "les/cache/replay.h"
#include "les/sched/io_probe.h"
#include "les/util/error.h"

namespace les::plan {

namespace {

// Demand misses of the first `tokens` tokens of the trace through a fresh cache.
uint64_t misses_of_prefix(const cache::RoutingTrace& trace, int tokens, uint64_t slots) {
  if (tokens <= 0) return 0;
  cache::RoutingTrace t = trace;
  t.n_tokens = tokens;
  t.experts.resize(static_cast<size_t>(tokens) * t.n_layers * t.top_k);
  cache::PolicyParams p;
  p.capacity = static_cast<size_t>(slots);
  p.n_layers = t.n_layers;
  p.top_k = t.top_k;
  auto policy = cache::make_policy("lrfu", p);
  cache::ReplayOptions o;
  o.capacity = static_cast<size_t>(slots);
  o.protect_layer = true;
  return cache::replay(t, *policy, o).misses;
}

}  // namespace

double replay_misses_per_token(const cache::RoutingTrace& trace, int lead_tokens, uint64_t slots) {
  const int warm = lead_tokens + (trace.n_tokens - lead_tokens) / 2;
  const int counted = trace.n_tokens - warm;
  if (counted <= 0) return 0;
  slots = std::max<uint64_t>(slots, static_cast<uint64_t>(trace.top_k));
  // Replays are deterministic: the misses of the whole less those of the warm-up are the misses
  // of the counted tokens after that warm-up.
  const uint64_t all = misses_of_prefix(trace, trace.n_tokens, slots);
  const uint64_t warm_misses = misses_of_prefix(trace, warm, slots);
  return static_cast<double>(all - warm_misses) / counted;
}

SpeedModel fit_speed_model(const Calibration& cal, cache::RoutingTrace trace, int lead_tokens, double expert_bytes,
                           int n_slots_total) {
  if (cal.tokens <= 0 || cal.seconds <= 0) throw Error("the calibration run decoded no tokens");
  if (trace.n_tokens - lead_tokens < 2) throw Error("the calibration run recorded no routing to replay");
  SpeedModel m;
  m.lead_tokens = lead_tokens;
  m.probe_loaded_mbs = cal.probe_loaded_mbs;
  m.probe_idle_mbs = cal.probe_idle_mbs;
  m.expert_bytes = expert_bytes;
  m.n_slots_total = n_slots_total;
  m.trace = std::move(trace);
  const double n = cal.tokens;
  m.t_compute = std::max(1e-9, (cal.seconds - cal.stall_s) / n);
  m.t_expert = std::clamp(cal.expert_compute_s / n, 0.0, m.t_compute);
  m.read_rate = cal.io_busy_s > 0 && cal.io_bytes > 0 ? static_cast<double>(cal.io_bytes) / cal.io_busy_s
                                                      : cal.probe_loaded_mbs * 1e6;
  // Read overhead: what the run read over what its own cache's replay misses over the decoded
  // tokens after the prompt (every one counted, as the run measured them).
  const uint64_t slots = std::max<uint64_t>(cal.cache_slots, static_cast<uint64_t>(m.trace.top_k));
  const double replayed =
      static_cast<double>(misses_of_prefix(m.trace, m.trace.n_tokens, slots) - misses_of_prefix(m.trace, lead_tokens, slots)) *
      expert_bytes;
  m.read_overhead = replayed > 0 && cal.bytes_read > 0 ? std::clamp(static_cast<double>(cal.bytes_read) / replayed, 0.5, 4.0) : 1.0;
  // Hiding: t_io - stall = h * t_c.
  const double t_io = m.read_rate > 0 ? static_cast<double>(cal.bytes_read) / n / m.read_rate : 0;
  const double stall = cal.stall_s / n;
  m.hide = t_io > 0 ? std::clamp((t_io - stall) / m.t_compute, 0.0, 1.0) : 1.0;
  return m;
}

SpeedAt predict(const SpeedModel& m, uint64_t slots, int gen_tokens, double scale) {
  SpeedAt s;
  s.slots = std::min<uint64_t>(std::max<uint64_t>(slots, static_cast<uint64_t>(m.trace.top_k)),
                               static_cast<uint64_t>(m.n_slots_total));
  const double bytes_per_miss = m.expert_bytes * scale * m.read_overhead;
  const double t_c = m.t_compute - m.t_expert * (1.0 - scale);
  // Seconds for a token that reads `bytes`, and the stall in it.
  auto token_s = [&](double bytes, double* stall) {
    const double t_io = m.read_rate > 0 ? bytes / m.read_rate : 0;
    *stall = std::max(0.0, t_io - m.hide * t_c);
    return t_c + *stall;
  };
  s.misses_per_token = replay_misses_per_token(m.trace, m.lead_tokens, s.slots);
  const double bytes = s.misses_per_token * bytes_per_miss;
  s.mb_per_token = bytes / 1e6;
  s.t_io = m.read_rate > 0 ? bytes / m.read_rate : 0;
  const double t = token_s(bytes, &s.stall);
  s.steady_tok_s = t > 0 ? 1.0 / t : 0;
  const double ceil_s = m.probe_loaded_mbs > 0 ? decode_ceiling_seconds(bytes, t_c, m.probe_loaded_mbs, m.probe_idle_mbs) : t_c;
  s.ceiling_tok_s = ceil_s > 0 ? 1.0 / ceil_s : 0;
  s.disk_bound = s.stall > 0.05 * t;
  // The run: its first tokens as the calibration's first ones (a cold cache warmed by the prompt),
  // the rest at the steady state.
  s.gen_tokens = std::max(1, gen_tokens);
  const int decoded = m.trace.n_tokens - m.lead_tokens;
  const int cold = std::min(decoded, s.gen_tokens);
  const double cold_misses = static_cast<double>(misses_of_prefix(m.trace, m.lead_tokens + cold, s.slots) -
                                                 misses_of_prefix(m.trace, m.lead_tokens, s.slots));
  double stall = 0;
  const double run_s = cold * token_s(cold_misses / cold * bytes_per_miss, &stall) + (s.gen_tokens - cold) * t;
  s.tok_s = run_s > 0 ? s.gen_tokens / run_s : 0;
  return s;
}

uint64_t compute_bound_slots(const SpeedModel& m, double scale) {
  const uint64_t all = static_cast<uint64_t>(m.n_slots_total);
  auto no_stall = [&](uint64_t slots) { return predict(m, slots, 1, scale).stall <= 0; };
  if (!no_stall(all)) return 0;
  // Misses fall as the cache grows (not strictly for every policy and trace): the smallest cache
  // of a doubling and bisection search whose prediction does not stall.
  uint64_t lo = static_cast<uint64_t>(m.trace.top_k), hi = all;
  if (no_stall(lo)) return lo;
  while (hi - lo > std::max<uint64_t>(1, all / 200)) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (no_stall(mid)) hi = mid; else lo = mid;
  }
  return hi;
}

}  // namespace les::plan
