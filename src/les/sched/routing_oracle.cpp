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

}  // namespace les
