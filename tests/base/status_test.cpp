#include "base/status.h"

#include <gtest/gtest.h>

namespace power {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return make_error(StatusCode::kInvalidArgument, "not positive: {}", x);
  return x;
}

Result<int> doubled(int x) {
  POWER_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return v * 2;
}

TEST(Status, OkByDefault) {
  Status s;
  EXPECT_TRUE(s.ok());
  EXPECT_EQ(s.to_string(), "ok");
}

TEST(Status, MessageAndContext) {
  Status s = Status(StatusCode::kCorrupt, "tensor data out of bounds")
                 .with("tensor", "blk.0.attn_q.weight")
                 .with("offset", 1234);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kCorrupt);
  EXPECT_EQ(s.to_string(),
            "corrupt: tensor data out of bounds (tensor=blk.0.attn_q.weight, offset=1234)");
}

TEST(Result, PropagatesErrors) {
  auto ok = doubled(21);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, 42);
  auto bad = doubled(-1);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(), "not positive: -1");
}

TEST(Result, OkStatusIsNotAValue) {
  Result<int> r{Status()};
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInternal);
}

TEST(StatusDeath, CheckAborts) {
  EXPECT_DEATH(POWER_CHECK_MSG(1 + 1 == 3, "arithmetic"), "internal check failed");
}

}  // namespace
}  // namespace power
