#include "les/quality/kld_summary.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "les/util/error.h"

namespace les::quality {

double percentile_sorted(std::span<const double> sorted, double q) {
  LES_ASSERT(!sorted.empty());
  if (q <= 0) return sorted.front();
  if (q >= 1) return sorted.back();
  const double at = q * static_cast<double>(sorted.size() - 1);
  const size_t i = static_cast<size_t>(at);
  const double frac = at - static_cast<double>(i);
  if (i + 1 >= sorted.size()) return sorted.back();
  return (1 - frac) * sorted[i] + frac * sorted[i + 1];
}

KldSummary summarize_kld(std::span<const double> kld, size_t n_same_top1) {
  KldSummary s;
  s.count = kld.size();
  if (kld.empty()) return s;
  LES_ASSERT(n_same_top1 <= kld.size());
  std::vector<double> v(kld.begin(), kld.end());
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  double sum = 0;
  for (double x : v) sum += x;
  s.mean = sum / n;
  if (v.size() > 1) {
    double ss = 0;
    for (double x : v) ss += (x - s.mean) * (x - s.mean);
    s.mean_se = std::sqrt(ss / (n - 1) / n);
  }
  s.min = v.front();
  s.max = v.back();
  s.median = percentile_sorted(v, 0.5);
  s.p90 = percentile_sorted(v, 0.90);
  s.p95 = percentile_sorted(v, 0.95);
  s.p99 = percentile_sorted(v, 0.99);
  s.p999 = percentile_sorted(v, 0.999);
  s.same_top1 = static_cast<double>(n_same_top1) / n;
  if (v.size() > 1) s.same_top1_se = std::sqrt(s.same_top1 * (1 - s.same_top1) / (n - 1));
  return s;
}

KldSummary summarize_kld(std::span<const TokenCompare> tokens) {
  std::vector<double> k;
  k.reserve(tokens.size());
  size_t same = 0;
  for (const auto& t : tokens) {
    k.push_back(t.kld);
    same += t.same_top1 ? 1 : 0;
  }
  return summarize_kld(k, same);
}

}  // namespace les::quality
