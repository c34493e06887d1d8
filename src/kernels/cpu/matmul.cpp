#include "kernels/cpu/matmul.h"

#include "kernels/cpu/ops.h"
#include "tensor/quant.h"

namespace power {

void matrix_row_f32(const TensorView& w, int64_t r, float* out) {
  const auto* row = static_cast<const uint8_t*>(w.data) + static_cast<uint64_t>(r) * w.nb[1];
  Status st = dequantize_row(w.type, row, out, w.ne[0]);
  POWER_CHECK_MSG(st.ok(), "dequantize_row failed on a validated tensor");
}

void matmul(CpuContext& ctx, const TensorView& w, const float* x, int64_t ldx, int64_t n_tokens,
            float* y, int64_t ldy) {
  const int64_t k = w.ne[0];
  const int64_t rows = w.ne[1];
  POWER_CHECK(k <= ctx.max_row());
  ctx.pool().parallel_for(static_cast<size_t>(rows), [&](size_t begin, size_t end, int thread) {
    float* buf = ctx.row_scratch(thread);
    for (size_t r = begin; r < end; ++r) {
      const float* wr;
      if (w.type == GgmlType::F32 && reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0 &&
          w.nb[1] % alignof(float) == 0) {
        wr = reinterpret_cast<const float*>(static_cast<const uint8_t*>(w.data) + r * w.nb[1]);
      } else {
        matrix_row_f32(w, static_cast<int64_t>(r), buf);
        wr = buf;
      }
      for (int64_t t = 0; t < n_tokens; ++t) {
        y[t * ldy + static_cast<int64_t>(r)] = dot_f32(wr, x + t * ldx, k);
      }
    }
  });
}

}  // namespace power
