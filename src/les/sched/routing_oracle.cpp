#include "les/sched/routing_oracle.h"

#include "les/util/error.h"

namespace les {

void RoutingOracle::record(int64_t step, int layer, std::span<const int32_t> ids) {
  LES_ASSERT(step >= 0 && layer >= 0 && layer < n_layer_);
  const size_t s = static_cast<size_t>(step);
  if (s >= steps_.size()) {
    steps_.resize(s + 1, std::vector<std::vector<int32_t>>(static_cast<size_t>(n_layer_)));
    have_.resize(s + 1, std::vector<uint8_t>(static_cast<size_t>(n_layer_), 0));
  }
  steps_[s][static_cast<size_t>(layer)].assign(ids.begin(), ids.end());
  have_[s][static_cast<size_t>(layer)] = 1;
}

const std::vector<int32_t>* RoutingOracle::lookup(int64_t step, int layer) const {
  if (step < 0 || layer < 0 || layer >= n_layer_ || static_cast<size_t>(step) >= steps_.size()) return nullptr;
  const size_t s = static_cast<size_t>(step);
  return have_[s][static_cast<size_t>(layer)] ? &steps_[s][static_cast<size_t>(layer)] : nullptr;
}

std::vector<int32_t> RoutingOracle::flatten() const {
  std::vector<int32_t> out{n_layer_, static_cast<int32_t>(steps_.size())};
  for (size_t s = 0; s < steps_.size(); ++s) {
    for (size_t l = 0; l < static_cast<size_t>(n_layer_); ++l) {
      if (!have_[s][l]) {
        out.push_back(-1);
        continue;
      }
      out.push_back(static_cast<int32_t>(steps_[s][l].size()));
      out.insert(out.end(), steps_[s][l].begin(), steps_[s][l].end());
    }
  }
  return out;
}

RoutingOracle RoutingOracle::unflatten(std::span<const int32_t> flat) {
  size_t at = 0;
  auto next = [&]() {
    if (at >= flat.size()) throw Error("a recorded routing ends early");
    return flat[at++];
  };
  const int32_t n_layer = next(), steps = next();
  if (n_layer < 1 || steps < 0) throw Error("a recorded routing has a malformed header");
  RoutingOracle o(n_layer);
  std::vector<int32_t> ids;
  for (int32_t s = 0; s < steps; ++s) {
    for (int32_t l = 0; l < n_layer; ++l) {
      const int32_t n = next();
      if (n < -1) throw Error("a recorded routing has a negative count");
      if (n < 0) continue;
      ids.clear();
      for (int32_t i = 0; i < n; ++i) ids.push_back(next());
      o.record(s, l, ids);
    }
  }
  if (at != flat.size()) throw Error("a recorded routing has trailing data");
  return o;
}

}  // namespace les
