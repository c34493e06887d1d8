// AVX2 + FMA + F16C matmul kernels (compiled with -mavx2 -mfma -mf16c); see matmul_simd.inc.
#include "kernels/cpu/matmul_internal.h"

#define POWER_SIMD_VNNI 0
#include "kernels/cpu/matmul_simd.inc"

namespace power::kernels {

MatmulRowsFn matmul_rows_avx2(GgmlType weight_type) {
  return select_kernel(weight_type);
}

}  // namespace power::kernels
