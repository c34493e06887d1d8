// The server's counters and their Prometheus text form (GET /metrics).
//
// Counters are cumulative since start; gauges (running, waiting, KV blocks) are read from
// each loaded model's RuntimeStats when the page is rendered. The gauges a load-aware router
// reads are also served under the names of the Gateway API Inference Extension's model-server
// protocol (vLLM's: vllm:num_requests_waiting, vllm:kv_cache_usage_perc, ...); docs/DEPLOY.md
// has the table. Time to first token is a
// histogram in seconds with fixed buckets.
// Thread-safety: every method may be called from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "power/embed.h"
#include "power/runtime.h"

namespace power::server {

class Metrics {
 public:
  static constexpr std::array<double, 12> kTtftBucketsSeconds = {
      0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

  // One finished HTTP request: route ("/v1/chat/completions") and status code.
  void count_request(const std::string& route, int status);
  // A request turned away before generating: "queue_full", "does_not_fit", "deadline",
  // "invalid_request", "unauthorized", "body_too_large", "not_found", "draining".
  // `message` (the error's text) is kept with the last kRecentRejections of them.
  void count_rejection(const std::string& reason, const std::string& message = {},
                       int http_status = 0);

  struct Rejection {
    int64_t unix_ms = 0;
    std::string reason, message;
    int http_status = 0;
  };
  static constexpr size_t kRecentRejections = 64;
  // The latest rejections, oldest first (GET /api/refusals, the console's live view).
  std::vector<Rejection> recent_rejections() const;
  // A generation that ended: its tokens, time to first token and prompt-cache reuse.
  // `never_admitted`: it was still queued when it ended (counted apart when the client went
  // away: power_client_cancellations_queued_total).
  // `model` keys the per-model prefix-cache tallies (queried and hit prompt tokens).
  void count_generation(const Usage& usage, double ttft_ms, bool cancelled_by_client,
                        bool never_admitted = false, const std::string& model = {});

  struct ModelGauges {
    std::string name;
    RuntimeStats stats;
    int kv_block_tokens = 0;  // ModelInfo::kv_block_tokens (vllm:cache_config_info)
    // Models with recurrent layers: state slots in all (one per running sequence, per
    // replica); 0 for attention-only models.
    int64_t state_slots_total = 0;
    // Weights residency (ModelInfo): bytes resident and streamed, staging slots.
    uint64_t weights_pinned_bytes = 0, weights_streamed_bytes = 0, weights_staging_bytes = 0;
    uint64_t weights_mirror_bytes = 0;  // artifact bytes the partial mirror holds
    uint64_t weights_locked_bytes = 0;  // locked in RAM (mlock)
  };
  struct EmbedGauges {
    std::string name;
    EmbedStats stats;
  };
  // `active_generations`: requests submitted by this server and not finished.
  std::string render(const std::vector<ModelGauges>& models,
                     const std::vector<EmbedGauges>& embedders, int active_generations) const;

 private:
  // The router-facing gauges under vLLM's names (mu_ held).
  void render_router_metrics(const std::vector<ModelGauges>& models, std::string* out) const;

  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> requests_;
  std::map<std::string, uint64_t> rejections_;
  std::deque<Rejection> recent_;
  uint64_t prompt_tokens_ = 0, completion_tokens_ = 0, cached_prompt_tokens_ = 0;
  uint64_t generations_ = 0, prompt_cache_hits_ = 0, client_cancellations_ = 0;
  uint64_t client_cancellations_queued_ = 0;
  struct PrefixTally {
    uint64_t queried_tokens = 0, hit_tokens = 0;
  };
  std::map<std::string, PrefixTally> prefix_by_model_;
  std::array<uint64_t, kTtftBucketsSeconds.size()> ttft_buckets_{};
  uint64_t ttft_count_ = 0;
  double ttft_sum_seconds_ = 0;
};

}  // namespace power::server
