#include "les/model/router.h"

#include <algorithm>

#include "les/model/ops.h"

namespace les {

void route_softmax_topk(const RouterParams& p, float* logits, int32_t* ids, float* weights) {
  ops::softmax(logits, p.n_expert);
  // Partial selection sort: k is small (<= 16 typically).
  for (int j = 0; j < p.k; ++j) {
    int best = -1;
    for (int e = 0; e < p.n_expert; ++e) {
      bool taken = false;
      for (int i = 0; i < j; ++i) taken |= ids[i] == e;
      if (taken) continue;
      if (best < 0 || logits[e] > logits[best]) best = e;
    }
    ids[j] = best;
    weights[j] = logits[best];
  }
  if (p.norm_topk) {
    double sum = 0.0;
    for (int j = 0; j < p.k; ++j) sum += static_cast<double>(weights[j]);
    const float s = std::max(static_cast<float>(sum), 6.103515625e-5f);
    for (int j = 0; j < p.k; ++j) weights[j] /= s;
  }
  if (p.scale != 1.0f) {
    for (int j = 0; j < p.k; ++j) weights[j] *= p.scale;
  }
}

}  // namespace les
