// Human-readable and JSON renderings of streaming statistics.
#pragma once

#include <string>

#include "les/sched/streaming_experts.h"

namespace les {

struct RunSummary {
  double decode_tps = 0;
  double prompt_tps = 0;
  double wall_s = 0;          // time the statistics cover
  uint64_t peak_rss = 0;
  uint64_t budget = 0;
  uint64_t n_tokens = 0;      // tokens the statistics cover
};

// Per-layer table and totals: hit rate, prepared-in-advance share, predictor recall, prefetch
// precision, bytes per token (demand, prefetch, wasted), I/O MB/s, stall and compute time.
std::string format_stream_table(const StreamStats& st, const RunSummary& run);
std::string stream_stats_json(const StreamStats& st, const RunSummary& run);

}  // namespace les
