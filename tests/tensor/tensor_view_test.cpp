#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace power {
namespace {

TEST(TensorView, ContiguousMatrixStridesFollowGgml) {
  // Q4_K [512 x 3]: 2 blocks of 144 bytes per row.
  std::vector<uint8_t> bytes(3 * 288);
  const int64_t shape[] = {512, 3};
  auto v = TensorView::contiguous(GgmlType::Q4_K, shape, bytes.data(), bytes.size());
  ASSERT_TRUE(v.ok()) << v.status().to_string();
  EXPECT_EQ(v->ne[0], 512);
  EXPECT_EQ(v->ne[1], 3);
  EXPECT_EQ(v->ne[2], 1);
  EXPECT_EQ(v->nb[0], 144u);
  EXPECT_EQ(v->nb[1], 288u);
  EXPECT_EQ(v->nb[2], 864u);
  EXPECT_EQ(v->row_bytes(), 288u);
  EXPECT_EQ(v->n_rows(), 3);
  EXPECT_EQ(v->n_elements(), 1536);
  EXPECT_TRUE(v->is_contiguous());
  EXPECT_EQ(v->row(2), bytes.data() + 576);
}

TEST(TensorView, ThreeDimensionalRowAddressing) {
  std::vector<float> data(4 * 3 * 2);
  const int64_t shape[] = {4, 3, 2};
  auto v = TensorView::contiguous(GgmlType::F32, shape, data.data(), data.size() * 4);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v->row(1, 1), reinterpret_cast<const uint8_t*>(data.data() + 4 * 3 + 4));
  EXPECT_EQ(v->n_rows(), 6);
}

TEST(TensorView, RejectsBadShapes) {
  std::vector<uint8_t> bytes(1024);
  const int64_t not_block_multiple[] = {100, 1};
  auto a = TensorView::contiguous(GgmlType::Q4_K, not_block_multiple, bytes.data(), bytes.size());
  EXPECT_EQ(a.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(a.status().message().find("Q4_K"), std::string::npos);

  const int64_t negative[] = {32, -1};
  EXPECT_FALSE(TensorView::contiguous(GgmlType::Q8_0, negative, bytes.data(), bytes.size()).ok());

  const int64_t too_big[] = {256, 100};
  EXPECT_EQ(
      TensorView::contiguous(GgmlType::F32, too_big, bytes.data(), bytes.size()).status().code(),
      StatusCode::kOutOfRange);

  const int64_t overflow[] = {std::numeric_limits<int64_t>::max() / 2, 4};
  EXPECT_EQ(
      TensorView::contiguous(GgmlType::F32, overflow, bytes.data(), bytes.size()).status().code(),
      StatusCode::kOutOfRange);

  const int64_t rank5[] = {1, 1, 1, 1, 1};
  EXPECT_FALSE(TensorView::contiguous(GgmlType::F32, rank5, bytes.data(), bytes.size()).ok());
}

}  // namespace
}  // namespace power
