#include "les/util/thread_pool.h"

#include <algorithm>

namespace les {

namespace {
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}
}  // namespace

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::run_chunks(int thread_index) {
  for (;;) {
    const int64_t c = next_chunk_.fetch_add(1);
    if (c >= n_chunks_) return;
    const int64_t b = c * grain_;
    (*fn_)(thread_index, b, std::min(n_, b + grain_));
  }
}

void ThreadPool::worker(int index) {
  uint64_t seen = generation_.load();
  for (;;) {
    // Spin a little (decode issues many short loops back to back), then sleep.
    uint64_t gen = generation_.load();
    for (int spin = 0; gen == seen && spin < 4000; ++spin) {
      cpu_relax();
      gen = generation_.load();
    }
    if (gen == seen) {
      sleepers_.fetch_add(1);
      gen = generation_.load();
      while (gen == seen) {
        generation_.wait(seen);
        gen = generation_.load();
      }
      sleepers_.fetch_sub(1);
    }
    seen = gen;
    if (stop_.load()) return;
    // Join the job only while it is open; the owner waits for every joined worker.
    active_.fetch_add(1);
    if (open_.load()) run_chunks(index);
    active_.fetch_sub(1);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_chunks = (n + grain - 1) / grain;
  if (n_threads_ == 1 || n_chunks == 1) {
    fn(0, 0, n);
    return;
  }
  // Up to 4 chunks per thread so that a slow thread's share is taken over by the others.
  const int64_t max_chunks = static_cast<int64_t>(n_threads_) * 4;
  if (n_chunks > max_chunks) grain = ((n_chunks + max_chunks - 1) / max_chunks) * grain;
  fn_ = &fn;
  n_ = n;
  grain_ = grain;
  n_chunks_ = (n + grain - 1) / grain;
  next_chunk_.store(0);
  open_.store(true);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  run_chunks(0);
  open_.store(false);
  while (active_.load() != 0) cpu_relax();
}

}  // namespace les
