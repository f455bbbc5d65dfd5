// Expert routing: a pure function from router logits to (expert ids, weights).
#pragma once

#include <cstdint>

#include "les/model/config.h"
#include "les/model/weights.h"

namespace les {

struct RouterParams {
  int n_expert = 0;
  int k = 0;               // experts used per token
  bool norm_topk = false;  // renormalise the k weights to sum 1
  float scale = 1.0f;      // multiply the weights (expert_weights_scale)
  Gating gating = Gating::softmax;
  int n_groups = 1;        // grouped top-k (n_groups > 1): only the n_group_used groups with the
  int n_group_used = 1;    // largest sums of their two best selection scores are eligible
};

// The router parameters of a model's MoE layers.
RouterParams router_params(const ModelConfig& c);

// llama.cpp's build_moe_ffn routing. logits: [n_expert] router logits (bias already added),
// overwritten with the scores (softmax / sigmoid / unchanged for softmax_weight). sel_bias: the
// selection bias added to the scores for choosing only (may be null). Writes the k selected
// experts in descending selection score (ties: lower id first) and their weights: the unbiased
// scores (softmax_weight: their softmax), renormalised when norm_topk, times scale.
void route_topk(const RouterParams& p, float* logits, const float* sel_bias, int32_t* ids, float* weights);

// The scores route_topk selects by, for ranking guesses of a layer's experts (predictors): one
// row of router logits (before L's router bias, which is added here) becomes the gated scores plus the selection bias, with the
// groups outside the eligible ones at -inf. Same top-k as route_topk.
void selection_scores(const RouterParams& p, const LayerWeights& L, float* logits);

// Routes n_tok rows of router logits [n_tok][n_expert] (overwritten) of layer L as the forward pass
// does: L's router bias added, then route_topk with L's selection bias. ids/weights: [n_tok][k].
void route_layer(const RouterParams& p, const LayerWeights& L, float* logits, int64_t n_tok, int32_t* ids, float* weights);

// probs: [n_expert] router logits, overwritten with the softmax. Writes the k selected experts in
// descending probability (ties: lower id first) and their weights.
void route_softmax_topk(const RouterParams& p, float* logits, int32_t* ids, float* weights);

}  // namespace les
