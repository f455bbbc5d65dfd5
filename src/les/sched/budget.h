// Splitting a hard memory budget (--mem) between the resident parts and the expert cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "les/model/model.h"

namespace les {

struct BudgetPlan {
  uint64_t total = 0;      // the budget
  uint64_t dense = 0;      // dense weights (resident)
  uint64_t kv = 0;         // KV cache (attention layers)
  uint64_t recurrent = 0;  // recurrent (DeltaNet conv + delta-rule) state with its rollback snapshot
  uint64_t work = 0;       // activation buffers (estimate for the batch size)
  uint64_t overhead = 0;   // code, tokenizer, allocator slack
  uint64_t drafter = 0;    // a speculative drafter's resident weights and caches
  std::string drafter_label = "drafter";  // what `drafter` holds, as describe() names it
  uint64_t cache = 0;      // what is left for expert slots
  uint64_t slot_bytes = 0;
  uint64_t n_slots = 0;
  // Everything but the expert cache.
  uint64_t fixed() const { return dense + kv + recurrent + work + overhead + drafter; }
  std::string describe() const;  // one line, human readable
};

// What is resident beside the weights: the KV cache at n_ctx (attention layers, and the MTP
// block's when with_mtp), the recurrent state, the work buffers for n_batch tokens and the
// overhead (code, libraries, tokenizer, allocator slack).
struct StateBytes {
  uint64_t kv = 0, recurrent = 0, work = 0, overhead = 0;
  uint64_t total() const { return kv + recurrent + work + overhead; }
};
// type_k / type_v: the KV cache types (kv_cache.h; multi-head latent attention counts f32 rows).
StateBytes state_bytes(const ModelConfig& c, bool with_mtp, int n_ctx, int n_batch, Type type_k = Type::F32,
                       Type type_v = Type::F32);
// Bytes of the KV cache of one position (every attention layer, the MTP block's when with_mtp).
uint64_t kv_bytes_per_position(const ModelConfig& c, bool with_mtp, Type type_k, Type type_v);

// Throws les::Error stating the minimum budget if dense + state + the minimal expert cache
// (n_expert_used slots of each slot size: plan_slot_classes) do not fit. layer_slot_bytes: the
// expert slot size of every expert layer (StreamingExperts::layer_slot_bytes_for); cache and
// n_slots are then what the slot pools of that cache hold (never more slots than experts: a budget
// beyond dense + state + every expert leaves the rest unused). drafter_bytes: what a speculative
// drafter keeps resident. type_k / type_v: the KV cache types.
BudgetPlan plan_budget(const Model& model, uint64_t mem_bytes, int n_ctx, int n_batch,
                       const std::vector<uint64_t>& layer_slot_bytes, uint64_t drafter_bytes = 0,
                       Type type_k = Type::F32, Type type_v = Type::F32);
// The same with one slot size for every expert layer.
BudgetPlan plan_budget(const Model& model, uint64_t mem_bytes, int n_ctx, int n_batch, uint64_t slot_bytes,
                       uint64_t drafter_bytes = 0, Type type_k = Type::F32, Type type_v = Type::F32);

// Peak resident set size of this process so far (bytes).
uint64_t peak_rss_bytes();

}  // namespace les
