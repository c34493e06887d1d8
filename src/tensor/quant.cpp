// Dispatch for quant.h: argument checks, the per-type kernel table, plain-float types.
#include "tensor/quant.h"

#include <cmath>
#include <cstring>

#include "tensor/half.h"
#include "tensor/quant_internal.h"

namespace power {
namespace {

using DequantFn = void (*)(const uint8_t*, float*, int64_t);
using QuantFn = void (*)(const float*, uint8_t*, int64_t);

void dequant_f32(const uint8_t* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void dequant_f16(const uint8_t* src, float* dst, int64_t n) {
  f16_to_f32_row(src, dst, n);
}
void dequant_bf16(const uint8_t* src, float* dst, int64_t n) {
  bf16_to_f32_row(src, dst, n);
}
void quant_f32(const float* src, uint8_t* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void quant_f16(const float* src, uint8_t* dst, int64_t n) {
  f32_to_f16_row(src, dst, n);
}
void quant_bf16(const float* src, uint8_t* dst, int64_t n) {
  f32_to_bf16_row(src, dst, n);
}

struct TypeKernels {
  GgmlType type;
  size_t layout_bytes;  // our block struct; must equal the ggml table's block_bytes
  DequantFn dequant;
  QuantFn quant;
  bool float_type;  // converts non-finite values instead of rejecting them
};

constexpr TypeKernels kKernels[] = {
    {GgmlType::F32, sizeof(float), dequant_f32, quant_f32, true},
    {GgmlType::F16, sizeof(uint16_t), dequant_f16, quant_f16, true},
    {GgmlType::BF16, sizeof(uint16_t), dequant_bf16, quant_bf16, true},
    {GgmlType::Q4_0, sizeof(quant::BlockQ4_0), quant::dequant_q4_0, quant::quant_q4_0, false},
    {GgmlType::Q4_1, sizeof(quant::BlockQ4_1), quant::dequant_q4_1, quant::quant_q4_1, false},
    {GgmlType::Q5_0, sizeof(quant::BlockQ5_0), quant::dequant_q5_0, quant::quant_q5_0, false},
    {GgmlType::Q5_1, sizeof(quant::BlockQ5_1), quant::dequant_q5_1, quant::quant_q5_1, false},
    {GgmlType::Q8_0, sizeof(quant::BlockQ8_0), quant::dequant_q8_0, quant::quant_q8_0, false},
    {GgmlType::Q2_K, sizeof(quant::BlockQ2_K), quant::dequant_q2_k, quant::quant_q2_k, false},
    {GgmlType::Q3_K, sizeof(quant::BlockQ3_K), quant::dequant_q3_k, quant::quant_q3_k, false},
    {GgmlType::Q4_K, sizeof(quant::BlockQ4_K), quant::dequant_q4_k, quant::quant_q4_k, false},
    {GgmlType::Q5_K, sizeof(quant::BlockQ5_K), quant::dequant_q5_k, quant::quant_q5_k, false},
    {GgmlType::Q6_K, sizeof(quant::BlockQ6_K), quant::dequant_q6_k, quant::quant_q6_k, false},
    {GgmlType::IQ4_NL, sizeof(quant::BlockIQ4_NL), quant::dequant_iq4_nl, quant::quant_iq4_nl,
     false},
    {GgmlType::IQ4_XS, sizeof(quant::BlockIQ4_XS), quant::dequant_iq4_xs, quant::quant_iq4_xs,
     false},
};

const TypeKernels* find_kernels(GgmlType type) {
  for (const TypeKernels& k : kKernels) {
    if (k.type == type) {
      // A layout struct that disagrees with the type table is a bug in Power, not bad input.
      POWER_CHECK_MSG(k.layout_bytes == ggml_type_info(type).block_bytes,
                      "tensor block layout disagrees with format/ggml_types");
      return &k;
    }
  }
  return nullptr;
}

}  // namespace

namespace quant {

Result<int64_t> block_count(GgmlType type, int64_t n) {
  const GgmlTypeInfo& info = ggml_type_info(type);
  if (n < 0 || n % info.block_elems != 0) {
    return make_error(StatusCode::kInvalidArgument,
                      "{}: element count {} is not a non-negative multiple of the block size {}",
                      info.name, n, info.block_elems);
  }
  return n / static_cast<int64_t>(info.block_elems);
}

Status unsupported_type(GgmlType type, const char* what) {
  const auto info = ggml_type_info(static_cast<uint32_t>(type));
  if (!info) {
    return make_error(StatusCode::kUnsupported, "{} is not supported for unknown ggml type id {}",
                      what, static_cast<uint32_t>(type));
  }
  return make_error(StatusCode::kUnsupported, "{} is not supported for ggml type {}", what,
                    info->name);
}

}  // namespace quant

using quant::block_count;
using quant::unsupported_type;

bool dequantize_supported(GgmlType type) {
  return find_kernels(type) != nullptr;
}
bool quantize_supported(GgmlType type) {
  return find_kernels(type) != nullptr;
}

Status dequantize_row(GgmlType type, const void* src, float* dst, int64_t n) {
  const TypeKernels* k = find_kernels(type);
  if (k == nullptr) return unsupported_type(type, "dequantization");
  POWER_ASSIGN_OR_RETURN(const int64_t nb, block_count(type, n));
  k->dequant(static_cast<const uint8_t*>(src), dst, nb);
  return Status();
}

Status quantize_row(GgmlType type, const float* src, void* dst, int64_t n) {
  const TypeKernels* k = find_kernels(type);
  if (k == nullptr) return unsupported_type(type, "quantization");
  POWER_ASSIGN_OR_RETURN(const int64_t nb, block_count(type, n));
  if (!k->float_type) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(src[i])) {
        return make_error(StatusCode::kInvalidArgument, "cannot quantize a non-finite value to {}",
                          ggml_type_name(type))
            .with("index", i)
            .with("value", src[i]);
      }
    }
  }
  k->quant(src, static_cast<uint8_t*>(dst), nb);
  return Status();
}

