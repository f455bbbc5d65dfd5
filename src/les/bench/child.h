// Runs a function in a forked child process and returns what it produced with the child's own
// resource usage (wait4): each measured run gets a fresh address space, so its peak RSS, load
// time and time to first token are its own, not the benchmark process's.
//
// The caller must have no other threads when it forks (the child runs arbitrary library code,
// which may need locks another thread held at the fork). The child's result crosses a pipe as
// bytes; an exception in the child comes back as its message; a child killed by a signal (e.g.
// the kernel's OOM killer) is reported as such. Never throws on the child's behalf: see ok/error.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

namespace les::bench {

struct ChildOutcome {
  bool ok = false;
  std::string payload;      // fn's return value (ok)
  std::string error;        // why not ok: the child's exception message, or how it died
  uint64_t peak_rss = 0;    // the child's peak resident set (bytes, ru_maxrss)
  double wall_s = 0;        // fork to exit
};

// fn runs in the child; its return value is the payload. Throws les::Error only when fork or
// pipe fail in the caller.
ChildOutcome run_in_child(const std::function<std::string()>& fn);

}  // namespace les::bench
