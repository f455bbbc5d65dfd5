#include "les/trace/routing_recorder.h"

#include <algorithm>
#include <cmath>

#include "les/cache/trace.h"
#include "les/util/error.h"
#include "les/util/fp16.h"

namespace les {

RoutingRecorder::RoutingRecorder(const ModelConfig& c, bool with_probs)
    : n_expert_(c.n_expert), k_(c.n_expert_used), with_probs_(with_probs), sigmoid_(c.gating == Gating::sigmoid) {
  if (!c.moe) throw Error("routing traces need a mixture-of-experts model");
  layer_slot_.assign(static_cast<size_t>(c.n_layer), -1);
  for (int l = 0; l < c.n_layer; ++l) {
    if (c.has_experts(l)) layer_slot_[static_cast<size_t>(l)] = n_moe_++;  // dense lead layers: none
  }
  ids_.resize(static_cast<size_t>(n_moe_));
  weights_.resize(static_cast<size_t>(n_moe_));
  probs_.resize(static_cast<size_t>(n_moe_));
}

void RoutingRecorder::attach(Context& ctx) {
  ctx.set_routing_observer([this](int layer, int64_t n, const int32_t* ids, const float* w, int k, const float* logits,
                                  int n_expert) {
    if (layer < 0 || static_cast<size_t>(layer) >= layer_slot_.size() || layer_slot_[static_cast<size_t>(layer)] < 0) return;
    LES_ASSERT(k == k_ && n_expert == n_expert_);
    const size_t s = static_cast<size_t>(layer_slot_[static_cast<size_t>(layer)]);
    ids_[s].insert(ids_[s].end(), ids, ids + n * k);
    for (int64_t i = 0; i < n * k; ++i) weights_[s].push_back(f32_to_fp16(w[i]));
    if (!with_probs_) return;
    for (int64_t t = 0; t < n; ++t) {
      const float* x = logits + t * n_expert;
      if (sigmoid_) {  // the gate's own scores: independent sigmoids
        for (int e = 0; e < n_expert; ++e) probs_[s].push_back(f32_to_fp16(1.0f / (1.0f + std::exp(-x[e]))));
        continue;
      }
      const float mx = *std::max_element(x, x + n_expert);
      double sum = 0;
      for (int e = 0; e < n_expert; ++e) sum += std::exp(static_cast<double>(x[e]) - mx);
      for (int e = 0; e < n_expert; ++e) {
        probs_[s].push_back(f32_to_fp16(static_cast<float>(std::exp(static_cast<double>(x[e]) - mx) / sum)));
      }
    }
  });
}

void RoutingRecorder::start_sequence() {
  const int t = n_tokens();
  if (starts_.empty() || starts_.back() != t) starts_.push_back(t);
}

void RoutingRecorder::add_tokens(std::span<const int32_t> tokens) { tokens_.insert(tokens_.end(), tokens.begin(), tokens.end()); }

int RoutingRecorder::n_tokens() const { return n_moe_ > 0 ? static_cast<int>(ids_[0].size() / static_cast<size_t>(k_)) : 0; }

void RoutingRecorder::save(const std::string& prefix) const {
  const size_t T = static_cast<size_t>(n_tokens());
  if (T == 0) throw Error("no routing was recorded (nothing was evaluated)");
  for (int s = 0; s < n_moe_; ++s) {
    if (ids_[static_cast<size_t>(s)].size() != T * static_cast<size_t>(k_)) {
      throw Error(strfmt("routing recorder: layer %d recorded %zu tokens, layer 0 %zu", s,
                         ids_[static_cast<size_t>(s)].size() / static_cast<size_t>(k_), T));
    }
  }
  if (tokens_.size() != T) {
    throw Error(strfmt("routing recorder: %zu input tokens given for %zu recorded", tokens_.size(), T));
  }
  const size_t L = static_cast<size_t>(n_moe_), K = static_cast<size_t>(k_), E = static_cast<size_t>(n_expert_);
  // [T][L][K] from the per-layer [T][K] records.
  auto interleave = [&](const auto& per_layer, size_t width, auto convert) {
    std::vector<decltype(convert(per_layer[0][0]))> out(T * L * width);
    for (size_t t = 0; t < T; ++t)
      for (size_t l = 0; l < L; ++l)
        for (size_t j = 0; j < width; ++j) out[(t * L + l) * width + j] = convert(per_layer[l][t * width + j]);
    return out;
  };
  if (E <= 256) {
    const auto ids = interleave(ids_, K, [](int32_t v) { return static_cast<uint8_t>(v); });
    cache::save_npy(prefix + ".routing-experts.npy", cache::NpyType::U8, {T, L, K}, ids.data(), ids.size());
  } else {
    const auto ids = interleave(ids_, K, [](int32_t v) { return static_cast<uint16_t>(v); });
    cache::save_npy(prefix + ".routing-experts.npy", cache::NpyType::U16, {T, L, K}, ids.data(), ids.size() * 2);
  }
  const auto w = interleave(weights_, K, [](uint16_t v) { return v; });
  cache::save_npy(prefix + ".routing-weights.npy", cache::NpyType::F16, {T, L, K}, w.data(), w.size() * 2);
  if (with_probs_) {
    const auto p = interleave(probs_, E, [](uint16_t v) { return v; });
    cache::save_npy(prefix + ".routing-probs.npy", cache::NpyType::F16, {T, L, E}, p.data(), p.size() * 2);
  }
  cache::save_npy(prefix + ".routing-tokens.npy", cache::NpyType::I32, {T}, tokens_.data(), T * 4);
  std::vector<int64_t> starts = starts_;
  if (starts.empty()) starts.push_back(0);
  cache::save_npy(prefix + ".sequence-starts.npy", cache::NpyType::I64, {starts.size()}, starts.data(), starts.size() * 8);
}

}  // namespace les
