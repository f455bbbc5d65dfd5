// `les plan`: what running a model here will look like, before running it for real. Where the
// memory goes (memory_choice.h, the budget's split), the decode and prefill speed to expect and
// what bounds them, what a larger budget or a mixed-precision file would give, and the smallest
// budget at which compute becomes the bound.
//
// The speed comes from a short calibration: the model decodes a few dozen tokens at the chosen
// budget exactly as `les run` would (expert streaming, lookahead, direct I/O, a cold cache), its
// routing recorded; the speed model (speed_model.h) is fitted to what it measured and predicts
// the other budgets by replaying that routing through their caches. The device probe supplies the
// disk's rates (cached per device; measured once otherwise).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "les/quant/types.h"

#include "les/engine/memory_choice.h"
#include "les/plan/speed_model.h"
#include "les/sched/budget.h"
#include "les/storage/device_probe.h"

namespace les::plan {

struct PlanOptions {
  std::string model;
  uint64_t mem = 0;             // --mem SIZE (0: automatic)
  int n_ctx = 0;                // -c (0: chosen)
  Type type_k = Type::F16, type_v = Type::F16;  // -ctk / -ctv (les run's default f16)
  int threads = 2;
  std::string spec;             // --spec KIND ("" or "none": plain decoding)
  std::string draft;            // --draft FILE
  double mixed_bpw = 3.5;       // the mixed-precision file to price (bits per weight of the experts)
  int gen_tokens = 128;         // the generation the speeds are for (les run's default -n)
  std::string prompt;           // calibration prompt text ("": a built-in English paragraph's first calib_prompt tokens)
  int calib_prompt = 16;        // calibration: prompt tokens of the built-in text
  int calib_tokens = 96;        // calibration: generated tokens (the first half warms the replay)
  bool calibrate = true;        // false: memory only
  bool probe_refresh = false;
  bool quick_probe = false;     // a short uncached device probe (tests)
  std::optional<MemoryFacts> facts;  // the machine's (tests inject some)
};

struct BudgetRow {
  double share = 0;             // of the expert bytes the cache holds
  uint64_t mem = 0;             // the --mem that gives it
  SpeedAt at;
  std::string note;             // why there is no prediction (too small a budget)
};

// What another KV cache type would take at the chosen context, and (streaming) what its saving
// buys in expert cache within the same budget.
struct KvTypeRow {
  Type type = Type::F16;        // for K and V both
  uint64_t kv_bytes = 0;
  uint64_t cache_bytes = 0;     // streaming: the expert cache left (0 when resident or it does not fit)
  double cache_share = 0;       // of the expert bytes
  bool fits = true;             // streaming: the budget holds it beside the smallest expert cache
};

struct PlanReport {
  // The file.
  std::string model, arch;
  int n_layer = 0, n_expert = 0, n_expert_used = 0;
  bool moe = false;
  uint64_t file_bytes = 0, dense_bytes = 0, expert_bytes = 0;
  double expert_bpw = 0;        // bits per weight of the routed experts
  // Memory.
  MemoryChoice choice;
  BudgetPlan budget;            // streaming: the split (all zero when resident)
  double cache_share = 0;       // of the expert bytes
  uint64_t drafter_bytes = 0;
  std::vector<KvTypeRow> kv_types;  // f32, f16, q8_0, q5_0, q4_0 at the chosen context
  // Calibration.
  bool calibrated = false;
  double calib_seconds = 0;     // wall time of the calibration run (load included)
  int calib_prompt = 0, calib_tokens = 0;
  bool probe_cached = false;
  double probe_seconds = 0;
  storage::DiskRates disk;      // MB/s while computing and idle
  double measured_decode_tps = 0, measured_prefill_tps = 0;
  // Predictions.
  SpeedAt decode;               // at the chosen budget
  int gen_tokens = 0;
  double decode_tps = 0;        // over a generation of gen_tokens (a cold cache's first misses included)
  double steady_tps = 0;        // a long generation
  std::string decode_bound;     // "disk" or "compute"
  double compute_only_tps = 0;  // no reads at all
  double hit_rate = 0;          // of the selected experts, at the chosen budget
  double prefill_tps = 0;       // the calibration prompt's length, cold cache
  double prefill_mb = 0;        // the expert bytes its prompt read
  std::string prefill_bound;
  uint64_t compute_bound_mem = 0;  // the smallest --mem with no stall (0: none up to every expert)
  double compute_bound_share = 0;
  std::vector<BudgetRow> table;
  double mixed_bpw = 0;         // the mixed-precision file priced, and its predicted speed here
  SpeedAt mixed;
  std::string routing_source;   // where the hit rates come from
  std::vector<std::string> notes;
};

// Throws les::Error: unreadable file, a budget below the minimum (its parts named), a cgroup limit
// below what streaming needs, a -c that cannot fit.
PlanReport make_plan(const PlanOptions& o);

std::string plan_text(const PlanReport& r);
std::string plan_json(const PlanReport& r);  // decode_tok_s at the top level

}  // namespace les::plan
