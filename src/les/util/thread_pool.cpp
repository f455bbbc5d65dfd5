#include "les/util/thread_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>

namespace les {

namespace {
// Direct futex calls on the 32-bit generation word (std::atomic::wait in libstdc++ 12 can miss
// wake-ups under contention).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

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
  futex_wake_all(&generation_);
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
  // The generation at construction: a job or stop published before this thread ran is not missed.
  uint32_t seen = 0;
  for (;;) {
    // Spin a little (decode issues many short loops back to back), then sleep.
    uint32_t gen = generation_.load();
    for (int spin = 0; gen == seen && spin < 4000; ++spin) {
      cpu_relax();
      gen = generation_.load();
    }
    if (gen == seen) {
      sleepers_.fetch_add(1);
      gen = generation_.load();
      while (gen == seen) {
        futex_wait(&generation_, seen);
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
  if (on_job_) on_job_();
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
  if (sleepers_.load() > 0) futex_wake_all(&generation_);
  run_chunks(0);
  open_.store(false);
  while (active_.load() != 0) cpu_relax();
}

}  // namespace les
