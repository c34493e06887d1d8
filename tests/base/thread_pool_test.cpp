#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <vector>

namespace power {
namespace {

TEST(ThreadPool, CoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 2u, 7u, 1000u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, [&](size_t b, size_t e, int t) {
        EXPECT_LT(t, threads);
        for (size_t i = b; i < e; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
    }
  }
}

TEST(ThreadPool, ManyRoundsSum) {
  ThreadPool pool(4);
  std::atomic<long> total{0};
  for (int round = 0; round < 2000; ++round) {
    pool.parallel_for(100, [&](size_t b, size_t e, int) {
      long s = 0;
      for (size_t i = b; i < e; ++i) s += static_cast<long>(i);
      total += s;
    });
  }
  EXPECT_EQ(total.load(), 2000L * 4950L);
}

}  // namespace
}  // namespace power
