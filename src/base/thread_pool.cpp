#include "base/thread_pool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/cpu.h"

namespace power {
namespace {

constexpr int kDefaultSpinUs = 200;

void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Pool threads of every pool in the process that are awake: running a chunk or spinning
// (a thread blocked on a condition variable is not counted). Spinning is allowed only while
// this stays within the logical core count, so two pools that share the cores (replicas,
// an ONNX pool next to a decoder) fall back to sleeping instead of spinning against each
// other.
std::atomic<int> g_awake{0};

int core_count() {
  static const int cores = cpu_features().logical_cores > 0 ? cpu_features().logical_cores : 1;
  return cores;
}

// Runnable threads in the whole system (the 4th field of /proc/loadavg, "R/T": R counts the
// reader too), read at most every 20 ms by whichever thread asks. More runnable threads than
// cores means other processes want these cores: a thread that spins then burns the time slice
// the thread it waits for needs, and loses the scheduler's wake-up credit to the other
// processes (measured with two busy loops beside a 2-thread decode on 2 cores: 2.7 tok/s
// spinning vs 94 tok/s sleeping). Unreadable (no /proc): never counted as oversubscribed.
bool system_oversubscribed() {
  static std::atomic<int64_t> next_check_ns{0};
  static std::atomic<bool> over{false};
  const int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t next = next_check_ns.load(std::memory_order_relaxed);
  if (now >= next &&
      next_check_ns.compare_exchange_strong(next, now + 20'000'000, std::memory_order_relaxed)) {
    bool o = false;
    if (int fd = ::open("/proc/loadavg", O_RDONLY | O_CLOEXEC); fd >= 0) {
      char buf[128];
      const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
      ::close(fd);
      if (n > 0) {
        buf[n] = '\0';
        // "0.72 1.32 1.69 3/412 12345": skip three fields to R.
        const char* p = buf;
        for (int field = 0; field < 3 && p != nullptr; ++field) {
          p = std::strchr(p, ' ');
          if (p != nullptr) ++p;
        }
        if (p != nullptr) o = std::atoi(p) > core_count();
      }
    }
    over.store(o, std::memory_order_relaxed);
  }
  return over.load(std::memory_order_relaxed);
}

// Spinning pays only when every awake thread has a core: not while more pool threads of this
// process are awake than there are cores, nor while other processes keep the cores busy.
bool spin_allowed() {
  return g_awake.load(std::memory_order_relaxed) <= core_count() && !system_oversubscribed();
}

// Spins until done() or spin_us microseconds passed, or until spinning stops paying
// (spin_allowed); true when done() became true.
template <typename Done>
bool spin_until(int spin_us, Done done) {
  if (spin_us <= 0 || !spin_allowed()) return done();
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(spin_us);
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (done()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= until || !spin_allowed()) return done();
  }
}

int default_spin_us() {
  if (const char* env = std::getenv("POWER_SPIN_US"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (end != env && *end == '\0' && v >= 0 && v <= 1000000) return static_cast<int>(v);
  }
  return kDefaultSpinUs;
}

}  // namespace

void ThreadPool::run_chunks(const std::function<void(size_t, size_t, int)>& fn, int index) {
  const size_t n = job_n_, grain = job_grain_;
  for (;;) {
    const size_t b = next_.fetch_add(grain, std::memory_order_relaxed);
    if (b >= n) return;
    fn(b, std::min(n, b + grain), index);
  }
}

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
  g_awake.fetch_add(1);
  for (;;) {
    auto ready = [&] { return stop_.load() || generation_.load() != seen; };
    if (!spin_until(spin_us_, ready)) {
      std::unique_lock<std::mutex> lock(mu_);
      sleepers_.fetch_add(1);
      g_awake.fetch_sub(1);
      cv_work_.wait(lock, ready);
      g_awake.fetch_add(1);
      sleepers_.fetch_sub(1);
    }
    if (stop_.load()) {
      g_awake.fetch_sub(1);
      return;
    }
    seen = generation_.load(std::memory_order_acquire);
    run_chunks(*job_, index);
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
  g_awake.fetch_add(1);
  job_ = &fn;
  job_n_ = n;
  job_grain_ = std::max<size_t>(1, n / (static_cast<size_t>(n_threads_) * kChunksPerThread));
  next_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1);
  // seq_cst: either a worker about to sleep sees the new generation, or we see it sleeping.
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) {
    std::lock_guard<std::mutex> lock(mu_);
    cv_work_.notify_all();
  }
  run_chunks(fn, 0);
  auto done = [&] { return pending_.load() == 0; };
  if (!spin_until(spin_us_, done)) {
    std::unique_lock<std::mutex> lock(mu_);
    caller_sleeping_.store(true);
    g_awake.fetch_sub(1);
    cv_done_.wait(lock, done);
    g_awake.fetch_add(1);
    caller_sleeping_.store(false);
  }
  g_awake.fetch_sub(1);
  job_ = nullptr;
}

}  // namespace power
