// Matrix products with weights of any dequantizable ggml type: SIMD kernels per ISA (see
// matmul_simd.inc) with a scalar reference path beside them.
//
// matmul: y[t * ldy + r] = dot(W row r, x[t * ldx ...]) for t < n_tokens and r < rows.
// W is a TensorView with ne = {K, rows} (tensor/tensor.h convention), x holds n_tokens rows of
// K floats. Each weight row is decoded to f32 once per call and used for every token, so a
// batch reads the weights once. Work is split over the context's threads by weight rows.
// Shapes are checked with POWER_CHECK: the model validated them when it loaded.
#pragma once

#include <cstdint>
#include <span>

#include <memory>

#include "kernels/cpu/context.h"
#include "tensor/tensor.h"

namespace power {

namespace kernels {
struct PackedMatrix;
}
// A packed copy of a weight made outside the registry (matmul_repack.h make_packed: the
// residency manager's staging slots); null: the registry's copy, if any.
using PackedHint = std::shared_ptr<const kernels::PackedMatrix>;

void matmul(CpuContext& ctx, const TensorView& w, const float* x, int64_t ldx, int64_t n_tokens,
            float* y, int64_t ldy, const PackedHint& packed = nullptr);

// Several products of the same input rows x (a layer's q/k/v or gate/up projections): the
// activations are quantized once and all the products' rows are split over the threads in one
// hand-off, instead of a quantization and a hand-off per product. Results equal matmul() per
// job (the same kernels on the same records). Products that cannot share (different row
// length or activation type, packed next to unpacked weights) run one matmul() each.
struct MatmulJob {
  const TensorView* w;
  float* y;
  int64_t ldy;
  const PackedHint* packed = nullptr;  // as matmul()'s `packed`
};
void matmul_same_input(CpuContext& ctx, std::span<const MatmulJob> jobs, const float* x,
                       int64_t ldx, int64_t n_tokens);

// True when the active ISA (kernels/cpu/isa.h) has a SIMD kernel for this weight type; those
// quantize the activations to vec_dot_activation_type(type) as the peer does. Other types take
// the scalar reference path (f32 activations).
bool matmul_has_simd_kernel(GgmlType type);

// Row r of W as f32 (embedding lookup).
void matrix_row_f32(const TensorView& w, int64_t r, float* out);

}  // namespace power
