#include "les/mixed/allocate.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "les/util/error.h"

namespace les::mixed {

AllocResult allocate(const std::vector<AllocItem>& items, double budget, int resolution) {
  double min_cost = 0;
  for (const AllocItem& it : items) {
    if (it.options.empty()) throw Error(strfmt("allocation: group %s has no candidate", it.id.c_str()));
    double m = std::numeric_limits<double>::infinity();
    for (const AllocOption& o : it.options) m = std::min(m, o.cost);
    min_cost += m;
  }
  if (!(budget >= min_cost)) {
    throw Error(strfmt("the target is below the smallest possible allocation: every group at its cheapest type costs "
                       "%.0f, the budget is %.0f", min_cost, budget));
  }
  const int R = std::max(1, resolution);
  const double unit = budget / R;
  auto units = [&](double c) {
    const double u = std::ceil(c / unit - 1e-9);
    return u > R ? R + 1 : static_cast<int>(std::max(0.0, u));
  };
  const double inf = std::numeric_limits<double>::infinity();
  // best[b]: least dkld of the items so far with total units exactly <= b (monotone in b).
  std::vector<double> best(static_cast<size_t>(R) + 1, 0.0), next(static_cast<size_t>(R) + 1);
  std::vector<std::vector<int8_t>> pick(items.size(), std::vector<int8_t>(static_cast<size_t>(R) + 1, -1));
  for (size_t i = 0; i < items.size(); ++i) {
    const auto& opts = items[i].options;
    LES_ASSERT(opts.size() < 127);
    std::fill(next.begin(), next.end(), inf);
    for (size_t k = 0; k < opts.size(); ++k) {
      const int c = units(opts[k].cost);
      if (c > R) continue;
      for (int b = c; b <= R; ++b) {
        const double v = best[static_cast<size_t>(b - c)] + opts[k].dkld;
        if (v < next[static_cast<size_t>(b)]) {
          next[static_cast<size_t>(b)] = v;
          pick[i][static_cast<size_t>(b)] = static_cast<int8_t>(k);
        }
      }
    }
    best.swap(next);
  }
  if (!std::isfinite(best[static_cast<size_t>(R)])) {
    throw Error(strfmt("the target is too close to the smallest possible allocation (%.0f of %.0f) to be met after "
                       "rounding", min_cost, budget));
  }
  AllocResult r;
  r.choice.assign(items.size(), 0);
  int b = R;
  for (size_t i = items.size(); i-- > 0;) {
    const int k = pick[i][static_cast<size_t>(b)];
    LES_ASSERT(k >= 0);
    r.choice[i] = k;
    b -= units(items[i].options[static_cast<size_t>(k)].cost);
    LES_ASSERT(b >= 0);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    r.cost += items[i].options[static_cast<size_t>(r.choice[i])].cost;
    r.dkld += items[i].options[static_cast<size_t>(r.choice[i])].dkld;
  }
  return r;
}

}  // namespace les::mixed
