#include "les/util/cpu_share.h"

#include <sys/times.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace les {

namespace {

std::optional<CpuTicks> read_proc_stat() {
  std::ifstream f("/proc/stat");
  if (!f) return std::nullopt;
  std::string line;
  std::getline(f, line);  // the "cpu" line comes first
  return parse_proc_stat(line);
}

uint64_t own_ticks_now() {
  struct tms t {};
  ::times(&t);
  return static_cast<uint64_t>(t.tms_utime) + static_cast<uint64_t>(t.tms_stime);
}

}  // namespace

std::optional<CpuTicks> parse_proc_stat(const std::string& text) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    // user nice system idle iowait irq softirq steal [guest guest_nice]: guest time is already in
    // user and nice, so it is not added again.
    uint64_t v[8] = {};
    for (uint64_t& x : v) {
      if (!(fields >> x)) return std::nullopt;
    }
    CpuTicks t;
    for (uint64_t x : v) t.total += x;
    t.idle = v[3] + v[4];
    return t;
  }
  return std::nullopt;
}

double other_cpu_share(const CpuTicks& before, const CpuTicks& after, uint64_t own_ticks) {
  if (after.total <= before.total) return -1;
  const double total = static_cast<double>(after.total - before.total);
  const double idle = after.idle >= before.idle ? static_cast<double>(after.idle - before.idle) : 0.0;
  const double other = total - idle - static_cast<double>(own_ticks);
  return std::clamp(other / total, 0.0, 1.0);
}

OtherCpuShare::OtherCpuShare() : start_(read_proc_stat()), own_start_(own_ticks_now()) {}

double OtherCpuShare::share() const {
  if (!start_) return -1;
  const std::optional<CpuTicks> now = read_proc_stat();
  if (!now) return -1;
  const uint64_t own = own_ticks_now();
  return other_cpu_share(*start_, *now, own >= own_start_ ? own - own_start_ : 0);
}

}  // namespace les
