// Overload through the public API, watched from the outside: the process's resident memory
// (VmRSS sampled every millisecond from /proc/self/status, and VmHWM) stays under
//   baseline (this process before the runtime exists) + the configured memory budget
//   (which covers the mapped weights, the workspace and the KV pool) + a stated slack
// while 10x more requests than fit are each served or rejected with a reason.
#include <gtest/gtest.h>
#include <malloc.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <thread>

#include "power/runtime.h"
#include "test_util.h"

namespace power {
namespace {

// A field of /proc/self/status in bytes ("VmRSS:     1234 kB"); 0 when absent.
uint64_t proc_status_bytes(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, field.size() + 1, field + ":") == 0) {
      return std::stoull(line.substr(field.size() + 1)) * 1024;
    }
  }
  return 0;
}

// Resets VmHWM to the current RSS (Linux >= 4.0); false when not allowed.
bool reset_peak_rss() {
  std::ofstream out("/proc/self/clear_refs");
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;  // shadow memory and quarantines are resident too
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

TEST(RuntimeOverload, ProcessRssStaysUnderBudgetPlusBaseline) {
  POWER_REQUIRE_SHARED();
  if (kSanitized) GTEST_SKIP() << "RSS under a sanitizer includes its shadow memory";
  const std::string path = testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  LoadOptions o;
  o.n_ctx = 256;
  o.max_running = 8;
  o.max_waiting = 12;
  o.threads = 2;
  ModelInfo info;
  {
    auto probe = Runtime::create({});
    ASSERT_TRUE(probe.ok());
    auto m = (*probe)->load(path, o);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    info = m->info();
  }
  // Weights + workspace + 3 contexts of KV: about 6 requests of 100 positions run at once.
  const uint64_t budget = info.weights_bytes + info.scratch_bytes + 3 * 16 * info.kv_block_bytes;

  // The sampler thread exists before the baseline, and freed heap goes back to the OS, so the
  // baseline is what this process holds without a runtime.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> peak_sampled{0};
  std::atomic<int> samples{0};
  auto sample = [&] {
    const uint64_t rss = proc_status_bytes("VmRSS");
    if (rss > peak_sampled.load()) peak_sampled.store(rss);
    samples.fetch_add(1);
  };
  std::thread sampler([&] {
    while (!stop.load()) {
      sample();
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  malloc_trim(0);
  const uint64_t baseline = proc_status_bytes("VmRSS");
  ASSERT_GT(baseline, 0u) << "no VmRSS in /proc/self/status";
  const bool hwm_reset = reset_peak_rss();
  peak_sampled.store(0);

  std::map<StatusCode, int> outcomes;
  int served = 0;
  {
    auto rt = Runtime::create({.memory_budget_bytes = budget});
    ASSERT_TRUE(rt.ok());
    auto m = (*rt)->load(path, o);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const std::vector<std::string> prompts = {"Once upon a time", "Lily went to the park",
                                              "The cat sat", "One day, a little bird"};
    const int n = 64;  // ~6 fit at once
    std::vector<std::optional<RequestHandle>> handles(n);
    for (int i = 0; i < n; ++i) {
      GenerateRequest r;
      r.prompt = prompts[static_cast<size_t>(i) % prompts.size()];
      r.max_tokens = 90;
      r.ignore_eos = true;
      r.sampling.temperature = 0.8f;
      r.sampling.seed = static_cast<uint64_t>(i);
      r.priority = static_cast<Priority>(i % 3);
      if (i % 2) r.deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      auto h = (*rt)->submit(*m, std::move(r));
      if (h.ok()) {
        handles[static_cast<size_t>(i)] = *h;
      } else {
        EXPECT_EQ(h.status().code(), StatusCode::kQueueFull) << h.status().to_string();
        ++outcomes[h.status().code()];
      }
    }
    for (auto& h : handles) {
      if (!h) continue;
      Completion c = h->wait();
      if (c.status.ok()) {
        EXPECT_EQ(c.tokens.size(), 90u);
        ++served;
      } else {
        EXPECT_EQ(c.status.code(), StatusCode::kDeadlineExceeded) << c.status.to_string();
        ++outcomes[c.status.code()];
      }
    }
    sample();
    EXPECT_LE(m->stats().peak_reserved_bytes, m->stats().budget_bytes);
  }
  stop.store(true);
  sampler.join();
  const uint64_t hwm = hwm_reset ? proc_status_bytes("VmHWM") : 0;
  const uint64_t peak = std::max(peak_sampled.load(), hwm);

  // Slack for what the budget does not count, with generous bounds:
  //  - the runtime's two threads (worker, one compute thread): touched stack pages and their
  //    malloc arenas' first pages, < 1 MiB each;
  //  - per-request bookkeeping of 64 requests: tokens (<= 100 ids), text (< 1 KiB), a
  //    sampler (a few n_vocab = 512 float rows, < 8 KiB): < 1 MiB in all;
  //  - the model's host-side copies outside the mapping (tokenizer of 512 entries, f32 norm
  //    rows, logits rows of max_running x n_vocab floats): < 1 MiB.
  // What the check catches: memory per request outside the budget, e.g. a context of KV
  // (16 blocks x kv_block_bytes = 160 KiB here) per request is 64 x 160 KiB = 10 MiB.
  const uint64_t slack = 4ull << 20;
  std::printf(
      "  rss: baseline %.2f MiB, peak %.2f MiB (%d samples, VmHWM %s), budget %.2f MiB "
      "(weights %.2f, workspace %.2f, KV %.2f), slack %.2f MiB; %d served, %d queue_full, %d "
      "deadline_exceeded\n",
      baseline / 1048576.0, peak / 1048576.0, samples.load(), hwm_reset ? "reset" : "not reset",
      budget / 1048576.0, info.weights_bytes / 1048576.0, info.scratch_bytes / 1048576.0,
      3 * 16 * info.kv_block_bytes / 1048576.0, slack / 1048576.0, served,
      outcomes[StatusCode::kQueueFull], outcomes[StatusCode::kDeadlineExceeded]);
  // Without a VmHWM reset, the 1 ms samples are all there is.
  EXPECT_TRUE(hwm_reset || samples.load() > 10) << samples.load() << " samples";
  EXPECT_GT(served, 0);
  EXPECT_GT(outcomes[StatusCode::kQueueFull], 0);
  EXPECT_EQ(served + outcomes[StatusCode::kQueueFull] + outcomes[StatusCode::kDeadlineExceeded],
            64);
  EXPECT_LE(peak, baseline + budget + slack);
}

}  // namespace
}  // namespace power
