// Pure arithmetic of `les bench`: medians over repeats, the ceiling a row could reach on this
// machine, and ratios (no I/O, no clocks; unit-tested directly).
#pragma once

#include <limits>
#include <vector>

namespace les::bench {

// A figure that does not apply or was not measured.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Median of the values (the mean of the two middle ones for an even count); NaN for none.
// NaN inputs are ignored (a column that does not apply to some repeat).
double median(std::vector<double> v);

// The ceiling of a decode step in tok/s: the bytes the row must read per token, from a disk
// measured at disk_bytes_per_s while the cores compute and idle_bytes_per_s with idle cores
// (unknown: the same), beside compute_s_per_token of compute (the resident run's time per
// token): 1 / les::decode_ceiling_seconds (sched/io_probe.h); with one disk rate
// 1 / max(bytes / rate, compute). A term that is unknown (<= 0 or NaN) is left out; NaN when both are.
double ceiling_tps(double bytes_per_token, double disk_bytes_per_s, double compute_s_per_token,
                   double idle_bytes_per_s = kNaN);

// a / b, or NaN when either is missing (NaN) or b <= 0.
double ratio(double a, double b);

}  // namespace les::bench
