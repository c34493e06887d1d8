#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
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

// Every round's work is done before parallel_for returns, whether the workers sleep at once
// (spin 0), spin briefly, or spin longer than the gaps between rounds; a pause between rounds
// lets spinning workers fall asleep so the wake-up path runs too.
TEST(ThreadPool, ManyRoundsSum) {
  for (int spin_us : {0, 20, 500}) {
    ThreadPool pool(4, spin_us);
    EXPECT_EQ(pool.spin_us(), spin_us);
    long total = 0;  // written by the caller only, after each round: no atomics needed
    std::vector<long> part(4);
    for (int round = 0; round < 500; ++round) {
      pool.parallel_for(100, [&](size_t b, size_t e, int t) {
        long s = 0;
        for (size_t i = b; i < e; ++i) s += static_cast<long>(i);
        part[static_cast<size_t>(t)] = s;
      });
      for (long& p : part) total += std::exchange(p, 0);
      if (round % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(total, 500L * 4950L) << "spin_us " << spin_us;
  }
}

}  // namespace
}  // namespace power
