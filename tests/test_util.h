// Helpers shared by the test binaries: where ../shared is, and reading raw test data.
//
// shared_dir() is $POWER_SHARED_DIR, else ../shared next to the source checkout. Tests that
// need it call POWER_REQUIRE_SHARED(): it skips with a message on a user's machine without
// ../shared, and fails when CI=true (CI must always have it).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "power/request.h"

namespace power::testing {

std::string shared_dir();
bool shared_available();
bool running_in_ci();
// A fresh empty directory under the system temp dir, removed by the test fixture owner.
std::string make_temp_dir(const std::string& prefix);
void remove_tree(const std::string& path);
// Whole file as bytes / as f32 values; fails the test (ADD_FAILURE) and returns empty on error.
std::vector<uint8_t> read_bytes(const std::string& path);
std::vector<float> read_f32(const std::string& path);
std::vector<double> read_f64(const std::string& path);
// Whitespace-separated token ids (the fixtures' tokens.txt and *.greedy.txt).
std::vector<int32_t> read_ids(const std::string& path);
// Two runs of one request gave the same tokens and, for every token, the same chosen and top
// log-probabilities as floats (bit for bit: the logits they come from were equal).
void expect_identical_completions(const Completion& got, const Completion& want);

// Restores an environment variable on destruction (set again to its old value, or unset if it
// was unset), so a test may set() / unset() it freely.
class ScopedEnv {
 public:
  explicit ScopedEnv(const char* name);
  ~ScopedEnv();
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  void set(const char* value) const;
  void unset() const;

 private:
  std::string name_;
  bool had_ = false;
  std::string saved_;
};

}  // namespace power::testing

#define POWER_REQUIRE_SHARED()                                                      \
  do {                                                                              \
    if (!::power::testing::shared_available()) {                                    \
      if (::power::testing::running_in_ci()) {                                      \
        FAIL() << "CI=true but the shared data directory is missing: "              \
               << ::power::testing::shared_dir();                                   \
      }                                                                             \
      GTEST_SKIP() << "shared data not found at " << ::power::testing::shared_dir() \
                   << " (set POWER_SHARED_DIR); skipping";                          \
    }                                                                               \
  } while (0)
