// Where a model's memory goes when les runs it: resident (the whole file read into huge pages or
// mapped) or streamed (dense weights resident, routed experts through a cache within a budget),
// which budget, and which context size. Decided from the file's header and what the machine
// offers, before anything is loaded. choose_memory is pure: the machine's facts come in, so the
// rules can be tested with any meminfo and cgroup values.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "les/gguf/gguf.h"
#include "les/model/config.h"
#include "les/model/model.h"

namespace les {

// What a model needs, from its GGUF header (no tensor data is read).
struct ModelFootprint {
  ModelConfig config;
  uint64_t file_bytes = 0;
  uint64_t dense_bytes = 0;                 // every tensor but the routed experts
  uint64_t expert_bytes = 0;                // every routed expert of every layer
  std::vector<uint64_t> layer_expert_bytes; // [expert layers]: one expert (gate + up + down)
  bool packed = false;                      // les pack layout (one extent per expert)
  bool has_mtp = false;                     // an MTP block (its KV cache and experts count)
  // The largest slot an expert of each layer may need when read with direct I/O (rounded to
  // pages; unpacked parts each start mid-page): an upper bound of ExpertLayout's.
  std::vector<uint64_t> slot_bytes_estimate() const;
  // n_expert_used slots of each slot size: the smallest expert cache that can compute a layer.
  uint64_t min_cache_bytes() const;
};
ModelFootprint footprint_of(const gguf::File& f, const std::string& path);

// What the machine offers this process.
struct MemoryFacts {
  uint64_t mem_available = 0;             // /proc/meminfo MemAvailable (0: unknown)
  uint64_t cgroup_headroom = UINT64_MAX;  // the memory cgroup's limit - usage + reclaimable cache (UINT64_MAX: no limit)
  bool huge_pages = true;                 // transparent huge pages can be had
  // The smaller of the two (UINT64_MAX when neither is known).
  uint64_t available() const;
  bool limited_by_cgroup() const { return cgroup_headroom != UINT64_MAX && cgroup_headroom <= available(); }
  static MemoryFacts of_this_machine();
};

struct MemoryRequest {
  uint64_t mem = 0;        // --mem SIZE (0: not given)
  bool mem_auto = false;   // --mem auto: the same choice as giving nothing, said explicitly
  ResidentMemory resident = ResidentMemory::automatic;  // --mmap (map) / --no-mmap (read) force resident
  int n_ctx = 0;           // -c (0: chosen)
  int n_batch = 256;
  // Contexts served together (--parallel): each has its own KV cache, recurrent state and work
  // buffers, all counted.
  int n_parallel = 1;
  Type type_k = Type::F32, type_v = Type::F32;  // KV cache types (-ctk / -ctv)
  uint64_t drafter_bytes = 0;  // a speculative drafter's resident bytes (it shares the budget)
  // What drafter_bytes holds, as messages name it ("drafter", "vision encoder", ...).
  std::string drafter_label = "drafter";
  // The automatic context (no -c) is at least this many positions (capped at the model's): room
  // for an image's visual tokens when a vision encoder comes along.
  int min_ctx = 0;
};

enum class MemoryMode { read, map, stream };
const char* memory_mode_name(MemoryMode m);  // "resident (read)", "resident (mapped)", "streaming"

struct MemoryChoice {
  MemoryMode mode = MemoryMode::read;
  uint64_t budget = 0;          // stream: the budget (given, or available - margin)
  bool budget_automatic = false;
  int n_ctx = 0;                // the context size to use
  bool n_ctx_chosen = false;    // chosen here (no -c)
  uint64_t available = 0;       // what the facts offered (UINT64_MAX: unknown)
  uint64_t resident_need = 0;   // weights + KV cache + work + overhead at the default context
  uint64_t margin = 0;          // what the automatic budget or the resident rule leaves free
  uint64_t kv_bytes = 0;        // the KV cache at n_ctx
  std::string why;              // one line: the mode, why, and the sizes
};

// The automatic budget's margin for the rest of the system: max(128 MiB, available / 16). The
// budget's own accounting is conservative (a streamed run's peak usage measured 0.1-0.2 GiB under
// its --mem on the 30B-A3B shape), so inside a memory cgroup this keeps the peak about 10% under
// the limit (docs/plan.md).
uint64_t streaming_margin(uint64_t available);
// The resident rule's margin: 1 GiB + 1/16 of the weights (resident_fits in model.h).
uint64_t resident_margin(uint64_t weight_bytes);

// The rules, in order:
//  1. --mem SIZE: stream within SIZE (an MoE model; a dense one is an error).
//  2. --mmap / --no-mmap: resident, mapped or read, as asked.
//  3. Otherwise (--mem auto, or nothing): resident when the weights, the KV cache at the default
//     context, the work buffers and the overhead fit in the available memory less the resident
//     margin: read into huge pages where the kernel grants them, else mapped. A model that does
//     not fit streams with an automatic budget, the available memory less the streaming margin;
//     a dense model (nothing to stream) is mapped.
// Context: -c as given (an error giving the numbers when its KV cache does not fit the budget),
// else the model's training context where it fits:
//  - streaming: the training context, halved while the KV cache (of the chosen types) takes more
//    than a quarter of what the budget leaves after the dense weights, the work buffers, the
//    overhead and the smallest expert cache (so that at least three quarters of that stay for
//    experts); at least 256 positions (or the training context if smaller);
//  - resident: the training context, halved while weights + KV cache + work buffers + overhead do
//    not fit the available memory less the resident margin, down to 4096 (the model is resident
//    when it fits at that context, else it streams as above); with the available memory unknown,
//    at most 4096.
// Throws les::Error, naming the minimum budget and its parts, when a budget cannot hold it.
MemoryChoice choose_memory(const ModelFootprint& fp, const MemoryRequest& req, const MemoryFacts& facts);

}  // namespace les
