// `les bench`: the published staging measured on this machine in one invocation (rows.h).
//
// One budget, one prompt, the rows in staging order within each repeat (interleaved, so drifts of
// the machine hit every row alike), a warm-up repeat that is not counted, medians over the
// counted repeats. Every (row, repeat) runs in its own forked process (child.h) from a cold expert
// cache and a cold page cache for the file it streams: peak RSS, load time and time to first
// token are that run's own. The lookahead rows also run once per repeat with the recorded routing
// replayed as a perfect guess (the routing oracle: the bound of this pipeline on this disk).
//
// Rows whose outputs must be equal (the original weights: resident, baseline, lookahead, loadopt,
// the oracles, and spec on loadopt; the mixed file's: mixed, its oracle, spec on mixed) are
// checked by their final logits hash in every repeat; hashes_ok says whether they were.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "les/bench/rows.h"
#include "les/quant/types.h"
#include "les/storage/device_probe.h"

namespace les::bench {

struct BenchOptions {
  std::string model;            // the original GGUF
  std::string packed;           // the same model packed (les pack); "" = pack it into work_dir
  std::string mixed;            // a mixed-precision file of the same shape; "" = the mixed row is skipped
  std::string draft;            // a dense draft model or a DSpark (dflash) drafter for the spec row
  double spec_oracle = -1;      // >= 0: the spec row uses the oracle draft at this acceptance
  uint64_t mem = 0;             // the budget (bytes); 0 with cache_share > 0: derived from it
  double cache_share = 0;       // > 0 and mem == 0: the budget whose baseline cache holds this share of the experts
  int threads = 2;
  Type type_k = Type::F16, type_v = Type::F16;  // KV cache types (-ctk / -ctv)
  int n_gen = 64;               // tokens generated per run
  int prompt_tokens = 64;       // prompt length (at most; a short -p text is used whole)
  std::string prompt_text;      // -p
  std::string prompt_file;      // --prompt-file (its first prompt_tokens tokens)
  int reps = 3;                 // counted repeats (a warm-up repeat runs first)
  int oracle_depth = 1;         // the routing oracle's lookahead (1: the real predictor's depth)
  bool oracles = true;          // run the routing oracle beside each lookahead row
  std::vector<RowKind> rows;    // in staging order
  std::string work_dir;         // where temporary packed files go ("" = the current directory)
  bool tty = false;             // progress as one line redrawn with \r (else one line per run)
  bool progress = true;         // progress on stderr
  // The device probe behind the ceilings (sched/io_probe.h): cached per device unless quick_probe
  // (a short, uncached one, for --quick); probe_refresh measures again.
  bool quick_probe = false;
  bool probe_refresh = false;
};

// One row's medians over the counted repeats (NaN where a column does not apply).
struct RowResult {
  RowKind kind = RowKind::baseline;
  bool ran = false;
  std::string note;             // why skipped, or what the row is ("reference: the model is over the budget")
  std::string file;             // the file it read
  std::string how;              // "naive, ondemand", "uring, lookahead", "mapped", ...
  double decode_tps = 0, prefill_tps = 0;
  double vs_baseline = 0, vs_prev = 0;  // decode tok/s ratios (medians' ratios)
  std::string prev;             // the row vs_prev compares with
  double hit = 0, prepared = 0; // shares of selected experts resident / resident or in flight at a layer's start
  double mib_per_token = 0;     // expert bytes read per decoded token
  double used_mb_per_token = 0; // ... of which used (read minus prefetched-and-never-used), MB
  double disk_busy_mbs = 0;     // the I/O engine's bytes / its busy time
  double stall_pct = 0;         // waiting for reads, % of decode time
  double peak_rss_mib = 0;      // the run's process (wait4)
  double load_s = 0, ttft_s = 0;
  double ceiling_tps = 0, of_ceiling = 0;
  double oracle_tps = 0, of_oracle = 0;  // the routing oracle's decode tok/s; this row's share of it
  double cache_share = 0;       // the share of this file's expert bytes the cache holds
  // spec: per verification (a plain step counts as one), draft tokens proposed and kept; kept / proposed
  double drafted_per_round = 0, accepted_per_round = 0, acceptance = 0;
  int gave_up = 0;              // spec: counted runs in which the depth controller gave speculation up
  double gave_up_at = 0;        // ... median token at which it did (NaN: never)
  uint64_t hash = 0;            // final logits hash (first counted repeat)
  int hash_group = 0;           // 0: the original weights, 1: the mixed file
  std::vector<double> decode_per_rep;
};

struct BenchReport {
  std::string model;
  uint64_t mem = 0;
  double cache_share = 0;       // the baseline row's
  int threads = 0, n_prompt = 0, n_gen = 0, reps = 0;
  // The device probe's MB/s at the rows' queue depth for each file's expert reads (direct I/O),
  // and for the original file through the naive buffered loader (its rows' ceiling), while every
  // core computes and with idle cores; zero for a file not probed.
  storage::DiskRates disk_original, disk_packed, disk_mixed, disk_original_naive;
  double compute_ms_per_token = 0;  // the ceiling's compute term (the original weights)
  double compute_ms_per_token_mixed = 0;  // ... of the mixed file's rows (NaN when none ran)
  std::string compute_source;   // where it came from
  std::vector<RowResult> rows;  // every requested row, skipped ones included
  std::vector<std::string> notes;
  bool hashes_ok = true;
  std::string hash_problem;     // which runs differed
  double wall_s = 0;
  std::string command;          // the command line (set by the caller)
};

// Throws les::Error for bad input (missing file, budget too small, unknown draft kind, a file of
// another shape) and when a measuring process fails.
BenchReport run_staged_bench(const BenchOptions& opt);

}  // namespace les::bench
