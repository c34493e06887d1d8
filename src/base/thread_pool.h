// A fixed pool of persistent worker threads for data-parallel loops.
//
// parallel_for(n, fn) splits [0, n) into contiguous pieces of about n / (4 x threads) indices
// that the threads (the caller's included) take in order from a shared counter as they become
// free, and returns when every piece is done. So fn runs several times per thread, each time on
// a disjoint range, and its thread_index names the calling thread (per-thread scratch), not a
// fixed share of the work: a thread that starts late or is slowed down (another process, a
// range that costs more, such as a longer sequence's attention) leaves its pieces to the others
// instead of making everyone wait for its fixed half (134M Q4_0, 8 streams, 2 threads: the
// caller's and the workers' waiting fell from 14 % to 8 % of the samples). Calls to
// parallel_for on one pool are serialized; fn must not call back into the same pool. Exceptions
// must not escape fn.
//
// Wake-ups: a decoder step makes ~8 parallel_for calls per layer, microseconds apart. Idle
// workers (and the caller waiting for the last chunk) spin on an atomic for up to spin_us
// microseconds (default 200) before they sleep on a condition variable, which saves a futex
// wake-up per call when every thread has a core of its own (llama.cpp's workers spin too):
// 134M Q4_0 decode on 2 threads, 2 cores: 61-76 tok/s sleeping at once, 183-204 spinning.
// Spinning is skipped while it would steal cores: when more pool threads of this process are
// awake than there are cores (replicas, several pools) or when /proc/loadavg counts more
// runnable threads than cores (other processes); then threads sleep at once, as before.
// POWER_SPIN_US=N in the environment sets spin_us (read once per pool; 0 never spins).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace power {

class ThreadPool {
 public:
  // n_threads counts the caller: 1 means no worker threads. 0 picks the logical core count.
  // spin_us < 0: POWER_SPIN_US if set, else 200.
  explicit ThreadPool(int n_threads = 0, int spin_us = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  int spin_us() const { return spin_us_; }

  // fn(begin, end, thread_index) over disjoint ranges covering [0, n), possibly several per
  // thread.
  void parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn);

 private:
  void worker_loop(int index);
  void run_chunks(const std::function<void(size_t, size_t, int)>& fn, int index);
  static constexpr size_t kChunksPerThread = 4;

  int n_threads_;
  int spin_us_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes parallel_for callers
  // Job hand-off: job_ and job_n_ are written before generation_ is bumped (release) and read
  // after it is seen (acquire). pending_ counts workers not done with the current job.
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0;
  size_t job_grain_ = 1;
  std::atomic<size_t> next_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  // Sleeping: a worker (or the caller) that stops spinning registers in sleepers_ /
  // caller_sleeping_ under mu_ before it waits; whoever changes generation_ / pending_ then
  // takes mu_ and notifies.
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_sleeping_{false};
};

}  // namespace power
