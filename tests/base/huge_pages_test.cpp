// HugeRegion (base/huge_pages.h): 2 MiB alignment, the size rounded to pages, zeroed writable
// memory, the POWER_HUGEPAGES switch, and that the kernel really backs an advised region with
// huge pages where THP is on (`always` or `madvise`).
#include "base/huge_pages.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "test_util.h"

namespace power {
namespace {

TEST(HugeRegion, AlignedRoundedZeroedWritable) {
  const testing::ScopedEnv env("POWER_HUGEPAGES");
  env.unset();
  const uint64_t ask = 5 * kHugePageBytes + 100;
  Result<HugeRegion> r = HugeRegion::allocate(ask);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  const uint64_t page = static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % kHugePageBytes, 0u);
  EXPECT_EQ(r->size(), (ask + page - 1) / page * page);
  for (uint64_t i = 0; i < r->size(); i += 4096) ASSERT_EQ(r->data()[i], 0) << i;
  std::memset(r->data(), 0x5a, r->size());
  EXPECT_EQ(r->data()[r->size() - 1], 0x5a);
  // madvise(MADV_HUGEPAGE) is refused only by a kernel built without THP (no sysfs file).
  EXPECT_EQ(r->advised(), !transparent_huge_page_mode().empty());

  HugeRegion moved = std::move(r).value();
  EXPECT_EQ(moved.data()[0], 0x5a);
}

TEST(HugeRegion, KernelBacksAdvisedRegionWithHugePages) {
  const testing::ScopedEnv env("POWER_HUGEPAGES");
  env.unset();
  const std::string mode = transparent_huge_page_mode();
  if (mode != "always" && mode != "madvise") {
    GTEST_SKIP() << "transparent huge pages are '" << mode << "' here: nothing to back";
  }
  const int64_t before = process_huge_page_usage().anon_bytes;
  ASSERT_GE(before, 0) << "no /proc/self/smaps_rollup";
  Result<HugeRegion> r = HugeRegion::allocate(8 * kHugePageBytes);
  ASSERT_TRUE(r.ok());
  std::memset(r->data(), 1, r->size());  // first touch: the faults that can map huge pages
  const int64_t after = process_huge_page_usage().anon_bytes;
  // Four 2 MiB pages of eight at least: the kernel may fall back to small pages where it
  // cannot assemble a huge one, but not for most of an advised region on a machine with
  // free memory.
  EXPECT_GE(after - before, static_cast<int64_t>(4 * kHugePageBytes))
      << "before " << before << " after " << after;
}

TEST(HugeRegion, SwitchOffSkipsTheAdvice) {
  const testing::ScopedEnv env("POWER_HUGEPAGES");
  for (const char* off : {"0", "off", "false", "no"}) {
    env.set(off);
    EXPECT_FALSE(huge_pages_enabled()) << off;
    Result<HugeRegion> r = HugeRegion::allocate(kHugePageBytes);
    ASSERT_TRUE(r.ok());
    EXPECT_FALSE(r->advised()) << off;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data()) % kHugePageBytes, 0u);
  }
  env.set("1");
  EXPECT_TRUE(huge_pages_enabled());
}

TEST(HugeRegion, ZeroBytesIsAnError) {
  Result<HugeRegion> r = HugeRegion::allocate(0);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace power
