// One timed run of an A/B workload on a loaded model (validate/ab.h), and the machine-load
// sampling around it.
// A workload is JSONL, one request per line: {"prompt": "...", "max_tokens": 64,
// "temperature": 0, "seed": 1, "ignore_eos": false} (prompt required; the rest default as
// shown). The requests run one after another, each streamed, so per-token gaps and time to
// first token are measured as a client sees them.
// Thread-safety: one run at a time per model handle.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "power/runtime.h"

namespace power::validate {

struct WorkItem {
  std::string prompt;
  int32_t max_tokens = 64;
  float temperature = 0;
  uint64_t seed = 1;
  bool ignore_eos = false;
};

struct Workload {
  std::vector<WorkItem> items;
  std::string sha256;  // of the file's bytes
};
Result<Workload> read_workload(const std::string& path);

// Other processes' CPU time during an interval: the machine's busy CPU time (/proc/stat)
// minus this process's own (getrusage, children included), and the 1-minute load average at
// the start.
class IdleSampler {
 public:
  IdleSampler();
  nlohmann::json finish() const;  // {"load1", "other_cpu_s", "own_cpu_s"}

 private:
  double busy0_ = 0, own0_ = 0, load1_ = 0;
};

// Runs the workload once and returns the run record: completion_tokens, prompt_tokens,
// cached_prompt_tokens, wall_s, ttft_median_ms, token_latency_p50_ms / _p99_ms (gaps between
// streamed tokens), token_digest (SHA-256 over every request's generated ids) and, with
// logits_probe, logits_digest: SHA-256 of the raw float logits of the first request's prompt
// plus its output, computed after the timed part.
Result<nlohmann::json> run_workload(Runtime& rt, const ModelHandle& model, const Workload& w,
                                    bool logits_probe);

}  // namespace power::validate
