// onnx::BufferPool (tensor.h): the recycling of intermediates' buffers that Model::run sets up.
// Reuse is observed through buffer addresses, zeroing through contents, the idle bound through
// held_bytes() against kPeaksHeld x the most bytes out at once.
#include <gtest/gtest.h>

#include <algorithm>

#include "onnx/tensor.h"

namespace power::onnx {
namespace {

TEST(OnnxBufferPool, SizeClassesAreAnEighthOfAPowerOfTwoApart) {
  EXPECT_EQ(BufferPool::size_class(1), 64u);
  EXPECT_EQ(BufferPool::size_class(4000), 4032u);  // small buffers: multiples of 64
  EXPECT_EQ(BufferPool::size_class(8192), 8192u);  // 2^13: steps of 2^10
  EXPECT_EQ(BufferPool::size_class(8193), 9216u);
  EXPECT_EQ(BufferPool::size_class(10000), 10240u);
  for (size_t n : {4097u, 65537u, 1000001u, 123456789u}) {
    const size_t c = BufferPool::size_class(n);
    EXPECT_GE(c, n);
    EXPECT_LE(c - n, n / 8) << n;  // at most 12.5 % slack
  }
}

TEST(OnnxBufferPool, AReturnedBufferServesTheNextTensorOfItsClass) {
  auto pool = BufferPool::create();
  BufferScope scope(pool.get());
  const void* first = nullptr;
  {
    auto t = make_tensor_uninit(DType::kF32, {2250});  // 9000 bytes, class 9216
    ASSERT_TRUE(t.ok());
    std::fill(t->mutable_data<float>(), t->mutable_data<float>() + 2250, 7.0f);
    first = t->buf->data();
    EXPECT_EQ(pool->held_bytes(), 0);
  }
  EXPECT_EQ(pool->held_bytes(), 9216);
  auto u = make_tensor(DType::kF32, {2300});  // 9200 bytes, the same class
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->buf->data(), first);
  EXPECT_EQ(u->nbytes(), 9200u);
  EXPECT_EQ(pool->held_bytes(), 0);
  // make_tensor zeroes a recycled buffer (make_tensor_uninit would not).
  EXPECT_TRUE(
      std::all_of(u->data<float>(), u->data<float>() + 2300, [](float v) { return v == 0; }));
  auto other = make_tensor(DType::kF32, {5000});  // another class: a new buffer
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->buf->data(), first);
}

TEST(OnnxBufferPool, IdleBytesStayWithinTheCap) {
  auto pool = BufferPool::create();
  BufferScope scope(pool.get());
  // One tensor out at a time, each of a new class: the most out at once is the largest.
  int64_t largest = 0;
  for (int64_t n = 1000; n < 200000; n = n * 5 / 4) {
    auto t = make_tensor_uninit(DType::kU8, {n});
    ASSERT_TRUE(t.ok());
    largest = std::max<int64_t>(largest, static_cast<int64_t>(BufferPool::size_class(n)));
    t = Tensor{};
    EXPECT_EQ(pool->cap(), BufferPool::kPeaksHeld * largest);
    EXPECT_LE(pool->held_bytes(), pool->cap());
  }
  EXPECT_GT(pool->held_bytes(), 0);
}

TEST(OnnxBufferPool, OnlyTheScopesThreadTakesFromThePool) {
  auto pool = BufferPool::create();
  {
    BufferScope scope(pool.get());
    auto t = make_tensor(DType::kF32, {100});
    ASSERT_TRUE(t.ok());
  }
  EXPECT_EQ(pool->held_bytes(), 448);              // 400 bytes, class 448
  auto outside = make_tensor(DType::kF32, {100});  // no scope: allocated afresh
  ASSERT_TRUE(outside.ok());
  EXPECT_EQ(pool->held_bytes(), 448);
}

TEST(OnnxBufferPool, TensorsMayOutliveThePool) {
  Tensor kept;
  {
    auto pool = BufferPool::create();
    BufferScope scope(pool.get());
    auto t = make_tensor(DType::kF32, {1000});
    ASSERT_TRUE(t.ok());
    kept = *t;
  }
  // The pool is gone; the buffer is still valid and is freed when `kept` goes (ASan checks).
  kept.mutable_data<float>()[999] = 1.0f;
  EXPECT_EQ(kept.data<float>()[999], 1.0f);
}

}  // namespace
}  // namespace power::onnx
