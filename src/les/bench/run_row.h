// One measured run of one row of `les bench`, in the calling process (the staged bench calls it
// in a forked child, child.h): load the row's file, build its expert cache from the budget (cold),
// optionally its drafter, generate greedily, and measure.
//
// Timing: load_s is process work from the start of Model::load to a ready Context (model, expert
// cache arena, drafter, tokenizer); ttft_s from the same start to the first generated token
// (load + prefill). Streaming statistics cover the decode phase only (after the first token).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "les/bench/rows.h"
#include "les/model/model.h"
#include "les/quant/types.h"
#include "les/sched/streaming_experts.h"
#include "les/storage/io.h"

namespace les::bench {

struct RowPlan {
  RowKind kind = RowKind::baseline;
  std::string file;                       // the model file this run reads
  bool resident = false;                  // whole file resident: mapped (pre-read into the page cache
                                          // first) or read into huge pages, as resident_memory says
  ResidentMemory resident_memory = ResidentMemory::map;
  storage::IoMode io = storage::IoMode::uring;
  Schedule schedule = Schedule::lookahead;
  // Routing oracle: the run prefetches the selection RunInputs::routing recorded, oracle_depth
  // layers ahead (routing_oracle.h).
  bool oracle = false;
  int oracle_depth = 1;
  std::string drafter;                    // "" (none), "draft", "dspark" or "oracle"
  std::string drafter_path;               // draft / dspark
  double acceptance = 0;                  // oracle drafter
  uint64_t mem = 0;                       // the budget (streamed runs)
  uint64_t read_chunk = 0;                // read shaping (StreamingOptions::read_chunk)
};

struct RunInputs {
  std::vector<int32_t> prompt;
  std::vector<int32_t> recording;         // oracle drafter: prompt + the base row's greedy tokens
  // Routing oracle rows: the routing of an earlier run of the same weights and tokens
  // (RoutingOracle::flatten; required).
  std::vector<int32_t> routing;
  int n_gen = 64;
  int threads = 2;
  Type type_k = Type::F16, type_v = Type::F16;  // KV cache types
  int draft_max = 6;
  std::string progress_prefix;            // non-empty: "\r<prefix> k/n tokens" on stderr (a terminal)
  int ctx = 0;                            // the context size (0: the prompt, the tokens and a draft's room)
  int n_ctx() const { return ctx > 0 ? ctx : static_cast<int>(prompt.size()) + n_gen + draft_max + 8; }
};

// Plain data, so that it crosses the child's pipe as bytes.
struct RunMeasure {
  double load_s = 0, ttft_s = 0, prompt_s = 0, gen_s = 0;
  double decode_tps = 0, prefill_tps = 0;
  int32_t n_prompt = 0, n_generated = 0;
  uint64_t logits_hash = 0;
  // Decode phase, streamed runs (zero when resident):
  uint64_t selected = 0, hits = 0, in_flight = 0;      // experts selected; resident / being read at the layer's start
  uint64_t bytes_read = 0, bytes_wasted = 0;           // expert bytes read; prefetched and never used
  double stall_s = 0;                                  // waiting for reads inside layers
  double expert_compute_s = 0;                         // computing routed experts
  uint64_t prefill_bytes_read = 0;                     // expert bytes read before the first token (prompt)
  double prefill_stall_s = 0;                          // ... and the time waiting for them
  uint64_t io_bytes = 0, io_busy_us = 0;               // the I/O engine's bytes and busy time
  uint64_t cache_bytes = 0;                            // the expert cache this budget left (at the start)
  uint64_t expert_bytes_total = 0;                     // every routed expert of the file
  int32_t spec_rounds = 0, spec_drafted = 0, spec_accepted = 0;
  int32_t spec_released_at = -1;                       // speculation given up after this many tokens (-1: not)
  int decode_tokens() const { return n_generated > 1 ? n_generated - 1 : 0; }
};
static_assert(std::is_trivially_copyable_v<RunMeasure>);

// Throws les::Error (missing file, budget too small, a failed read, ...). With routing (a streamed
// row that is not a routing oracle), the run also records its routing into it (flattened).
RunMeasure run_row_once(const RowPlan& plan, const RunInputs& in, std::vector<int32_t>* generated,
                        std::vector<int32_t>* routing = nullptr);

// RunMeasure + generated tokens + a flattened routing <-> bytes (same program on both ends of the pipe).
std::string encode_run(const RunMeasure& m, const std::vector<int32_t>& tokens,
                       const std::vector<int32_t>& routing = {});
// Throws les::Error for a payload of the wrong size.
void decode_run(const std::string& bytes, RunMeasure* m, std::vector<int32_t>* tokens,
                std::vector<int32_t>* routing = nullptr);

// Drops a file's pages from the page cache (a cold start for the next reader); best effort.
void drop_page_cache(const std::string& path);
// Reads a whole file through the page cache (a warm start for a memory-mapped reader).
void warm_page_cache(const std::string& path);

}  // namespace les::bench
