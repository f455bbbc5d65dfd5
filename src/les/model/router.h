// Expert routing: a pure function from router logits to (expert ids, weights).
#pragma once

#include <cstdint>

namespace les {

struct RouterParams {
  int n_expert = 0;
  int k = 0;               // experts used per token
  bool norm_topk = false;  // renormalise the k weights to sum 1
  float scale = 1.0f;      // multiply the weights (expert_weights_scale)
};

// probs: [n_expert] router logits, overwritten with the softmax. Writes the k selected experts in
// descending probability (ties: lower id first) and their weights.
void route_softmax_topk(const RouterParams& p, float* logits, int32_t* ids, float* weights);

}  // namespace les
