// A fixed pool of worker threads for data-parallel loops. The calling thread takes part, so a
// pool of n threads runs n-1 workers. Work is split into contiguous index ranges per thread, so
// each output element is computed by exactly one thread in a fixed order: results never depend
// on the thread count.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
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

  // Calls fn(thread_index, begin, end) for a partition of [0, n) into at most size() ranges,
  // each range a multiple of `grain` (except the last). Blocks until all ranges are done.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int, int64_t, int64_t)>& fn);

  // Calls fn(thread_index) once on every thread of the pool.
  void run_on_all(const std::function<void(int)>& fn);

 private:
  void worker(int index);

  int n_threads_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  const std::function<void(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  std::atomic<uint64_t> published_{0};
  std::atomic<int> pending_{0};
  bool stop_ = false;
};

}  // namespace les
