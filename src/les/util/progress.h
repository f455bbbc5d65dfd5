// A progress line on stderr for long work: bar, percent, MB/s and ETA. Redraws at most ~10
// times a second; prints nothing when stderr is not a terminal unless forced.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace les {

class Progress {
 public:
  Progress(std::string label, uint64_t total, bool force = false);
  ~Progress();
  void set_total(uint64_t total) { total_ = total; }
  void update(uint64_t done);
  void finish();

 private:
  void draw(uint64_t done, bool final);
  std::string label_;
  uint64_t total_;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_, last_;
};

}  // namespace les
