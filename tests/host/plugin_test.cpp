// Model plugins (power/sdk/plugin.h) as `--model-lib` loads them: test libraries built in
// this tree with only the SDK headers (tests/host/plugins/). A library built against another
// SDK version is refused naming both versions before its code runs; a plugin's package that
// declares a tensor the file lacks fails at load naming the tensor; a library without the
// entry point, a missing file and a name already registered are clear errors; loading the
// same library twice is a no-op. The same checks through the `power` binary are in
// tests/e2e/cli_model_lib_test.cpp.
#include <gtest/gtest.h>

#include "host/model.h"
#include "host/registry.h"
#include "power/sdk.h"
#include "test_util.h"
#include "toy_models.h"

namespace power {
namespace {

TEST(SdkPlugin, AnotherSdkVersionIsRefusedNamingBoth) {
  Status st = sdk::load_model_library(POWER_TEST_PLUGIN_WRONG_SDK);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::kUnsupported);
  const std::string theirs = std::to_string((POWER_SDK_VERSION + 1) / 1000) + "." +
                             std::to_string((POWER_SDK_VERSION + 1) % 1000);
  const std::string ours =
      std::to_string(POWER_SDK_VERSION / 1000) + "." + std::to_string(POWER_SDK_VERSION % 1000);
  EXPECT_NE(st.to_string().find("library_sdk=" + theirs), std::string::npos) << st.to_string();
  EXPECT_NE(st.to_string().find("power_sdk=" + ours), std::string::npos) << st.to_string();
  // Refused again on a second try (it was not half-loaded).
  EXPECT_EQ(sdk::load_model_library(POWER_TEST_PLUGIN_WRONG_SDK).code(), StatusCode::kUnsupported);
}

TEST(SdkPlugin, APackageDeclaringATensorTheFileLacksFailsAtLoadNamingIt) {
  ASSERT_TRUE(sdk::load_model_library(POWER_TEST_PLUGIN_MISSING).ok());
  ASSERT_TRUE(sdk::load_model_library(POWER_TEST_PLUGIN_MISSING).ok());  // twice: a no-op
  auto entry = ArchitectureRegistry::global().find("plugtest_missing");
  ASSERT_NE(entry, nullptr);
  EXPECT_NE(entry->origin.find("missing_tensor_plugin"), std::string::npos) << entry->origin;
  const std::string dir = testing::make_temp_dir("power-plugin");
  const std::string path = testing::write_toy_gguf(
      dir, "plugtest_missing", {{"token_embd.weight", {4, 8}, testing::toy_values(32, 3, 1)}});
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  auto m = load_model(std::shared_ptr<const GgufFile>(std::move(*f)));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().to_string().find("tensor=blk.0.needed.weight"), std::string::npos)
      << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("architecture=plugtest_missing"), std::string::npos);
  testing::remove_tree(dir);
}

TEST(SdkPlugin, NotAPluginMissingFilesAndTakenNamesAreClearErrors) {
  Status st = sdk::load_model_library(POWER_TEST_NOT_A_PLUGIN);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.to_string().find("power_model_plugin"), std::string::npos) << st.to_string();
  st = sdk::load_model_library("/nonexistent/libnothing.so");
  EXPECT_EQ(st.code(), StatusCode::kNotFound) << st.to_string();
  st = sdk::load_model_library(POWER_TEST_PLUGIN_DUPLICATE);
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.to_string();
  EXPECT_NE(st.to_string().find("architecture=llama"), std::string::npos);
  EXPECT_NE(st.to_string().find("registered_by=built-in"), std::string::npos);
  // The built-in llama is still the one the registry has.
  EXPECT_EQ(ArchitectureRegistry::global().find("llama")->origin, "built-in");
}

}  // namespace
}  // namespace power
