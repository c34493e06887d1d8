// A fixed pool of persistent worker threads for data-parallel loops.
//
// parallel_for(n, fn) splits [0, n) into one contiguous chunk per thread (the caller's thread
// takes chunk 0) and returns when every chunk is done. Calls to parallel_for on one pool are
// serialized; fn must not call back into the same pool. Exceptions must not escape fn.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace power {

class ThreadPool {
 public:
  // n_threads counts the caller: 1 means no worker threads. 0 picks the logical core count.
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // fn(begin, end, thread_index) over disjoint ranges covering [0, n).
  void parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn);

 private:
  void worker_loop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex call_mu_;  // serializes parallel_for callers
  std::mutex mu_;
  std::condition_variable cv_work_;
  std::condition_variable cv_done_;
  const std::function<void(size_t, size_t, int)>* job_ = nullptr;
  size_t job_n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

}  // namespace power
