// ThreadPool: every index processed exactly once, no lost wake-ups across many short jobs and
// pool lifetimes (a hang here fails by the test timeout), result independent of thread count.
#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "les/util/thread_pool.h"

using les::ThreadPool;

TEST(ThreadPool, EveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 64, 1000, 4099}) {
      for (int64_t grain : {1, 3, 16, 5000}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(n, grain, [&](int t, int64_t b, int64_t e) {
          EXPECT_GE(t, 0);
          EXPECT_LT(t, threads);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
      }
    }
  }
}

TEST(ThreadPool, ManyShortJobsAndLifetimes) {
  std::atomic<int64_t> total{0};
  for (int round = 0; round < 200; ++round) {
    ThreadPool pool(1 + round % 4);
    for (int j = 0; j < 50; ++j) {
      pool.parallel_for(8, 1, [&](int, int64_t b, int64_t e) { total += e - b; });
    }
    if (round % 7 == 0) {
      // Let workers fall asleep, then wake them again.
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      pool.parallel_for(8, 1, [&](int, int64_t b, int64_t e) { total += e - b; });
    }
  }
  EXPECT_EQ(total.load(), 200 * 50 * 8 + 29 * 8);
}

// The on-job hook (how a streaming source collects completed reads while the model computes):
// once per parallel_for that has work, on the calling thread, before any chunk runs.
TEST(ThreadPool, OnJobHookRunsOnTheCallerBeforeEachJob) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    int calls = 0;
    std::atomic<int> chunks{0};
    const auto caller = std::this_thread::get_id();
    pool.set_on_job([&] {
      EXPECT_EQ(std::this_thread::get_id(), caller);
      ++calls;
    });
    for (int j = 0; j < 50; ++j) {
      const int before = chunks.load();
      pool.parallel_for(j % 7, 1, [&](int, int64_t b, int64_t e) { chunks += static_cast<int>(e - b); });
      EXPECT_EQ(chunks.load() - before, j % 7);
    }
    int jobs = 0;
    for (int j = 0; j < 50; ++j) jobs += j % 7 > 0;
    EXPECT_EQ(calls, jobs) << threads << " threads";  // none for an empty range
    pool.set_on_job(nullptr);
    pool.parallel_for(10, 1, [](int, int64_t, int64_t) {});
    EXPECT_EQ(calls, jobs);
  }
}
