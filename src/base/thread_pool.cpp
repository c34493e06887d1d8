#include "base/thread_pool.h"

#include <chrono>
#include <cstdlib>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/cpu.h"

namespace power {
namespace {

void chunk_of(size_t n, int parts, int index, size_t* begin, size_t* end) {
  size_t base = n / static_cast<size_t>(parts);
  size_t extra = n % static_cast<size_t>(parts);
  size_t i = static_cast<size_t>(index);
  *begin = i * base + (i < extra ? i : extra);
  *end = *begin + base + (i < extra ? 1 : 0);
}

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Spins until done() or spin_us microseconds passed; true when done() became true.
template <typename Done>
bool spin_until(int spin_us, Done done) {
  if (spin_us <= 0) return done();
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until) return done();
  }
}

int default_spin_us() {
  if (const char* env = std::getenv("POWER_SPIN_US"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0 && v <= 1000000) return static_cast<int>(v);
  }
  return 0;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads, int spin_us)
    : n_threads_(n_threads > 0 ? n_threads : cpu_features().logical_cores),
      spin_us_(spin_us >= 0 ? spin_us : default_spin_us()) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true);
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto ready = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(spin_us_, ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      cv_work_.wait(lock, ready);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    const auto* job = job_;
    const size_t n = job_n_;
    size_t b, e;
    chunk_of(n, n_threads_, index, &b, &e);
    if (b < e) (*job)(b, e, index);
    if (pending_.fetch_sub(1) == 1 && caller_sleeping_.load()) {
      std::lock_guard<std::mutex> lock(mu_);
      cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(size_t n, const std::function<void(size_t, size_t, int)>& fn) {
  if (n == 0) return;
  if (n_threads_ == 1 || n == 1) {
    fn(0, n, 0);
    return;
  }
  std::lock_guard<std::mutex> call_lock(call_mu_);
  job_ = &fn;
  job_n_ = n;
  pending_.store(n_threads_ - 1);
  // seq_cst: either a worker about to sleep sees the new generation, or we see it sleeping.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_work_.notify_all();
  }
  size_t b, e;
  chunk_of(n, n_threads_, 0, &b, &e);
  if (b < e) fn(b, e, 0);
  auto done = [&] { return pending_.load() == 0; };
  if (!spin_until(spin_us_, done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true);
    cv_done_.wait(lock, done);
    caller_sleeping_.store(false);
  }
  job_ = nullptr;
}

}  // namespace power
