// Shared pieces of the store tests: a temporary store, deterministic bytes, child processes.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "base/sha256.h"
#include "store/layout.h"
#include "store/pull.h"

namespace power::store::testing {

// Deterministic pseudo-random bytes.
std::string make_bytes(size_t n, uint32_t seed);
Sha256Digest digest_of(const std::string& bytes);
std::vector<std::string> list_dir(const std::string& dir);
void write_text(const std::string& path, const std::string& text);

// A fresh $POWER_HOME per test, with fast timeouts and no proxy or mirror variables.
class StoreFixture : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  PullOptions options() const;
  Result<Manifest> pull_url(const std::string& source, std::optional<Sha256Digest> pin = {},
                            std::optional<uint64_t> size = {}, const std::string& name = "m");
  // Nothing in blobs/ (or only `allowed`), nothing in staging/, no manifest `name`.
  void expect_nothing_committed(const std::string& name = "m");

  std::string home_;
  StoreLayout layout_;
  StoreConfig config_;
  std::vector<PullProgress> events_;
};

// Runs `args` (args[0] is the executable) with extra environment variables, stdout and
// stderr to files. Returns the pid.
pid_t spawn_process(const std::vector<std::string>& args,
                    const std::map<std::string, std::string>& env, const std::string& stdout_path,
                    const std::string& stderr_path);
// Waits for the child; returns its exit status (128+signal when killed), -1 on timeout
// (the child is then killed).
int wait_process(pid_t pid, int timeout_ms);
struct ProcessResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
ProcessResult run_process(const std::vector<std::string>& args,
                          const std::map<std::string, std::string>& env, int timeout_ms = 60000);

}  // namespace power::store::testing
