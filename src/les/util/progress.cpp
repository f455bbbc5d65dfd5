#include "les/util/progress.h"

#include <unistd.h>

#include <cstdio>

namespace les {

Progress::Progress(std::string label, uint64_t total, bool force)
    : label_(std::move(label)), total_(total), enabled_(force || isatty(STDERR_FILENO)) {
  start_ = last_ = std::chrono::steady_clock::now();
}

Progress::~Progress() { finish(); }

void Progress::update(uint64_t done) {
  const auto now = std::chrono::steady_clock::now();
  if (now - last_ < std::chrono::milliseconds(100) && done < total_) return;
  last_ = now;
  draw(done, false);
}

void Progress::finish() {
  if (finished_) return;
  finished_ = true;
  draw(total_, true);
}

void Progress::draw(uint64_t done, bool final) {
  if (!enabled_) return;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double frac = total_ ? static_cast<double>(done) / static_cast<double>(total_) : 1.0;
  const int width = 30;
  const int filled = static_cast<int>(frac * width);
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < filled ? '=' : (i == filled ? '>' : ' ');
  bar[width] = '\0';
  const double mbs = secs > 0 ? static_cast<double>(done) / secs / 1e6 : 0.0;
  const double eta = frac > 0 && frac < 1 ? secs * (1 - frac) / frac : 0.0;
  std::fprintf(stderr, "\r%s [%s] %5.1f%% %8.1f MB/s  %s %4.0fs ", label_.c_str(), bar, frac * 100.0, mbs,
               final ? "took" : "ETA ", final ? secs : eta);
  if (final) std::fputc('\n', stderr);
  std::fflush(stderr);
}

}  // namespace les
