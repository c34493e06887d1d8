// AVX-512 matmul kernels (compiled with -mavx512f -mavx512bw -mavx512vl -mavx512vnni plus the
// AVX2 set): the kernels of matmul_simd.inc with VNNI int8/int16 dot products (vpdpbusd,
// vpdpwssd) on 256-bit registers, which keep the 32-element block shape of the ggml formats.
#include "kernels/cpu/matmul_internal.h"
#include "tensor/half.h"

#define POWER_SIMD_VNNI 1
// In this order: matmul_simd.inc defines the helpers the other two use.
// clang-format off
#include "kernels/cpu/matmul_simd.inc"
#include "kernels/cpu/matmul_repack.inc"
#include "kernels/cpu/matmul_act.inc"
// clang-format on

namespace power::kernels {

MatmulRowsFn matmul_rows_avx512(GgmlType weight_type) {
  return select_kernel(weight_type);
}

PackedGroupsFn matmul_packed_avx512(GgmlType weight_type) {
  return select_packed_kernel(weight_type);
}

TokenMajorFn token_major_avx512(GgmlType weight_type) {
  return select_token_major(weight_type);
}

ActQuantFn act_quantizer_avx512(GgmlType act) {
  return select_act_quantizer(act);
}

}  // namespace power::kernels
