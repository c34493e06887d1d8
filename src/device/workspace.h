// Workspace: the memory one forward pass at a time computes in, planned before decoding.
//
// It holds the compute threads and their scratch (CpuContext), the activation buffers the
// model package planned (model.h Planner: `width` floats per row, max_tokens rows each), and
// the current batch on the host: every token's id, position and chunk, and the batch rows
// whose output (logits) was asked for. Nothing here is allocated during a pass, except the
// grow-once scratch of exact (f32-activation) products over quantized weights.
// A ForwardChunk is one sequence's part of a batch: its tokens go to its KvSequence at
// positions seq->n_tokens() ... (decoders), or it is a whole input (encoders: seq is null,
// positions count from 0).
// Thread-safety: a Workspace belongs to one caller at a time.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "device/kv_cache.h"
#include "device/residency.h"
#include "kernels/cpu/context.h"
#include "power/sdk/ops.h"

namespace power {

struct ForwardChunk {
  ForwardChunk() = default;
  ForwardChunk(KvSequence* s, std::span<const int32_t> t, bool all = false,
               std::span<const int32_t> snapshots = {})
      : seq(s), tokens(t), all_logits(all), snapshot_slots(snapshots) {}
  KvSequence* seq = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // else only the last token's output
  // Models with recurrent layers: snapshot_slots[i] >= 0 asks for a copy of the sequence's
  // recurrent state after token i of the chunk in that slot of the same RecurrentState (the
  // state a rollback to that position restores). Empty or -1: no copy.
  std::span<const int32_t> snapshot_slots;
};

// Act buffer ids the host resolves per pass (not planned buffers).
inline constexpr int32_t kOutputBuffer = -2;    // the caller's output rows
inline constexpr int32_t kHiddenInBuffer = -3;  // the caller's hidden rows (draft heads)

struct WorkspacePlan {
  std::vector<int64_t> widths;  // per planned buffer
  std::vector<std::string> names;
  int64_t max_row = 1;  // longest matmul input row (CpuContext scratch)
};

class Workspace {
 public:
  Workspace(const WorkspacePlan& plan, int64_t max_tokens, int64_t n_ctx, int n_threads);
  // Bytes a workspace of this plan and size holds (for admission before making one).
  static uint64_t planned_bytes(const WorkspacePlan& plan, int64_t max_tokens, int64_t n_ctx,
                                int n_threads);
  uint64_t bytes() const;

  CpuContext cpu;
  const int64_t max_tokens;
  const int64_t n_ctx;

  // Planned buffers: buffer i holds max_tokens rows of widths[i] floats.
  std::vector<std::vector<float>> buffers;
  std::vector<int64_t> widths;
  std::vector<std::string> names;

  // The current batch (valid during a pass).
  int64_t n_tokens = 0;
  std::span<const ForwardChunk> chunks;
  std::vector<int32_t> token_ids, pos, chunk_of;
  std::vector<int32_t> output_rows;  // batch rows that produce an output row, in order
  int64_t n_outputs = 0;
  std::vector<int32_t> chunk_start;          // first batch row of each chunk (+ one past the end)
  std::vector<ForwardChunk> encoder_chunks;  // encoders' inputs as chunks (capacity max_tokens)
  // The caller's memory for this pass.
  float* output = nullptr;
  int64_t output_ld = 0;
  const float* hidden_in = nullptr;
  int64_t hidden_in_ld = 0;
  // Where the package left every token's final hidden state (Forward::set_hidden).
  sdk::Act hidden;

  // The model's streamer when some of its weights are streamed (set for each pass), and the
  // staging slot this pass holds.
  WeightStreamer* streamer = nullptr;
  WeightStreamer::Cursor stream_cursor;

  // Row t's final hidden state after a pass of a package that exports them (null otherwise).
  const float* hidden_row(int64_t t) const;
  // f32 rows of a quantized matrix decoded for exact products: grows once, then reused.
  float* exact_tile(uint64_t floats);
  // One weight row decoded to f32 (add_row): max_row floats.
  float* row_tmp() { return row_tmp_.data(); }

 private:
  std::vector<float> exact_tile_;
  std::vector<float> row_tmp_;
};

}  // namespace power
