// Choosing one option per item (a tensor type per group) with the least total predicted KL
// divergence under a cost budget: a multiple-choice knapsack, solved exactly by dynamic
// programming over the cost discretised into `resolution` units (costs round up, so the result
// never exceeds the budget).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace les::mixed {

struct AllocOption {
  double cost = 0;      // in the budget's unit (bytes, or bytes streamed per token)
  double dkld = 0;      // predicted increase of the mean KL divergence
};

struct AllocItem {
  std::string id;
  std::vector<AllocOption> options;
};

struct AllocResult {
  std::vector<int> choice;  // per item: index of the chosen option
  double cost = 0;
  double dkld = 0;
};

// Throws les::Error naming the minimum cost when even the cheapest options exceed the budget.
AllocResult allocate(const std::vector<AllocItem>& items, double budget, int resolution = 100000);

}  // namespace les::mixed
