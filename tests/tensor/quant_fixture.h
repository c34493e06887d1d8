// The peer fixtures of ../shared/fixtures/quant (see its README, section 1): 14 types, each
// with three 2-D tensors t0 [256 x 8], t1 [512 x 3], t2 [1024 x 5].
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "format/ggml_types.h"
#include "test_util.h"

namespace power::testing {

struct FixtureShape {
  int64_t ne0;  // row length
  int64_t ne1;  // rows
};
inline constexpr FixtureShape kFixtureShapes[3] = {{256, 8}, {512, 3}, {1024, 5}};

inline const std::vector<std::string>& fixture_type_names() {
  static const std::vector<std::string> names = {"F16",  "BF16", "Q4_0",   "Q4_1",  "Q5_0",
                                                 "Q5_1", "Q8_0", "Q2_K",   "Q3_K",  "Q4_K",
                                                 "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};
  return names;
}

inline std::string quant_fixture_path(const std::string& type, const std::string& file) {
  return shared_dir() + "/fixtures/quant/" + type + "/" + file;
}

inline std::string tensor_file(int t, const char* suffix) {
  return "t" + std::to_string(t) + suffix;
}

// File name of x quantized to the activation type (x.q8_K.bin etc.).
inline std::string activation_file(GgmlType act) {
  switch (act) {
    case GgmlType::F16:
      return "x.f16.bin";
    case GgmlType::BF16:
      return "x.bf16.bin";
    case GgmlType::Q8_0:
      return "x.q8_0.bin";
    case GgmlType::Q8_1:
      return "x.q8_1.bin";
    case GgmlType::Q8_K:
      return "x.q8_K.bin";
    default:
      return "";
  }
}

inline uint64_t row_bytes_of(GgmlType type, int64_t n) {
  uint64_t b = 0;
  if (!ggml_row_bytes(type, static_cast<uint64_t>(n), &b)) return 0;
  return b;
}

}  // namespace power::testing
