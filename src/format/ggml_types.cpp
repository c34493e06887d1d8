#include "format/ggml_types.h"

#include <array>
#include <cctype>

#include "base/checked.h"
#include "base/status.h"

namespace power {
namespace {

// Block sizes and bytes per block follow ggml's published block layouts (ggml-common.h).
constexpr std::array kTypes = {
    GgmlTypeInfo{GgmlType::F32, "F32", 1, 4, true},
    GgmlTypeInfo{GgmlType::F16, "F16", 1, 2, true},
    GgmlTypeInfo{GgmlType::Q4_0, "Q4_0", 32, 18, true},
    GgmlTypeInfo{GgmlType::Q4_1, "Q4_1", 32, 20, true},
    GgmlTypeInfo{GgmlType::Q5_0, "Q5_0", 32, 22, true},
    GgmlTypeInfo{GgmlType::Q5_1, "Q5_1", 32, 24, true},
    GgmlTypeInfo{GgmlType::Q8_0, "Q8_0", 32, 34, true},
    GgmlTypeInfo{GgmlType::Q8_1, "Q8_1", 32, 36, false},
    GgmlTypeInfo{GgmlType::Q2_K, "Q2_K", 256, 84, true},
    GgmlTypeInfo{GgmlType::Q3_K, "Q3_K", 256, 110, true},
    GgmlTypeInfo{GgmlType::Q4_K, "Q4_K", 256, 144, true},
    GgmlTypeInfo{GgmlType::Q5_K, "Q5_K", 256, 176, true},
    GgmlTypeInfo{GgmlType::Q6_K, "Q6_K", 256, 210, true},
    GgmlTypeInfo{GgmlType::Q8_K, "Q8_K", 256, 292, false},
    GgmlTypeInfo{GgmlType::IQ2_XXS, "IQ2_XXS", 256, 66, false},
    GgmlTypeInfo{GgmlType::IQ2_XS, "IQ2_XS", 256, 74, false},
    GgmlTypeInfo{GgmlType::IQ3_XXS, "IQ3_XXS", 256, 98, false},
    GgmlTypeInfo{GgmlType::IQ1_S, "IQ1_S", 256, 50, false},
    GgmlTypeInfo{GgmlType::IQ4_NL, "IQ4_NL", 32, 18, true},
    GgmlTypeInfo{GgmlType::IQ3_S, "IQ3_S", 256, 110, false},
    GgmlTypeInfo{GgmlType::IQ2_S, "IQ2_S", 256, 82, false},
    GgmlTypeInfo{GgmlType::IQ4_XS, "IQ4_XS", 256, 136, true},
    GgmlTypeInfo{GgmlType::I8, "I8", 1, 1, false},
    GgmlTypeInfo{GgmlType::I16, "I16", 1, 2, false},
    GgmlTypeInfo{GgmlType::I32, "I32", 1, 4, false},
    GgmlTypeInfo{GgmlType::I64, "I64", 1, 8, false},
    GgmlTypeInfo{GgmlType::F64, "F64", 1, 8, false},
    GgmlTypeInfo{GgmlType::IQ1_M, "IQ1_M", 256, 56, false},
    GgmlTypeInfo{GgmlType::BF16, "BF16", 1, 2, true},
    GgmlTypeInfo{GgmlType::TQ1_0, "TQ1_0", 256, 54, false},
    GgmlTypeInfo{GgmlType::TQ2_0, "TQ2_0", 256, 66, false},
};

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::toupper(static_cast<unsigned char>(a[i])) !=
        std::toupper(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

std::optional<GgmlTypeInfo> ggml_type_info(uint32_t id) {
  for (const auto& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return t;
  }
  return std::nullopt;
}

const GgmlTypeInfo& ggml_type_info(GgmlType type) {
  for (const auto& t : kTypes) {
    if (t.type == type) return t;
  }
  POWER_CHECK_MSG(false, "GgmlType value outside the table");
  return kTypes[0];
}

std::optional<GgmlType> ggml_type_from_name(std::string_view name) {
  for (const auto& t : kTypes) {
    if (iequal(t.name, name)) return t.type;
  }
  return std::nullopt;
}

std::string_view ggml_type_name(GgmlType type) {
  return ggml_type_info(type).name;
}

bool ggml_row_bytes(GgmlType type, uint64_t n_elems, uint64_t* out_bytes) {
  const GgmlTypeInfo& t = ggml_type_info(type);
  if (n_elems % t.block_elems != 0) return false;
  return checked_mul<uint64_t>(n_elems / t.block_elems, t.block_bytes, out_bytes);
}

}  // namespace power
