// AVX2 + FMA + F16C matmul kernels (compiled with -mavx2 -mfma -mf16c); see matmul_simd.inc.
#include "kernels/cpu/matmul_internal.h"
#include "tensor/half.h"

#define POWER_SIMD_VNNI 0
// In this order: matmul_simd.inc defines the helpers the other two use.
// clang-format off
#include "kernels/cpu/matmul_simd.inc"
#include "kernels/cpu/matmul_repack.inc"
#include "kernels/cpu/matmul_act.inc"
// clang-format on

namespace power::kernels {

MatmulRowsFn matmul_rows_avx2(GgmlType weight_type) {
  return select_kernel(weight_type);
}

PackedGroupsFn matmul_packed_avx2(GgmlType weight_type) {
  return select_packed_kernel(weight_type);
}

TokenMajorFn token_major_avx2(GgmlType weight_type) {
  return select_token_major(weight_type);
}

ActQuantFn act_quantizer_avx2(GgmlType act) {
  return select_act_quantizer(act);
}

}  // namespace power::kernels
