// The StepRunner that runs a real model: one Model::forward over the batch, then each
// sequence's own sampler (BatchItem::runner_state is its engine Sampler*) on its logits row.
// Speculative verify chunks (BatchItem::n_draft > 0) get the logits of every position and go
// through spec::verify with the sequence's sampler (and the drafter's q when it sampled).
// Memory: the logits rows (max_items x n_vocab) are allocated once at construction and grow
// to the largest batch of verify rows seen (at most step_token_budget rows); the workspace
// is the caller's and must hold step_token_budget tokens.
// Thread-safety: one step at a time (the model's worker thread).
#pragma once

#include <vector>

#include "host/model.h"
#include "runtime/scheduler.h"

namespace power::runtime {

class ModelRunner : public StepRunner {
 public:
  ModelRunner(const Model& model, Workspace& ws, int max_items);
  Status run(std::span<const BatchItem> items, std::span<int32_t> next_tokens) override;
  Status run_speculative(std::span<const BatchItem> items, std::span<int32_t> next_tokens,
                         std::span<int32_t> accepted) override;

 private:
  const Model& model_;
  Workspace& ws_;
  std::vector<ForwardChunk> chunks_;
  std::vector<float> logits_;
  std::vector<float> verify_scratch_;
  std::vector<int32_t> accepted_scratch_;
};

}  // namespace power::runtime
