#include "les/bench/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "les/sched/io_probe.h"

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

double ceiling_tps(double bytes_per_token, double disk_bytes_per_s, double compute_s_per_token,
                   double idle_bytes_per_s) {
  const double compute = known(compute_s_per_token) ? compute_s_per_token : 0.0;
  double t = compute;
  if (known(disk_bytes_per_s) && std::isfinite(bytes_per_token) && bytes_per_token >= 0) {
    t = decode_ceiling_seconds(bytes_per_token, compute, disk_bytes_per_s / 1e6,
                               known(idle_bytes_per_s) ? idle_bytes_per_s / 1e6 : 0.0);
  }
  return t > 0 ? 1.0 / t : kNaN;
}

double ratio(double a, double b) {
  if (std::isnan(a) || std::isnan(b) || !(b > 0)) return kNaN;
  return a / b;
}

}  // namespace les::bench
