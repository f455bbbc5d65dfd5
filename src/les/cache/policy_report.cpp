#include "les/cache/policy_report.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "les/cache/policy.h"
#include "les/cache/replay.h"
#include "les/util/error.h"

namespace les::cache {

PolicyComparison compare_policies(const RoutingTrace& tr, const std::vector<double>& fractions,
                                  std::vector<std::string> policies) {
  if (policies.empty()) {
    policies = policy_names();
    if (std::find(policies.begin(), policies.end(), kDefaultPolicy) == policies.end()) policies.push_back(kDefaultPolicy);
  }
  PolicyComparison c;
  c.default_policy = kDefaultPolicy;
  const double keys = static_cast<double>(tr.n_layers) * tr.n_experts;
  for (double f : fractions) {
    if (!(f > 0 && f <= 1)) throw Error(strfmt("cache fraction %g not in (0, 1]", f));
    CapacityResult r;
    r.fraction = f;
    r.slots = std::max(static_cast<size_t>(tr.top_k), static_cast<size_t>(f * keys));
    r.belady = replay_belady(tr, r.slots, true).hit_rate();
    for (const std::string& name : policies) {
      PolicyParams p;
      p.capacity = r.slots;
      p.n_layers = tr.n_layers;
      p.top_k = tr.top_k;
      auto pol = make_policy(name, p);
      ReplayOptions o;
      o.capacity = r.slots;
      o.protect_layer = true;
      r.policies.emplace_back(name, replay(tr, *pol, o).hit_rate());
    }
    c.capacities.push_back(std::move(r));
  }
  return c;
}

std::string comparison_json(const PolicyComparison& c) {
  nlohmann::ordered_json j;
  nlohmann::ordered_json caps = nlohmann::ordered_json::array();
  for (const CapacityResult& r : c.capacities) {
    nlohmann::ordered_json pol = nlohmann::ordered_json::object();
    for (const auto& [name, h] : r.policies) pol[name] = h;
    caps.push_back({{"fraction", r.fraction}, {"slots", r.slots}, {"belady", r.belady}, {"policies", pol}});
  }
  j["capacities"] = caps;
  j["default_policy"] = c.default_policy;
  return j.dump(1) + "\n";
}

}  // namespace les::cache
