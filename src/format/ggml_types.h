// The ggml tensor type table: the one source of truth for type ids, names, block sizes and
// bytes per block, as GGUF files written by llama.cpp use them (ggml.h, enum ggml_type).
// Ids that ggml has retired or Power does not know are "unknown" and make files that use
// them fail to load with an error naming the tensor. Thread-safety: constant data.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace power {

enum class GgmlType : uint32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q8_1 = 9,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  Q8_K = 15,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I8 = 24,
  I16 = 25,
  I32 = 26,
  I64 = 27,
  F64 = 28,
  IQ1_M = 29,
  BF16 = 30,
  TQ1_0 = 34,
  TQ2_0 = 35,
};

struct GgmlTypeInfo {
  GgmlType type;
  std::string_view name;   // ggml's name: "q4_K" is written "Q4_K" here, as llama-quantize does
  uint32_t block_elems;    // elements per block (1 for plain types)
  uint32_t block_bytes;    // bytes per block
  bool dequant_supported;  // Power can turn it into f32 (tensor/quant.h)
};

// The entry for a raw id, or nullopt when the id is not a known ggml type.
std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id);
const GgmlTypeInfo& ggml_type_info(GgmlType type);
// Parses a name case-insensitively ("q4_k", "Q8_0", "bf16"); nullopt if unknown.
std::optional<GgmlType> ggml_type_from_name(std::string_view name);
std::string_view ggml_type_name(GgmlType type);

// Bytes of one row of n elements; false if n is not a multiple of the block size or the
// product overflows.
[[nodiscard]] bool ggml_row_bytes(GgmlType type, uint64_t n_elems, uint64_t* out_bytes);

}  // namespace power
