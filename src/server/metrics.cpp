#include "server/metrics.h"

#include <chrono>

#include <fmt/format.h>

namespace power::server {

void Metrics::count_request(const std::string& route, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++requests_[{route, status}];
}

void Metrics::count_rejection(const std::string& reason, const std::string& message,
                              int http_status) {
  const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
  std::lock_guard<std::mutex> lk(mu_);
  ++rejections_[reason];
  recent_.push_back({now, reason, message, http_status});
  if (recent_.size() > kRecentRejections) recent_.pop_front();
}

std::vector<Metrics::Rejection> Metrics::recent_rejections() const {
  std::lock_guard<std::mutex> lk(mu_);
  return {recent_.begin(), recent_.end()};
}

void Metrics::count_generation(const Usage& usage, double ttft_ms, bool cancelled_by_client,
                               bool never_admitted, const std::string& model) {
  std::lock_guard<std::mutex> lk(mu_);
  ++generations_;
  if (!model.empty()) {
    PrefixTally& t = prefix_by_model_[model];
    t.queried_tokens += static_cast<uint64_t>(usage.prompt_tokens);
    t.hit_tokens += static_cast<uint64_t>(usage.cached_prompt_tokens);
  }
  prompt_tokens_ += static_cast<uint64_t>(usage.prompt_tokens);
  completion_tokens_ += static_cast<uint64_t>(usage.completion_tokens);
  cached_prompt_tokens_ += static_cast<uint64_t>(usage.cached_prompt_tokens);
  if (usage.cached_prompt_tokens > 0) ++prompt_cache_hits_;
  if (cancelled_by_client) ++client_cancellations_;
  // Cancelled while still queued: it never ran.
  if (cancelled_by_client && usage.completion_tokens == 0 && never_admitted) {
    ++client_cancellations_queued_;
  }
  if (usage.completion_tokens > 0) {
    double s = ttft_ms / 1000.0;
    for (size_t i = 0; i < kTtftBucketsSeconds.size(); ++i) {
      if (s <= kTtftBucketsSeconds[i]) ++ttft_buckets_[i];
    }
    ++ttft_count_;
    ttft_sum_seconds_ += s;
  }
}

namespace {

// Prometheus label values escape backslash, quote and newline.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// A metric family's # HELP and # TYPE lines.
void append_header(std::string& o, std::string_view name, std::string_view type,
                   std::string_view help) {
  o += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

// used / total KV blocks; 0 for a pool of none.
double usage_ratio(const RuntimeStats& s) {
  return s.kv_blocks_total > 0
             ? static_cast<double>(s.kv_blocks_used) / static_cast<double>(s.kv_blocks_total)
             : 0.0;
}

}  // namespace

// The Gateway API Inference Extension's model-server protocol reads vLLM's metric names; the
// same gauges under those names let its endpoint picker (and any router written for vLLM)
// route on Power without a mapping.
void Metrics::render_router_metrics(const std::vector<ModelGauges>& models,
                                    std::string* out) const {
  std::string& o = *out;
  auto header = [&o](std::string_view name, std::string_view type, std::string_view help) {
    append_header(o, name, type, help);
  };
  header("vllm:num_requests_running", "gauge", "Requests in the running batch (vLLM's name).");
  for (const auto& m : models) {
    o += fmt::format("vllm:num_requests_running{{model_name=\"{}\"}} {}\n", label(m.name),
                     m.stats.running);
  }
  header("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled (vLLM's name).");
  for (const auto& m : models) {
    o += fmt::format("vllm:num_requests_waiting{{model_name=\"{}\"}} {}\n", label(m.name),
                     m.stats.waiting);
  }
  // vLLM renamed gpu_cache_usage_perc to kv_cache_usage_perc; routers read either. Both are
  // a fraction (1 = full), as in vLLM.
  for (const char* name : {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"}) {
    header(name, "gauge", "KV cache usage, 1 = full (vLLM's name).");
    for (const auto& m : models) {
      o += fmt::format("{}{{model_name=\"{}\"}} {}\n", name, label(m.name), usage_ratio(m.stats));
    }
  }
  header("vllm:cache_config_info", "gauge",
         "KV cache block size (positions) and pool size in blocks, as labels (vLLM's name).");
  for (const auto& m : models) {
    o += fmt::format(
        "vllm:cache_config_info{{model_name=\"{}\",block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1\n",
        label(m.name), m.kv_block_tokens, m.stats.kv_blocks_total);
  }
  // Power serves no LoRA adapters: the protocol's LoRA gauge says so (none running, none
  // waiting, max 0), so a LoRA-affinity picker treats every replica alike.
  header("vllm:lora_requests_info", "gauge",
         "LoRA adapters running and waiting (none: Power serves no adapters).");
  o += "vllm:lora_requests_info{max_lora=\"0\",running_lora_adapters=\"\","
       "waiting_lora_adapters=\"\"} 0\n";
  header("vllm:prefix_cache_queries_total", "counter",
         "Prompt tokens looked up in the prefix cache (vLLM's name).");
  for (const auto& [name, t] : prefix_by_model_) {
    o += fmt::format("vllm:prefix_cache_queries_total{{model_name=\"{}\"}} {}\n", label(name),
                     t.queried_tokens);
  }
  header("vllm:prefix_cache_hits_total", "counter",
         "Prompt tokens served from the prefix cache (vLLM's name).");
  for (const auto& [name, t] : prefix_by_model_) {
    o += fmt::format("vllm:prefix_cache_hits_total{{model_name=\"{}\"}} {}\n", label(name),
                     t.hit_tokens);
  }
}

std::string Metrics::render(const std::vector<ModelGauges>& models,
                            const std::vector<EmbedGauges>& embedders,
                            int active_generations) const {
  std::lock_guard<std::mutex> lk(mu_);
  std::string o;
  auto header = [&o](std::string_view name, std::string_view type, std::string_view help) {
    append_header(o, name, type, help);
  };
  header("power_http_requests_total", "counter", "HTTP requests answered, by route and status.");
  for (const auto& [key, n] : requests_) {
    o += fmt::format("power_http_requests_total{{route=\"{}\",status=\"{}\"}} {}\n",
                     label(key.first), key.second, n);
  }
  header("power_active_generations", "gauge", "Generations submitted and not finished.");
  o += fmt::format("power_active_generations {}\n", active_generations);
  header("power_rejections_total", "counter", "Requests turned away, by reason.");
  for (const char* r : {"queue_full", "does_not_fit", "deadline", "invalid_request", "unauthorized",
                        "body_too_large", "not_found", "draining"}) {
    auto it = rejections_.find(r);
    o += fmt::format("power_rejections_total{{reason=\"{}\"}} {}\n", r,
                     it == rejections_.end() ? 0 : it->second);
  }
  header("power_generations_total", "counter", "Generations that ran (admitted requests).");
  o += fmt::format("power_generations_total {}\n", generations_);
  header("power_client_cancellations_total", "counter",
         "Generations cancelled because the client went away.");
  o += fmt::format("power_client_cancellations_total {}\n", client_cancellations_);
  header("power_client_cancellations_queued_total", "counter",
         "Client cancellations of requests that were still queued (never ran).");
  o += fmt::format("power_client_cancellations_queued_total {}\n", client_cancellations_queued_);
  header("power_prompt_tokens_total", "counter", "Prompt tokens processed.");
  o += fmt::format("power_prompt_tokens_total {}\n", prompt_tokens_);
  header("power_completion_tokens_total", "counter", "Tokens generated.");
  o += fmt::format("power_completion_tokens_total {}\n", completion_tokens_);
  header("power_prompt_cache_hits_total", "counter",
         "Generations that reused cached prompt KV blocks.");
  o += fmt::format("power_prompt_cache_hits_total {}\n", prompt_cache_hits_);
  header("power_prompt_cache_tokens_total", "counter", "Prompt tokens served from the cache.");
  o += fmt::format("power_prompt_cache_tokens_total {}\n", cached_prompt_tokens_);
  header("power_time_to_first_token_seconds", "histogram",
         "Submit to first generated token, seconds.");
  for (size_t i = 0; i < kTtftBucketsSeconds.size(); ++i) {
    o += fmt::format("power_time_to_first_token_seconds_bucket{{le=\"{}\"}} {}\n",
                     kTtftBucketsSeconds[i], ttft_buckets_[i]);
  }
  o += fmt::format("power_time_to_first_token_seconds_bucket{{le=\"+Inf\"}} {}\n", ttft_count_);
  o += fmt::format("power_time_to_first_token_seconds_sum {}\n", ttft_sum_seconds_);
  o += fmt::format("power_time_to_first_token_seconds_count {}\n", ttft_count_);

  // One gauge or counter with a sample per model.
  auto per_model = [&](std::string_view name, std::string_view type, std::string_view help,
                       auto value) {
    header(name, type, help);
    for (const auto& m : models) {
      o += fmt::format("{}{{model=\"{}\"}} {}\n", name, label(m.name), value(m));
    }
  };
  using G = ModelGauges;
  per_model("power_requests_running", "gauge", "Requests in the running batch, per model.",
            [](const G& m) { return m.stats.running; });
  per_model("power_queue_depth", "gauge", "Requests waiting for a slot or memory, per model.",
            [](const G& m) { return m.stats.waiting; });
  per_model("power_kv_blocks_used", "gauge", "KV cache blocks in use, per model.",
            [](const G& m) { return m.stats.kv_blocks_used; });
  per_model("power_kv_blocks_total", "gauge", "KV cache blocks in the pool, per model.",
            [](const G& m) { return m.stats.kv_blocks_total; });
  per_model("power_prefix_cache_blocks", "gauge", "KV blocks held by the prefix cache, per model.",
            [](const G& m) { return m.stats.prefix_cache_blocks; });
  // Weights residency (docs/RESIDENCY.md).
  per_model("power_weights_pinned_bytes", "gauge", "Bytes of weights kept resident, per model.",
            [](const G& m) { return m.weights_pinned_bytes; });
  per_model("power_weights_locked_bytes", "gauge",
            "Bytes of weights locked in RAM (mlock), per model.",
            [](const G& m) { return m.weights_locked_bytes; });
  per_model("power_weights_streamed_bytes", "gauge",
            "Bytes of weights streamed from the artifact each pass, per model (resident form).",
            [](const G& m) { return m.weights_streamed_bytes; });
  per_model("power_weights_staging_bytes", "gauge", "Staging slots of streamed weights, per model.",
            [](const G& m) { return m.weights_staging_bytes; });
  per_model("power_weights_read_bytes_total", "counter",
            "Bytes of streamed weights read from the artifact, per model.",
            [](const G& m) { return m.stats.weights_read_bytes; });
  header("power_weights_prefetch_total", "counter",
         "Streamed weight groups read ahead, per model, by whether a pass used them.");
  for (const auto& m : models) {
    o += fmt::format("power_weights_prefetch_total{{model=\"{}\",used=\"true\"}} {}\n",
                     label(m.name), m.stats.weights_prefetch_useful);
    o += fmt::format("power_weights_prefetch_total{{model=\"{}\",used=\"false\"}} {}\n",
                     label(m.name), m.stats.weights_prefetch_unused);
  }
  per_model("power_weights_io_wait_seconds_total", "counter",
            "Compute time spent waiting for streamed weights, per model.",
            [](const G& m) { return static_cast<double>(m.stats.weights_wait_ns) / 1e9; });
  per_model("power_weights_read_errors_total", "counter",
            "Failed reads of streamed weights (the pass failed), per model.",
            [](const G& m) { return m.stats.weights_read_errors; });
  per_model("power_weights_mirror_bytes", "gauge",
            "Bytes of the artifact the partial weights mirror holds, per model.",
            [](const G& m) { return m.weights_mirror_bytes; });
  per_model("power_weights_mirror_read_bytes_total", "counter",
            "Bytes of streamed weights read from the partial mirror, per model.",
            [](const G& m) { return m.stats.weights_mirror_bytes_read; });
  per_model("power_weights_mirror_fallbacks_total", "counter",
            "Mirror reads that failed (error, short read, checksum) and were served from the "
            "artifact, per model.",
            [](const G& m) { return m.stats.weights_mirror_fallbacks; });
  per_model("power_weights_cache_hits_total", "counter",
            "Token-embedding rows served by the weights cache, per model.",
            [](const G& m) { return m.stats.weights_cache_hits; });
  per_model("power_weights_cache_misses_total", "counter",
            "Token-embedding rows the weights cache did not hold (read from the artifact), per "
            "model.",
            [](const G& m) { return m.stats.weights_cache_misses; });
  // The cache is the runtime's, shared by its models: one sample.
  {
    const G* c = nullptr;
    for (const auto& m : models) {
      if (m.stats.weights_cache_capacity_bytes > 0) c = &m;
    }
    header("power_weights_cache_bytes", "gauge",
           "Bytes held by the weights cache (shared by the models).");
    o += fmt::format("power_weights_cache_bytes {}\n", c ? c->stats.weights_cache_bytes : 0);
    header("power_weights_cache_capacity_bytes", "gauge",
           "The weights cache's capacity (0: none).");
    o += fmt::format("power_weights_cache_capacity_bytes {}\n",
                     c ? c->stats.weights_cache_capacity_bytes : 0);
    header("power_weights_cache_evictions_total", "counter",
           "Pieces the weights cache evicted to admit others.");
    o += fmt::format("power_weights_cache_evictions_total {}\n",
                     c ? c->stats.weights_cache_evictions : 0);
    header("power_weights_cache_rejected_total", "counter",
           "Pieces the weights cache's admission check refused (lfru: not hotter than what they "
           "would evict).");
    o += fmt::format("power_weights_cache_rejected_total {}\n",
                     c ? c->stats.weights_cache_rejected : 0);
  }
  per_model("power_prefix_state_checkpoints", "gauge",
            "Recurrent-state checkpoints held by the prefix cache, per model.",
            [](const G& m) { return m.stats.prefix_state_checkpoints; });
  per_model("power_reserved_bytes", "gauge", "Memory reserved by admitted requests, per model.",
            [](const G& m) { return m.stats.reserved_bytes; });
  per_model("power_scheduler_steps_total", "counter", "Forward passes run, per model.",
            [](const G& m) { return m.stats.steps; });
  per_model("power_forward_tokens_total", "counter",
            "Tokens computed by forward passes (prompt, decode and draft tokens), per model; "
            "power_weights_read_bytes_total over it is the bytes read per token.",
            [](const G& m) { return m.stats.step_tokens; });
  per_model("power_preemptions_total", "counter",
            "Running requests preempted by higher-priority ones (they resume later), per model.",
            [](const G& m) { return m.stats.preemptions; });
  per_model("power_kv_cache_usage_ratio", "gauge",
            "KV cache blocks in use over blocks in the pool (0..1), per model.",
            [](const G& m) { return usage_ratio(m.stats); });
  per_model(
      "power_state_slots_used", "gauge",
      "Recurrent-state slots held by running sequences, per model (0 without recurrent layers).",
      [](const G& m) { return m.state_slots_total > 0 ? m.stats.running : 0; });
  per_model("power_state_slots_total", "gauge",
            "Recurrent-state slots in all (max running x replicas), per model (0 without recurrent "
            "layers).",
            [](const G& m) { return m.state_slots_total; });
  header("power_prefix_cache_queried_tokens_total", "counter",
         "Prompt tokens looked up in the prefix cache, per model.");
  for (const auto& [name, t] : prefix_by_model_) {
    o += fmt::format("power_prefix_cache_queried_tokens_total{{model=\"{}\"}} {}\n", label(name),
                     t.queried_tokens);
  }
  header("power_prefix_cache_hit_tokens_total", "counter",
         "Prompt tokens served from the prefix cache, per model.");
  for (const auto& [name, t] : prefix_by_model_) {
    o += fmt::format("power_prefix_cache_hit_tokens_total{{model=\"{}\"}} {}\n", label(name),
                     t.hit_tokens);
  }
  render_router_metrics(models, &o);

  // Speculative decoding (docs/SPECULATIVE.md): tokens per verify pass is
  // verify_tokens / verify_passes.
  const std::pair<const char*, uint64_t RuntimeStats::*> spec[] = {
      {"drafted", &RuntimeStats::spec_drafted},
      {"accepted", &RuntimeStats::spec_accepted},
      {"verify_passes", &RuntimeStats::spec_verify_passes},
      {"verify_tokens", &RuntimeStats::spec_verify_tokens},
      {"restores", &RuntimeStats::spec_restores},
      {"replays", &RuntimeStats::spec_replays},
      {"replayed_tokens", &RuntimeStats::spec_replayed_tokens}};
  for (const auto& [what, field] : spec) {
    per_model(fmt::format("power_speculative_{}_total", what), "counter",
              fmt::format("Speculative decoding: {} (tokens or passes), per model.", what),
              [field = field](const G& m) { return m.stats.*field; });
  }
  // Embedding models: microbatching merges concurrent requests into shared forward passes.
  const std::pair<const char*, uint64_t EmbedStats::*> emb[] = {
      {"requests", &EmbedStats::requests},
      {"inputs", &EmbedStats::inputs},
      {"tokens", &EmbedStats::tokens},
      {"forward_passes", &EmbedStats::forward_passes},
      {"merged_requests", &EmbedStats::merged_requests}};
  for (const auto& [what, field] : emb) {
    header(fmt::format("power_embedding_{}_total", what), "counter",
           fmt::format("Embedding models: {}, per model.", what));
    for (const auto& e : embedders) {
      o += fmt::format("power_embedding_{}_total{{model=\"{}\"}} {}\n", what, label(e.name),
                       e.stats.*field);
    }
  }
  return o;
}

}  // namespace power::server
