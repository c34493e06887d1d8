// The recurrent ops of CpuOps: a causal depthwise convolution and Mamba's selective scan, both
// carrying their state per sequence in the sequence's recurrent-state slot. A token's result
// is computed the same way whatever the batch holds and however its sequence's prompt was cut
// into passes (its inputs before the pass come from the state).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "device/cpu_ops.h"
#include "device/cpu_ops_internal.h"
#include "kernels/cpu/ops.h"

namespace power {

using cpu_ops::values_of;
using cpu_ops::values_size;
using sdk::Act;
using sdk::Op;

namespace {

// The recurrent-state layer of state layer `layer`, or -1.
int recurrent_layer_of(const StateLayout& layout, int layer) {
  return layer >= 0 && static_cast<size_t>(layer) < layout.recurrent_layer.size()
             ? layout.recurrent_layer[static_cast<size_t>(layer)]
             : -1;
}

// The slot the chunk wants the state copied to after its token i, or -1.
int32_t snapshot_slot(const ForwardChunk& ch, int64_t i) {
  return static_cast<size_t>(i) < ch.snapshot_slots.size()
             ? ch.snapshot_slots[static_cast<size_t>(i)]
             : -1;
}

}  // namespace

void CpuOps::conv1d(int layer, Act x, const sdk::Weight& kernel, const sdk::Weight* bias, Act out) {
  if (!start(Op::kConv1d) || !valid(Op::kConv1d, x, "x") || !valid(Op::kConv1d, out, "out")) {
    return;
  }
  const int rec_layer = recurrent_layer_of(layout_, layer);
  const int64_t K = kernel.ne[0], C = kernel.ne[1];
  const float* kv = values_of(&kernel);
  const float* bv = values_of(bias);
  if (rec_layer < 0) {
    fail(Op::kConv1d,
         Status(StatusCode::kInvalidArgument, "layer has no recurrent state in the model's spec")
             .with("layer", layer));
    return;
  }
  if (kv == nullptr || K < 1 || x.cols != C || out.cols != C || x.rows != ws_.n_tokens ||
      out.rows != ws_.n_tokens || (bv != nullptr && values_size(bias) != C)) {
    fail(Op::kConv1d, Status(StatusCode::kInvalidArgument, "shapes do not match the kernel")
                          .with("kernel", fmt::format("[{}, {}]", K, C))
                          .with("x_cols", x.cols));
    return;
  }
  for (const ForwardChunk& ch : ws_.chunks) {
    if (ch.seq == nullptr || ch.seq->recurrent() == nullptr ||
        ch.seq->recurrent()->layer_floats(rec_layer) < (K - 1) * C) {
      fail(Op::kConv1d, Status(StatusCode::kInvalidArgument,
                               "the sequence has no recurrent slot of the declared size")
                            .with("layer", layer));
      return;
    }
  }
  // Per chunk, per channel: a window of the last K - 1 inputs (from the state), then the
  // chunk's inputs in order. The state keeps inputs oldest first: hist[(k) * C + c], k < K - 1.
  ws_.cpu.pool().parallel_for(ws_.chunks.size(), [&](size_t begin, size_t end, int) {
    for (size_t s = begin; s < end; ++s) {
      KvSequence& seq = *ws_.chunks[s].seq;
      float* hist = seq.recurrent()->layer(seq.recurrent_slot(), rec_layer);
      const int64_t t0 = ws_.chunk_start[s], n = ws_.chunk_start[s + 1] - t0;
      for (int64_t i = 0; i < n; ++i) {
        const float* xi = row(x, t0 + i);
        float* yi = row(out, t0 + i);
        for (int64_t c = 0; c < C; ++c) {
          const float* kc = kv + c * K;
          double acc = 0.0;
          for (int64_t k = 0; k < K - 1; ++k) acc += static_cast<double>(kc[k]) * hist[k * C + c];
          acc += static_cast<double>(kc[K - 1]) * xi[c];
          yi[c] = static_cast<float>(acc + (bv != nullptr ? bv[c] : 0.0));
        }
        // Shift the window by one input (oldest dropped).
        if (K > 1) {
          std::memmove(hist, hist + C, static_cast<size_t>((K - 2) * C) * sizeof(float));
          std::memcpy(hist + (K - 2) * C, xi, static_cast<size_t>(C) * sizeof(float));
        }
        const int32_t snap = snapshot_slot(ws_.chunks[s], i);
        if (snap >= 0 && K > 1) {
          std::memcpy(seq.recurrent()->layer(snap, rec_layer), hist,
                      static_cast<size_t>((K - 1) * C) * sizeof(float));
        }
      }
    }
  });
}

void CpuOps::ssm_scan(int layer, Act x, Act dt, const sdk::Weight& A, Act B, Act C,
                      const sdk::Weight* D, Act y) {
  if (!start(Op::kSsmScan) || !valid(Op::kSsmScan, x, "x") || !valid(Op::kSsmScan, dt, "dt") ||
      !valid(Op::kSsmScan, B, "B") || !valid(Op::kSsmScan, C, "C") ||
      !valid(Op::kSsmScan, y, "y")) {
    return;
  }
  const int rec_layer = recurrent_layer_of(layout_, layer);
  if (rec_layer < 0) {
    fail(Op::kSsmScan,
         Status(StatusCode::kInvalidArgument, "layer has no recurrent state in the model's spec")
             .with("layer", layer));
    return;
  }
  const int64_t n_ch = x.cols, n_state = B.cols;
  const float* a = values_of(&A);
  const float* d = values_of(D);
  const int64_t offset = layout_.recurrent_values_offset[static_cast<size_t>(layer)];
  const int64_t n_values = layout_.recurrent_values[static_cast<size_t>(layer)];
  const int64_t T = ws_.n_tokens;
  if (a == nullptr || values_size(&A) != n_ch * n_state || dt.cols != n_ch || y.cols != n_ch ||
      C.cols != n_state || (d != nullptr && values_size(D) != n_ch) || x.rows != T ||
      dt.rows != T || B.rows != T || C.rows != T || y.rows != T || n_values < n_ch * n_state) {
    fail(Op::kSsmScan, Status(StatusCode::kInvalidArgument, "shapes do not match the state")
                           .with("channels", n_ch)
                           .with("d_state", n_state)
                           .with("state_values", n_values));
    return;
  }
  for (const ForwardChunk& ch : ws_.chunks) {
    if (ch.seq == nullptr || ch.seq->recurrent() == nullptr ||
        ch.seq->recurrent()->layer_floats(rec_layer) < offset + n_values) {
      fail(Op::kSsmScan, Status(StatusCode::kInvalidArgument,
                                "the sequence has no recurrent slot of the declared size")
                             .with("layer", layer));
      return;
    }
  }
  // Work items: (chunk, block of channels); a channel's tokens run in order. The arithmetic is
  // kernels' ssm_scan_step: llama.cpp's ggml_ssm_scan on the portable path (f32, states summed
  // in order 0..N-1, softplus as log1p(exp)), a vector exp and 8 partial sums on AVX2/AVX-512.
  constexpr int64_t kChannelBlock = 32;
  const int64_t blocks = (n_ch + kChannelBlock - 1) / kChannelBlock;
  const size_t items = ws_.chunks.size() * static_cast<size_t>(blocks);
  ws_.cpu.pool().parallel_for(items, [&](size_t begin, size_t end, int) {
    for (size_t item = begin; item < end; ++item) {
      const size_t s = item / static_cast<size_t>(blocks);
      const int64_t c0 = static_cast<int64_t>(item % static_cast<size_t>(blocks)) * kChannelBlock;
      const int64_t c1 = std::min(n_ch, c0 + kChannelBlock);
      KvSequence& seq = *ws_.chunks[s].seq;
      float* state = seq.recurrent()->layer(seq.recurrent_slot(), rec_layer) + offset;
      const int64_t t0 = ws_.chunk_start[s], n = ws_.chunk_start[s + 1] - t0;
      for (int64_t i = 0; i < n; ++i) {
        const float* xr = row(x, t0 + i);
        const float* dtr = row(dt, t0 + i);
        const float* br = row(B, t0 + i);
        const float* cr = row(C, t0 + i);
        float* yr = row(y, t0 + i);
        ssm_scan_step(state + c0 * n_state, a + c0 * n_state, br, cr, dtr + c0, xr + c0, c1 - c0,
                      n_state, yr + c0);
        if (d != nullptr) {
          for (int64_t c = c0; c < c1; ++c) yr[c] += xr[c] * d[c];
        }
        const int32_t snap = snapshot_slot(ws_.chunks[s], i);
        if (snap >= 0) {
          std::memcpy(seq.recurrent()->layer(snap, rec_layer) + offset + c0 * n_state,
                      state + c0 * n_state,
                      static_cast<size_t>((c1 - c0) * n_state) * sizeof(float));
        }
      }
    }
  });
}

}  // namespace power
