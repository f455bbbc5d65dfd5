// Shared by the streaming and packing tests: greedy decoding with a per-step logits fingerprint,
// and streaming options for a given number of cache slots.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "les/model/context.h"
#include "les/sched/streaming_experts.h"
#include "les/util/hash.h"

namespace les::test {

// Prompt in one batch, then greedy decode; returns the hash of every step's logits.
inline std::vector<uint64_t> greedy_hashes(const Model& m, ExpertSource* src, const std::vector<int32_t>& prompt,
                                           int n_gen, int threads = 1) {
  Context ctx(m, ContextParams{.n_ctx = 64, .n_threads = threads}, src);
  const int nv = m.config().n_vocab;
  std::vector<uint64_t> hashes;
  ctx.eval(prompt, false);
  for (int i = 0; i < n_gen; ++i) {
    const float* lg = ctx.last_logits();
    hashes.push_back(hash64(lg, sizeof(float) * static_cast<size_t>(nv)));
    const int32_t next = static_cast<int32_t>(std::max_element(lg, lg + nv) - lg);
    ctx.eval(std::span<const int32_t>(&next, 1), false);
  }
  return hashes;
}

// A cache of `slots` slots of the largest expert size, or the smallest cache the model streams in
// (n_expert_used slots of each slot size: a mixed-type file has several) when that is larger.
inline StreamingOptions stream_opts(const Model& m, Schedule s, storage::IoMode io, int slots) {
  StreamingOptions o;
  o.schedule = s;
  o.io_mode = io;
  std::vector<uint64_t> sizes = StreamingExperts::layer_slot_bytes_for(m, io);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  uint64_t smallest_cache = 0;
  for (uint64_t b : sizes) smallest_cache += b * static_cast<uint64_t>(m.config().n_expert_used);
  o.cache_bytes = std::max(sizes.back() * static_cast<uint64_t>(slots), smallest_cache);
  o.queue_depth = 4;
  return o;
}

}  // namespace les::test
