// Every eviction policy replayed on one routing trace at several cache sizes, with the engine's
// semantics (a layer's selected experts are in use together) and demand reads only, next to
// Belady's offline optimum; and its JSON form (bench_cache_policy --json).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "les/cache/trace.h"

namespace les::cache {

struct CapacityResult {
  double fraction = 0;   // of the trace's (layer, expert) keys
  size_t slots = 0;
  double belady = 0;     // hit rate
  std::vector<std::pair<std::string, double>> policies;  // name -> hit rate
};

struct PolicyComparison {
  std::vector<CapacityResult> capacities;
  std::string default_policy;  // the engine's (kDefaultPolicy)
};

// policies empty: every base policy (policy_names()) and the engine's default.
PolicyComparison compare_policies(const RoutingTrace& trace, const std::vector<double>& fractions,
                                  std::vector<std::string> policies = {});

// {"capacities": [{"fraction": 0.10, "slots": N, "belady": h, "policies": {"lru": h, ...}}, ...],
//  "default_policy": "..."}
std::string comparison_json(const PolicyComparison& c);

}  // namespace les::cache
