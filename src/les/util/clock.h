// Monotonic wall time for measurements (speeds, stalls, timeouts).
#pragma once

#include <chrono>

namespace les {

// Seconds on the steady clock (an arbitrary epoch: only differences mean something).
inline double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace les
