// A fixed pool of worker threads for data-parallel loops. The calling thread takes part, so a
// pool of n threads runs n-1 workers. A loop is cut into chunks that threads claim dynamically
// (a descheduled worker never stalls the loop: the others take its chunks). Each index is
// processed by exactly one thread with the same code, so results never depend on the thread
// count or on which thread ran what.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace les {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index, begin, end) over a partition of [0, n) into chunks of `grain`
  // indices (the last may be shorter). Blocks until every chunk is done. Not reentrant.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn);

  // Called on the calling thread at the start of every parallel_for (null: nothing): work that
  // must happen often on that thread while it computes, such as collecting completed reads and
  // starting the ones queued behind them. Set it before any parallel_for runs.
  void set_on_job(std::function<void()> f) { on_job_ = std::move(f); }

 private:
  void worker(int index);
  void run_chunks(int thread_index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::function<void()> on_job_;
  // Current job.
  const std::function<void(int, int64_t, int64_t)>* fn_ = nullptr;
  int64_t n_ = 0, grain_ = 1, n_chunks_ = 0;
  std::atomic<int64_t> next_chunk_{0};
  std::atomic<bool> open_{false};
  std::atomic<int> active_{0};
  std::atomic<uint32_t> generation_{0};  // 32-bit: waited on directly as a futex word
  std::atomic<int> sleepers_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace les
