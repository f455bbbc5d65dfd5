// The share of the machine's CPU time that went to other work while something was being timed:
// other processes, interrupts and the time a hypervisor took from this VM (steal). A timing taken
// while that share is large measures the machine's load as much as what it meant to measure
// (the device probe: a starved process completes and resubmits its reads late).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace les {

// Clock ticks summed over all CPUs, from the "cpu" line of /proc/stat. idle counts iowait (a CPU
// waiting for I/O with nothing to run is free for the process that waits).
struct CpuTicks {
  uint64_t total = 0, idle = 0;
};
// The "cpu " line of a /proc/stat text; nullopt when it is missing or malformed.
std::optional<CpuTicks> parse_proc_stat(const std::string& text);

// Other work's share of the CPU time between two samples: (busy - own) / total, where busy is
// every non-idle tick of every CPU and own this process's ticks (user + system, all threads) over
// the same interval; clamped to [0, 1]. -1 when the interval is empty.
double other_cpu_share(const CpuTicks& before, const CpuTicks& after, uint64_t own_ticks);

// Measures other_cpu_share from construction to share(): /proc/stat and times(2). share() is -1
// where /proc/stat cannot be read.
class OtherCpuShare {
 public:
  OtherCpuShare();
  double share() const;

 private:
  std::optional<CpuTicks> start_;
  uint64_t own_start_ = 0;
};

}  // namespace les
