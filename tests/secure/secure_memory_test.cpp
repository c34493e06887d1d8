// LockedBuffer (base/secure_memory.h): mapped anonymous, not dumpable, locked when the limit
// allows, read-only once sealed, wiped on reset; kRequired fails when mlock is refused.
#include "base/secure_memory.h"

#include "base/huge_pages.h"

#include <linux/capability.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "secure_test_util.h"

namespace power {
namespace {

TEST(LockedBuffer, IsAnonymousNotDumpableAndLocked) {
  auto b = LockedBuffer::allocate(10000, MemoryLock::kBestEffort, "test");
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  ASSERT_EQ(b->size(), 10000u);
  std::memset(b->data(), 0x5a, b->size());
  const std::string flags = testing::vm_flags_of(b->data());
  EXPECT_TRUE(testing::has_vm_flag(flags, "dd")) << flags;
  EXPECT_EQ(testing::has_vm_flag(flags, "lo"), b->locked()) << flags;
  EXPECT_TRUE(testing::has_vm_flag(flags, "wr")) << flags;
  b->seal();
  EXPECT_FALSE(testing::has_vm_flag(testing::vm_flags_of(b->data()), "wr"));
  testing::WipeWatcher watcher;
  b->reset();
  EXPECT_TRUE(b->empty());
  ASSERT_EQ(watcher.wipes_of("test"), 1);
  EXPECT_TRUE(watcher.all_wipes_zero());
  auto empty = LockedBuffer::allocate(0, MemoryLock::kRequired, "test");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
}

// Drops CAP_IPC_LOCK from this process (the child's), so that RLIMIT_MEMLOCK applies even
// when the tests run as root.
bool drop_cap_ipc_lock() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  data[0].effective &= ~(1u << CAP_IPC_LOCK);
  data[0].permitted &= ~(1u << CAP_IPC_LOCK);
  data[0].inheritable &= ~(1u << CAP_IPC_LOCK);
  return ::syscall(SYS_capset, &header, data) == 0;
}

// Under a small RLIMIT_MEMLOCK and without CAP_IPC_LOCK (both in a child process, so this one
// keeps its limit): kRequired fails with kResourceExhausted, kBestEffort returns an unlocked
// buffer.
TEST(LockedBuffer, RequiredLockFailsBeyondTheLimit) {
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    struct rlimit rl {
      4096, 4096
    };
    if (!drop_cap_ipc_lock() || ::setrlimit(RLIMIT_MEMLOCK, &rl) != 0) ::_exit(10);
    auto req = LockedBuffer::allocate(1 << 20, MemoryLock::kRequired, "test");
    if (req.ok() || req.status().code() != StatusCode::kResourceExhausted) ::_exit(11);
    auto best = LockedBuffer::allocate(1 << 20, MemoryLock::kBestEffort, "test");
    if (!best.ok() || best->locked()) ::_exit(12);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// The kernels' packed copies of decrypted weights (kernels/cpu/matmul_repack.cpp asks
// in_locked_buffer() of the source): a secret HugeRegion is locked where allowed and not
// dumpable; an ordinary one is not locked.
TEST(LockedBuffer, KnowsItsRangesAndSecretHugeRegionsAreLocked) {
  auto b = LockedBuffer::allocate(3 * 4096 + 10, MemoryLock::kBestEffort, "test");
  ASSERT_TRUE(b.ok());
  const uint8_t* p = b->data();
  EXPECT_TRUE(in_locked_buffer(p));
  EXPECT_TRUE(in_locked_buffer(p + b->size() - 1));
  int on_stack = 0;
  EXPECT_FALSE(in_locked_buffer(&on_stack));
  b->reset();
  EXPECT_FALSE(in_locked_buffer(p));

  auto secret = HugeRegion::allocate(3 << 20, /*secret=*/true);
  ASSERT_TRUE(secret.ok());
  std::memset(secret->data(), 0x5a, secret->size());
  const std::string flags = testing::vm_flags_of(secret->data());
  EXPECT_TRUE(secret->secret());
  EXPECT_TRUE(testing::has_vm_flag(flags, "dd")) << flags;
  EXPECT_EQ(testing::has_vm_flag(flags, "lo"), secret->locked()) << flags;
  auto plain = HugeRegion::allocate(1 << 20);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE(plain->secret());
  EXPECT_FALSE(plain->locked());
  EXPECT_FALSE(testing::has_vm_flag(testing::vm_flags_of(plain->data()), "lo"));
  // Moving keeps the flags with the memory.
  HugeRegion moved = std::move(*secret);
  EXPECT_TRUE(moved.secret());
  EXPECT_EQ(testing::has_vm_flag(testing::vm_flags_of(moved.data()), "lo"), moved.locked());
}

}  // namespace
}  // namespace power
