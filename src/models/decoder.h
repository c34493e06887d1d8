// The building blocks the decoder architectures compose their forward pass from, and the
// Workspace they compute in.
//
// Activations are row-major [n_tokens x width] f32 buffers in the Workspace, sized when it is
// made for max_batch_tokens; token t of the batch sits at position ws.pos[t] of the sequence
// ws.chunks[ws.chunk_of[t]].seq. Every block works on all tokens of the batch at once, so a
// weight matrix is read once per forward pass whatever the batch size.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu/context.h"
#include "kernels/cpu/ops.h"
#include "models/model.h"
#include "tensor/tensor.h"

namespace power {

class Workspace {
 public:
  Workspace(const ModelHparams& hp, int64_t max_tokens, int64_t n_ctx, int n_threads);

  CpuContext cpu;
  int64_t max_tokens;
  int64_t n_ctx;
  // Activations, each max_tokens rows.
  std::vector<float> x, xn, q, k, v, attn, ff_a, ff_b, fused;
  std::vector<int32_t> pos, chunk_of;
  // The current batch.
  int64_t n_tokens = 0;
  std::span<const ForwardChunk> chunks;

  uint64_t bytes() const;
};

namespace decoder {

// A 1-D tensor (norm weight, bias) decoded to f32 once at load; empty when view.data is null.
std::vector<float> to_f32(const TensorView& view);

// out[t] = rms_norm(in[t]) * w for every token row (width n).
void norm_rows(Workspace& ws, const float* in, const std::vector<float>& w, float* out, int64_t n,
               float eps);
// out[t] = W in[t] (+ bias) for every token row; in has width W.ne[0], out W.ne[1].
void linear(Workspace& ws, const TensorView& w, const std::vector<float>& bias, const float* in,
            float* out);
// linear() for several weights applied to the same input rows, in one matmul hand-off
// (matmul_same_input): the same results as one linear() each.
struct LinearJob {
  const TensorView* w;
  const std::vector<float>* bias;  // may be empty
  float* out;
};
void linear_same_input(Workspace& ws, std::span<const LinearJob> jobs, const float* in);
// Per-head RMS norm (qwen3's q/k norm): each of n_heads heads of head_dim values per token.
void head_norm(Workspace& ws, float* x, int64_t n_heads, int64_t head_dim,
               const std::vector<float>& w, float eps);
// RoPE over every head of every token at the token's position.
void rope(Workspace& ws, float* x, int64_t n_heads, int64_t head_dim, const RopeParams& p);
// Writes k and v of every token into its sequence's KV cache (layer l), then computes causal
// (optionally sliding-window) attention of q over each sequence's cached positions.
// q: [T x n_head*hd_k], k: [T x n_kv*hd_k], v: [T x n_kv*hd_v], out: [T x n_head*hd_v].
void attention(Workspace& ws, const ModelHparams& hp, int layer, const float* q, const float* k,
               const float* v, float* out);
// x[t] += y[t] over width n.
void add_rows(Workspace& ws, float* x, const float* y, int64_t n);
// x += down(silu(gate_in) * up_in): gate and up given as [T x n_ff] buffers (already projected).
void swiglu_rows(Workspace& ws, float* gate, const float* up, int64_t n_ff, int64_t ld);

}  // namespace decoder
}  // namespace power