Status quantize_row_q8_0(const float* src, void* dst, int64_t n) {
  POWER_ASSIGN_OR_RETURN(const int64_t nb, block_count(GgmlType::Q8_0, n));
  quant::act_q8_0(src, static_cast<uint8_t*>(dst), nb);
  return Status();
}

Status quantize_row_q8_1(const float* src, void* dst, int64_t n) {
  POWER_ASSIGN_OR_RETURN(const int64_t nb, block_count(GgmlType::Q8_1, n));
  POWER_CHECK(sizeof(quant::BlockQ8_1) == ggml_type_info(GgmlType::Q8_1).block_bytes);
  quant::act_q8_1(src, static_cast<uint8_t*>(dst), nb);
  return Status();
}

Status quantize_row_q8_K(const float* src, void* dst, int64_t n) {
  POWER_ASSIGN_OR_RETURN(const int64_t nb, block_count(GgmlType::Q8_K, n));
  POWER_CHECK(sizeof(quant::BlockQ8_K) == ggml_type_info(GgmlType::Q8_K).block_bytes);
  quant::act_q8_k(src, static_cast<uint8_t*>(dst), nb);
  return Status();
}

Result<GgmlType> vec_dot_activation_type(GgmlType weight_type) {
  switch (weight_type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16:
      return weight_type;
    case GgmlType::Q4_0:
    case GgmlType::Q5_0:
    case GgmlType::Q8_0:
    case GgmlType::IQ4_NL:
      return GgmlType::Q8_0;
    case GgmlType::Q4_1:
    case GgmlType::Q5_1:
      return GgmlType::Q8_1;
    case GgmlType::Q2_K:
    case GgmlType::Q3_K:
    case GgmlType::Q4_K:
    case GgmlType::Q5_K:
    case GgmlType::Q6_K:
    case GgmlType::IQ4_XS:
      return GgmlType::Q8_K;
    default:
      return unsupported_type(weight_type, "vec_dot");
  }
}

Status quantize_activation_row(GgmlType act_type, const float* src, void* dst, int64_t n) {
  switch (act_type) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: {
      POWER_ASSIGN_OR_RETURN(const int64_t count, block_count(act_type, n));
      find_kernels(act_type)->quant(src, static_cast<uint8_t*>(dst), count);
      return Status();
    }
    case GgmlType::Q8_0:
      return quantize_row_q8_0(src, dst, n);
    case GgmlType::Q8_1:
      return quantize_row_q8_1(src, dst, n);
    case GgmlType::Q8_K:
      return quantize_row_q8_K(src, dst, n);
    default:
      return unsupported_type(act_type, "activation quantization");
  }
}

}  // namespace power
