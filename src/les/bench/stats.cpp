#include "les/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace les::bench {

namespace {
bool known(double x) { return std::isfinite(x) && x > 0; }
}  // namespace

double median(std::vector<double> v) {
  v.erase(std::remove_if(v.begin(), v.end(), [](double x) { return std::isnan(x); }), v.end());
  if (v.empty()) return kNaN;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double ceiling_tps(double bytes_per_token, double disk_bytes_per_s, double compute_s_per_token) {
  double t = 0;
  if (known(disk_bytes_per_s) && std::isfinite(bytes_per_token) && bytes_per_token >= 0) {
    t = bytes_per_token / disk_bytes_per_s;
  }
  if (known(compute_s_per_token)) t = std::max(t, compute_s_per_token);
  return t > 0 ? 1.0 / t : kNaN;
}

double ratio(double a, double b) {
  if (std::isnan(a) || std::isnan(b) || !(b > 0)) return kNaN;
  return a / b;
}

}  // namespace les::bench
