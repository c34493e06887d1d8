// The StepRunner that runs a real model: one Model::forward over the batch, then each
// sequence's own sampler (BatchItem::runner_state is its engine Sampler*) on its logits row.
// Speculative verify chunks (BatchItem::n_draft > 0) get the logits of every position and go
// through spec::verify with the sequence's sampler (and the drafter's q when it sampled).
// Models with recurrent layers cannot cut a rejected draft out of their state as a KV cache
// truncates: the runner has the pass copy the state after each of the chunk's first S tokens
// (S = BatchItem::snapshots, slots of the replica's pool) and afterwards puts the state at the
// last accepted position: from its snapshot when the rejection lies inside the window
// (restore), else from the last snapshot plus one more pass over the accepted tokens after it
// (replay; all of a step's replays share one pass). Both are reported to the drafter.
// Prompt chunks may ask for the state at block ends the same way (BatchItem::checkpoints,
// slots the scheduler took for the prefix cache).
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
  // `recurrent`: the replica's recurrent-state pool (models with recurrent layers), which holds
  // the snapshot slots too.
  ModelRunner(const Model& model, Workspace& ws, int max_items,
              RecurrentState* recurrent = nullptr);
  Status run(std::span<const BatchItem> items, std::span<int32_t> next_tokens) override;
  Status run_speculative(std::span<const BatchItem> items, std::span<int32_t> next_tokens,
                         std::span<int32_t> accepted) override;

 private:
  // Puts the state of each recurrent verify item at its last accepted position (see above).
  Status roll_back_recurrent(std::span<const BatchItem> items, std::span<const int32_t> accepted);

  const Model& model_;
  Workspace& ws_;
  RecurrentState* recurrent_;
  std::vector<ForwardChunk> chunks_;
  // Per item: the snapshot slots of its verify chunk (-1 past the window), their count, and
  // the position the chunk started at.
  std::vector<std::vector<int32_t>> snapshot_slots_;
  std::vector<int> snapshot_count_;
  std::vector<int64_t> pos0_;
  std::vector<ForwardChunk> replay_chunks_;
  std::vector<float> logits_;
  std::vector<float> verify_scratch_;
  std::vector<int32_t> accepted_scratch_;
};

}  // namespace power::runtime
