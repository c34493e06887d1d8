// Pull progress: one event type for every consumer (terminal bar, JSON lines on stderr, and
// the server's SSE stream of a pull).
//
// A pull reports events through a ProgressCallback on the pulling thread; "downloading"
// events come at most every 100 ms per file plus one final event, the others once per step.
// JSON form (one object per line, keys absent when unknown):
//   {"status":"downloading","model":"m","file":"m.gguf","digest":"sha256:..",
//    "completed":N,"total":M,"rate_bytes_per_s":R}
// Thread-safety: the printers returned here keep state and must be called by one thread.
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace power::store {

struct PullProgress {
  // "resolving", "exists" (blob reused), "downloading", "retrying", "rejected" (a source
  // served wrong bytes or failed), "verifying", "committed", "writing manifest", "success",
  // "error".
  std::string status;
  std::string model;
  std::string file;
  std::string digest;  // "sha256:<hex>" when known
  std::string source;  // the URL or path being read
  uint64_t completed_bytes = 0;
  uint64_t total_bytes = 0;  // 0: unknown
  double rate_bytes_per_s = 0;
  std::string message;  // the reason for "retrying", "rejected" and "error"
};

using ProgressCallback = std::function<void(const PullProgress&)>;

std::string progress_to_json(const PullProgress& event);

enum class ProgressStyle { kAuto, kBar, kJsonLines, kNone };

// kAuto: a bar when `out` is a terminal, JSON lines otherwise.
ProgressCallback make_progress_printer(ProgressStyle style, std::FILE* out);

// "1.5 GiB", "12.0 MiB", "512 B".
std::string format_bytes(uint64_t bytes);

}  // namespace power::store
