// ThreadPool: every index processed exactly once, no lost wake-ups across many short jobs and
// pool lifetimes (a hang here fails by the test timeout), result independent of thread count.
#include <atomic>
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
