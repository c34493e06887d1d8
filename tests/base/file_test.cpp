#include "base/file.h"

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "test_util.h"

namespace power {
namespace {

class FileTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("power-file"); }
  void TearDown() override { testing::remove_tree(dir_); }
  std::string dir_;
};

TEST_F(FileTest, AtomicWriteThenMap) {
  std::string path = dir_ + "/a.bin";
  ASSERT_TRUE(write_file_atomic(path, "hello world").ok());
  auto m = MappedFile::open(path, AccessHint::kSequential);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  ASSERT_EQ(m->size(), 11u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), m->size()), "hello world");
  // Replacing keeps the old mapping's bytes intact (new inode) and leaves no temp files.
  ASSERT_TRUE(write_file_atomic(path, "second").ok());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), m->size()), "hello world");
  auto text = read_file_text(path);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "second");
  int n_files = 0;
  for (auto& e : std::filesystem::directory_iterator(dir_)) n_files += e.is_regular_file();
  EXPECT_EQ(n_files, 1);
}

TEST_F(FileTest, EmptyFileMapsEmpty) {
  std::string path = dir_ + "/empty";
  ASSERT_TRUE(write_file_atomic(path, "").ok());
  auto m = MappedFile::open(path);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->size(), 0u);
}

TEST_F(FileTest, MissingAndDirectoryAreErrors) {
  auto missing = MappedFile::open(dir_ + "/nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().to_string().find("nope"), std::string::npos);
  auto dir = MappedFile::open(dir_);
  ASSERT_FALSE(dir.ok());
  EXPECT_EQ(dir.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(write_file_atomic(dir_ + "/no/such/dir/f", "x").ok());
}

TEST_F(FileTest, ParentDirectory) {
  EXPECT_EQ(parent_directory("a/b/c"), "a/b");
  EXPECT_EQ(parent_directory("c"), ".");
  EXPECT_EQ(parent_directory("/c"), "/");
}

// flock conflicts between open file descriptions, so a second acquire in this process
// behaves like another process would; a forked child checks the cross-process case.
TEST_F(FileTest, LockExcludesOthers) {
  std::string lock_path = dir_ + "/lock";
  auto a = FileLock::acquire(lock_path);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  auto b = FileLock::try_acquire(lock_path);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kResourceExhausted);
  auto shared = FileLock::try_acquire(lock_path, FileLock::Mode::kShared);
  EXPECT_FALSE(shared.ok());

  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    auto c = FileLock::try_acquire(lock_path);
    _exit(c.ok() ? 1 : 0);
  }
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "child got the lock";

  a->release();
  auto c = FileLock::try_acquire(lock_path);
  EXPECT_TRUE(c.ok());
}

TEST_F(FileTest, BlockingAcquireWaitsForRelease) {
  std::string lock_path = dir_ + "/lock";
  auto a = FileLock::acquire(lock_path);
  ASSERT_TRUE(a.ok());
  std::atomic<bool> got{false};
  std::thread t([&] {
    auto b = FileLock::acquire(lock_path);
    got = b.ok();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  a->release();
  t.join();
  EXPECT_TRUE(got.load());
}

TEST_F(FileTest, SharedLocksCoexist) {
  std::string lock_path = dir_ + "/lock";
  auto a = FileLock::acquire(lock_path, FileLock::Mode::kShared);
  auto b = FileLock::try_acquire(lock_path, FileLock::Mode::kShared);
  EXPECT_TRUE(a.ok());
  EXPECT_TRUE(b.ok());
  EXPECT_FALSE(FileLock::try_acquire(lock_path, FileLock::Mode::kExclusive).ok());
}

}  // namespace
}  // namespace power
