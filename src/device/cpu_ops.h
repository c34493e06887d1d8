// CpuOps: the SDK's op set (power/sdk/ops.h) on the CPU, over one Workspace and its batch.
//
// Each op works on all rows of its Acts at once, so a weight matrix is read once per pass
// whatever the batch size; per-row work is spread over the workspace's compute threads.
// Numerics (what a model gets on the CPU):
//  * linear(), Precision::kDefault: the kernels of kernels/cpu/matmul.h; quantized weights take
//    activations quantized to the weight type's dot-product type as llama.cpp does (Q8_0,
//    Q8_1, Q8_K), F16 weights take F16-rounded activations; results are the same whatever the
//    batch size. kExact: f32 activations (quantized rows are decoded to f32 in tiles).
//  * rms_norm sums squares in double; layer_norm takes mean and variance in double; GELU is
//    computed in double; softmax sums in double; pool(kMean) sums in double.
//  * attention() stores keys and values in the sequence's KV blocks (F16 or F32, the cache's
//    type); with an F16 cache the query and the attention weights are rounded to F16 as
//    llama.cpp does. A token's result does not depend on how its sequence's prompt was cut into
//    passes.
// Errors are sticky (see ops.h): the first inconsistent call is recorded, later ones are
// skipped.
// Thread-safety: one pass at a time per Workspace.
#pragma once

#include <span>
#include <vector>

#include "device/device.h"
#include "device/recurrent_state.h"
#include "device/workspace.h"
#include "power/sdk/ops.h"

namespace power {

// How a model's state layers map onto the runtime's stores.
struct StateLayout {
  std::vector<int> kv_layer;         // per state layer: its KV cache layer, or -1
  std::vector<int> recurrent_layer;  // per state layer: its recurrent-state layer, or -1
  // Per state layer: where its own values (ssm_scan's state) start in its recurrent-state
  // layer, after the conv1d window; and how many there are.
  std::vector<int64_t> recurrent_values_offset;
  std::vector<int64_t> recurrent_values;
};

class CpuOps final : public sdk::Ops {
 public:
  // `declared`: the ops the model's spec declared (indexed by sdk::Op); others are errors.
  CpuOps(Workspace& ws, const StateLayout& layout, const std::vector<bool>& declared)
      : ws_(ws), layout_(layout), declared_(declared) {}

  void embed(const sdk::Weight& table, sdk::Index ids, sdk::Act out) override;
  void linear(const sdk::Weight& w, const sdk::Weight* bias, sdk::Act in, sdk::Act out,
              sdk::Precision precision) override;
  void linear_many(std::span<const sdk::LinearJob> jobs, sdk::Act in) override;
  void rms_norm(sdk::Act in, const sdk::Weight* w, sdk::Act out, float eps, int64_t group) override;
  void layer_norm(sdk::Act in, const sdk::Weight* w, const sdk::Weight* b, sdk::Act out, float eps,
                  int64_t group) override;
  void rope(sdk::Act x, int64_t head_dim, const sdk::Rope& rope) override;
  void attention(int layer, sdk::Act q, sdk::Act k, sdk::Act v, sdk::Act out,
                 const sdk::AttentionParams& p) override;
  void attention_local(sdk::Act q, sdk::Act k, sdk::Act v, sdk::Act out,
                       const sdk::AttentionParams& p, bool causal) override;
  void activate(sdk::Act x, sdk::Activation a) override;
  void glu(sdk::Act gate, sdk::Act up, sdk::Activation a) override;
  void add(sdk::Act x, sdk::Act y) override;
  void mul(sdk::Act x, sdk::Act y) override;
  void scale(sdk::Act x, float s) override;
  void add_row(sdk::Act x, const sdk::Weight& w, int64_t row) override;
  void softmax(sdk::Act x) override;
  void conv1d(int layer, sdk::Act x, const sdk::Weight& kernel, const sdk::Weight* bias,
              sdk::Act out) override;
  void ssm_scan(int layer, sdk::Act x, sdk::Act dt, const sdk::Weight& A, sdk::Act B, sdk::Act C,
                const sdk::Weight* D, sdk::Act y) override;
  void copy(sdk::Act src, sdk::Act dst) override;
  void select_output_rows(sdk::Act in, sdk::Act out) override;
  void pool(sdk::Act in, sdk::Pooling p, sdk::Act out) override;
  Status status() const override { return status_; }

 private:
  // The bytes the kernels read for `b` in this pass: its view and packed copy where it is
  // resident, its staging slot's where it is streamed (waiting for the read). False on a
  // read error (the op fails).
  // `piece`: which row piece of a matrix streamed in pieces (BoundWeight::stream_pieces);
  // `row_begin` (optional) gets the first row the view holds.
  bool weight_bytes(sdk::Op op, const BoundWeight& b, const TensorView** view,
                    const PackedHint** packed, int piece = 0, int64_t* row_begin = nullptr);

  // False (and nothing to do) when an earlier op failed or `op` was not declared.
  bool start(sdk::Op op);
  // Records an error of `op` (the first one only).
  void fail(sdk::Op op, Status st);
  // Checks that `a` lies inside its buffer; false after recording an error.
  bool valid(sdk::Op op, const sdk::Act& a, const char* what);
  float* row(const sdk::Act& a, int64_t r) const;
  int64_t buffer_rows(int32_t buffer) const;

  Workspace& ws_;
  const StateLayout& layout_;
  const std::vector<bool>& declared_;
  Status status_;
};

}  // namespace power
