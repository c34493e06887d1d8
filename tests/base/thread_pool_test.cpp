#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <utility>
#include <vector>

#include "test_util.h"

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

// Work is handed out in pieces (about n / (4 x threads) indices each) to whichever thread is
// free, so a thread that is held up does not hold a fixed share of the loop: here the first
// range the worker thread takes blocks until every index outside it is done, which the caller
// then finishes alone. With one fixed half per thread the held-up worker would own n / 2.
TEST(ThreadPool, AHeldUpThreadDoesNotHoldAFixedShare) {
  ThreadPool pool(2, 0);
  const size_t n = 64;
  std::atomic<size_t> done{0}, worker_items{0};
  std::atomic<bool> worker_blocked{false}, timed_out{false};
  pool.parallel_for(n, [&](size_t b, size_t e, int t) {
    if (t == 1 && !worker_blocked.exchange(true)) {
      const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (done.load() < n - (e - b)) {
        if (std::chrono::steady_clock::now() > until) {
          timed_out = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(200));
      }
    }
    if (t == 1) worker_items += e - b;
    done += e - b;
  });
  EXPECT_EQ(done.load(), n);
  EXPECT_FALSE(timed_out.load()) << "the caller did not take over the held-up thread's share";
  EXPECT_LT(worker_items.load(), n / 2);
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
        part[static_cast<size_t>(t)] += s;  // a thread may run several ranges
      });
      for (long& p : part) total += std::exchange(p, 0);
      if (round % 100 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    EXPECT_EQ(total, 500L * 4950L) << "spin_us " << spin_us;
  }
}

// Spin time: 200 us unless POWER_SPIN_US says otherwise (a malformed value keeps the default);
// an explicit constructor argument wins over both.
TEST(ThreadPool, SpinTimeFromEnvironment) {
  const testing::ScopedEnv env("POWER_SPIN_US");
  env.unset();
  EXPECT_EQ(ThreadPool(2).spin_us(), 200);
  env.set("0");
  EXPECT_EQ(ThreadPool(2).spin_us(), 0);
  env.set("35");
  EXPECT_EQ(ThreadPool(2).spin_us(), 35);
  EXPECT_EQ(ThreadPool(2, 7).spin_us(), 7);
  env.set("fast");
  EXPECT_EQ(ThreadPool(2).spin_us(), 200);
}

// Three spinning pools driven at once from three threads (more pool threads awake than cores on
// any small machine, so spinning gives way to sleeping mid-run): every round still completes
// with every index counted once.
TEST(ThreadPool, SeveralSpinningPoolsAtOnce) {
  std::vector<long> totals(3, 0);
  std::vector<std::thread> drivers;
  for (int d = 0; d < 3; ++d) {
    drivers.emplace_back([d, &totals] {
      ThreadPool pool(3, 300);
      std::vector<long> part(3);
      for (int round = 0; round < 2000; ++round) {
        pool.parallel_for(64, [&](size_t b, size_t e, int t) {
          long s = 0;
          for (size_t i = b; i < e; ++i) s += static_cast<long>(i) + 1;
          part[static_cast<size_t>(t)] += s;  // a thread may run several ranges
        });
        for (long& p : part) totals[static_cast<size_t>(d)] += std::exchange(p, 0);
      }
    });
  }
  for (auto& t : drivers) t.join();
  for (long total : totals) EXPECT_EQ(total, 2000L * (64L * 65L / 2));
}

}  // namespace
}  // namespace power
