// The store commands through the real `power` binary (the store's own tests drive the same
// code through a store-only binary; see tests/store/).
#include <gtest/gtest.h>

#include <cstdlib>

#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

using testing::run_power;

TEST(CliStore, PullLocalFileThenListShowRemove) {
  POWER_REQUIRE_SHARED();
  const std::string home = testing::make_temp_dir("power-home");
  ::setenv("POWER_HOME", home.c_str(), 1);
  ::unsetenv("POWER_MIRRORS");
  const std::string model = testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  // sha256 from ../shared/models/README.md
  const std::string digest = "047bf46455a544931cff6fef14d7910154c56afbc23ab1c5e56a72e69912c04b";
  auto pull =
      run_power({"pull", model, "--name", "stories260k", "--sha256", digest, "--progress", "none"});
  ASSERT_EQ(pull.exit_code, 0) << pull.err;
  auto ls = run_power({"ls"});
  ASSERT_EQ(ls.exit_code, 0) << ls.err;
  EXPECT_NE(ls.out.find("stories260k"), std::string::npos) << ls.out;
  auto show = run_power({"show", "stories260k", "--json"});
  ASSERT_EQ(show.exit_code, 0) << show.err;
  EXPECT_NE(show.out.find(digest), std::string::npos) << show.out;
  // A stored model runs by name, and gives the same text as the file itself.
  auto by_name = run_power({"run", "-m", "stories260k", "-n", "16", "--temp", "0"});
  auto by_file = run_power({"run", "-m", model, "-n", "16", "--temp", "0"});
  ASSERT_EQ(by_name.exit_code, 0) << by_name.err;
  EXPECT_EQ(by_name.out, by_file.out);
  auto unknown = run_power({"run", "-m", "no-such-model"});
  EXPECT_EQ(unknown.exit_code, 1);
  EXPECT_NE(unknown.err.find("no such model in the store"), std::string::npos) << unknown.err;
  auto wrong = run_power(
      {"pull", model, "--name", "wrong", "--sha256", std::string(64, '0'), "--progress", "none"});
  EXPECT_NE(wrong.exit_code, 0);
  auto rm = run_power({"rm", "stories260k"});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  ls = run_power({"ls"});
  EXPECT_EQ(ls.out.find("stories260k"), std::string::npos) << ls.out;
  ::unsetenv("POWER_HOME");
  testing::remove_tree(home);
}

}  // namespace
}  // namespace power
