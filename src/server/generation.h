// One HTTP request's generations: one or more runtime requests (OpenAI's n choices, several
// /v1/completions prompts, an Ollama chat) submitted, watched and collected together.
//
// Choices that share a prompt share its KV: a choice marked as following a leader is
// submitted once the leader has produced its first token, when the leader's prompt blocks are
// in the prefix cache, so the follower prefills only the last partial block (the reply's
// usage.prompt_tokens_details.cached_tokens shows it).
// poll() hands out what each choice produced since the last call (text, logprobs, the end);
// the caller writes it (JSON, SSE or NDJSON) and checks its client between polls. Destroying a
// Generation cancels what is still running and waits for it.
// Thread-safety: one thread drives a Generation (poll, cancel_all, take_completions); the
// runtime's callbacks run on its worker threads and only touch the shared state.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "power/request.h"
#include "power/runtime.h"
#include "power/status.h"

namespace power::server {

class Generation {
 public:
  // Keeps running requests visible to the server's drain (track returns a key for untrack).
  struct Tracker {
    std::function<uint64_t(const RequestHandle&)> track;
    std::function<void(uint64_t)> untrack;
  };
  struct Update {
    size_t choice = 0;
    std::string text;                     // text that became final since the last poll
    std::vector<TokenLogprobs> logprobs;  // of the tokens since the last poll
    bool finished = false;                // the choice ended (its completion() is set)
  };

  // `leader[i]`: the choice whose first token choice i waits for, or -1 to start at once.
  // Callbacks in the requests are replaced.
  Generation(Runtime* runtime, ModelHandle model, std::vector<GenerateRequest> requests,
             std::vector<int> leader, Tracker tracker);
  ~Generation();
  Generation(const Generation&) = delete;
  Generation& operator=(const Generation&) = delete;

  // Submits the leaders; an immediate rejection (queue full, does not fit, bad input) is
  // returned and nothing keeps running.
  Status start();
  // Waits up to `interval` for news; submits followers whose leader has begun. A follower's
  // rejection is returned (the others are then cancelled).
  Status poll(std::chrono::milliseconds interval, std::vector<Update>* updates);
  bool all_done() const;
  size_t size() const { return requests_.size(); }
  // The first choice that failed, or ok.
  Status first_error() const;
  const Completion& completion(size_t choice) const;  // after its Update.finished
  void cancel_all();
  // All completions, once all_done() (waits for the runtime's handles).
  std::vector<Completion> take_completions();
  // Called once when every choice has ended (or on destruction) with the completions that
  // exist: for metrics.
  std::function<void(const std::vector<Completion>&, bool client_gone)> on_finished;
  void mark_client_gone() { client_gone_ = true; }
  bool client_gone() const { return client_gone_; }

 private:
  struct Shared;
  Status submit(size_t i);
  void finish();
  Runtime* runtime_;
  ModelHandle model_;
  std::vector<GenerateRequest> requests_;
  std::vector<int> leader_;
  std::vector<bool> submitted_;
  std::vector<std::optional<RequestHandle>> handles_;
  std::vector<uint64_t> keys_;
  Tracker tracker_;
  std::shared_ptr<Shared> shared_;
  bool client_gone_ = false;
  bool finished_ = false;
};

}  // namespace power::server
