#include "format/ggml_types.h"

#include <gtest/gtest.h>

namespace power {
namespace {

// Bytes per block from the fixtures README table (llama.cpp's ggml type traits).
TEST(GgmlTypes, BlockLayoutsMatchThePeer) {
  struct Row {
    const char* name;
    uint32_t id, elems, bytes;
  };
  const Row rows[] = {{"F16", 1, 1, 2},       {"BF16", 30, 1, 2},      {"Q4_0", 2, 32, 18},
                      {"Q4_1", 3, 32, 20},    {"Q5_0", 6, 32, 22},     {"Q5_1", 7, 32, 24},
                      {"Q8_0", 8, 32, 34},    {"Q2_K", 10, 256, 84},   {"Q3_K", 11, 256, 110},
                      {"Q4_K", 12, 256, 144}, {"Q5_K", 13, 256, 176},  {"Q6_K", 14, 256, 210},
                      {"IQ4_NL", 20, 32, 18}, {"IQ4_XS", 23, 256, 136}};
  for (const Row& r : rows) {
    auto info = ggml_type_info(r.id);
    ASSERT_TRUE(info.has_value()) << r.name;
    EXPECT_EQ(info->name, r.name);
    EXPECT_EQ(info->block_elems, r.elems) << r.name;
    EXPECT_EQ(info->block_bytes, r.bytes) << r.name;
    EXPECT_TRUE(info->dequant_supported) << r.name;
    EXPECT_EQ(ggml_type_from_name(r.name), info->type);
  }
}

TEST(GgmlTypes, RetiredAndUnknownIds) {
  EXPECT_FALSE(ggml_type_info(4).has_value());  // Q4_2, removed from ggml
  EXPECT_FALSE(ggml_type_info(5).has_value());  // Q4_3
  EXPECT_FALSE(ggml_type_info(31).has_value());
  EXPECT_FALSE(ggml_type_info(0xffffffffu).has_value());
  EXPECT_FALSE(ggml_type_from_name("Q9_9").has_value());
  EXPECT_EQ(ggml_type_from_name("q4_k"), GgmlType::Q4_K);
}

TEST(GgmlTypes, RowBytes) {
  uint64_t b = 0;
  EXPECT_TRUE(ggml_row_bytes(GgmlType::Q4_K, 512, &b));
  EXPECT_EQ(b, 288u);
  EXPECT_FALSE(ggml_row_bytes(GgmlType::Q4_K, 100, &b));
  EXPECT_TRUE(ggml_row_bytes(GgmlType::F32, 3, &b));
  EXPECT_EQ(b, 12u);
  EXPECT_FALSE(ggml_row_bytes(GgmlType::F32, uint64_t{1} << 63, &b));
}

}  // namespace
}  // namespace power
