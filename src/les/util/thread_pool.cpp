#include "les/util/thread_pool.h"

#include <algorithm>

namespace les {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) threads_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

void ThreadPool::worker(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin briefly: decode issues many short jobs back to back.
    uint64_t gen = published_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < 20000; ++spin) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
      gen = published_.load(std::memory_order_acquire);
    }
    const std::function<void(int)>* job = nullptr;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return generation_ != seen; });
      seen = generation_;
      if (stop_) return;
      job = job_;
    }
    (*job)(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_.notify_all();
    }
  }
}

void ThreadPool::run_on_all(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    pending_.store(n_threads_ - 1, std::memory_order_release);
    ++generation_;
    published_.store(generation_, std::memory_order_release);
  }
  cv_.notify_all();
  fn(0);
  // Wait for the workers: spin first, then block.
  for (int spin = 0; spin < 200000 && pending_.load(std::memory_order_acquire) != 0; ++spin) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  if (pending_.load(std::memory_order_acquire) != 0) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int, int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t n_chunks = (n + grain - 1) / grain;
  const int nt = static_cast<int>(std::min<int64_t>(n_threads_, n_chunks));
  if (nt <= 1) {
    fn(0, 0, n);
    return;
  }
  const int64_t per = (n_chunks + nt - 1) / nt;
  run_on_all([&](int t) {
    const int64_t b = std::min<int64_t>(n, t * per * grain);
    const int64_t e = std::min<int64_t>(n, (t + 1) * per * grain);
    if (b < e) fn(t, b, e);
  });
}

}  // namespace les
