// What a tensor group's bytes cost while streaming under a memory budget (les quantize --mem):
// a routed expert's bytes are read on every miss, so an expert group of layer l costs
// miss_rate[l] * k / n_expert of its bytes per token; a dense byte is read once but takes a byte
// from the expert cache, so it costs the extra expert bytes per token that one byte less of cache
// causes. Miss rates come from replaying the calibration text's routing (recorded with the base
// model) through the engine's default cache policy at the cache size the budget leaves.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "les/mixed/tensor_groups.h"
#include "les/model/model.h"

namespace les::mixed {

struct StreamPrices {
  std::vector<double> miss_rate;  // [n_layer]: demand loads per expert use
  double dense_price = 0;         // expert bytes streamed per token per resident dense byte
  uint64_t cache_bytes = 0;       // the expert cache at the reference allocation
  uint64_t cache_experts = 0;     // ... in experts of the reference size
  double stream_bytes_per_token = 0;  // at the reference allocation
  // Cost (bytes streamed per token) of a group holding `bytes`.
  double cost(const TensorGroup& g, uint64_t bytes, int n_expert, int top_k) const;
};

// ref_bpw: bits per weight of the reference (uniform) allocation the cache size is computed for.
// Throws les::Error when the budget cannot hold the dense tensors, state and a minimal cache.
StreamPrices stream_prices(const Model& model, const std::vector<TensorGroup>& groups,
                           std::span<const int32_t> calib_tokens, int n_ctx, int n_windows, int n_threads,
                           uint64_t mem_budget, double ref_bpw);

}  // namespace les::mixed
