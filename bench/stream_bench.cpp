// STREAM-like bandwidth probe: read (sum), copy and triad over arrays far larger than the
// last-level cache, with 1..N threads each owning a slice. Prints GB/s (1e9 bytes/s), best of
// -r repetitions after a warm-up, as STREAM does. Usage: stream_bench [MiB per array] [reps]
// [threads,...]. The decode ceiling of a model is bytes of weights read per token / the read
// bandwidth (docs/PERFORMANCE.md).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

template <class F>
double timed_parallel(int threads, size_t n, F&& body) {
  std::vector<std::thread> pool;
  const auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) {
    const size_t b = n * t / threads, e = n * (t + 1) / threads;
    pool.emplace_back([&, b, e] { body(b, e); });
  }
  for (auto& th : pool) th.join();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  const size_t mib = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 512;
  const int reps = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<int> thread_counts;
  {
    std::stringstream ss(argc > 3 ? argv[3] : "1,2");
    std::string item;
    while (std::getline(ss, item, ','))
      thread_counts.push_back(std::max(1, std::atoi(item.c_str())));
  }
  const size_t n = mib * 1048576 / sizeof(float);
  std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.0f);
  std::vector<double> partial(64);
  for (int threads : thread_counts) {
    double best_read = 0, best_copy = 0, best_triad = 0;
    for (int r = -1; r < reps; ++r) {
      const double t_read = timed_parallel(threads, n, [&](size_t lo, size_t hi) {
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
        size_t i = lo;
        for (; i + 8 <= hi; i += 8) {
          s0 += a[i];
          s1 += a[i + 1];
          s2 += a[i + 2];
          s3 += a[i + 3];
          s4 += a[i + 4];
          s5 += a[i + 5];
          s6 += a[i + 6];
          s7 += a[i + 7];
        }
        for (; i < hi; ++i) s0 += a[i];
        partial[lo * 8 / n] = s0 + s1 + s2 + s3 + s4 + s5 + s6 + s7;
      });
      const double t_copy = timed_parallel(threads, n, [&](size_t lo, size_t hi) {
        std::copy(a.begin() + lo, a.begin() + hi, c.begin() + lo);
      });
      const double t_triad = timed_parallel(threads, n, [&](size_t lo, size_t hi) {
        for (size_t i = lo; i < hi; ++i) c[i] = a[i] + 3.0f * b[i];
      });
      if (r < 0) continue;
      const double bytes = static_cast<double>(n) * sizeof(float);
      best_read = std::max(best_read, bytes / t_read / 1e9);
      best_copy = std::max(best_copy, 2 * bytes / t_copy / 1e9);
      best_triad = std::max(best_triad, 3 * bytes / t_triad / 1e9);
    }
    std::printf(
        "{\"test\":\"stream\",\"threads\":%d,\"mib\":%zu,\"read_gbs\":%.2f,"
        "\"copy_gbs\":%.2f,\"triad_gbs\":%.2f}\n",
        threads, mib, best_read, best_copy, best_triad);
  }
  std::printf("# checksum %g\n", partial[0] + c[n / 2]);
  return 0;
}
