// `--model-lib` through the power binary, with the test plugins of tests/host/plugins: a
// plugin's architecture generates text with `power run` and its logits come out of `power
// logits`; a library built against another SDK version is refused naming both versions (run
// and serve); a plugin's package that declares a tensor the file lacks fails naming it;
// without the library the architecture is unknown, and the error names it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "format/gguf.h"
#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

// Weights of the 4 x 16 bag-of-embeddings model: token t's embedding is the one-hot-like row
// [t, 1, 0, 0] / 16, output row r is [1, r, 0, 0], so logit r of token t is (t + r) / 16 and
// greedy decoding always picks the last id, 15.
std::string write_model(const std::string& dir, const std::string& arch, bool with_output,
                        uint64_t n_vocab = 16) {
  GgufWriter w;
  w.set("general.architecture", GgufValue::str(arch));
  std::vector<float> embd(64, 0.0f), out(64, 0.0f);
  for (int t = 0; t < 16; ++t) {
    embd[t * 4] = t / 16.0f;
    embd[t * 4 + 1] = 1.0f / 16.0f;
    out[t * 4] = 1.0f;
    out[t * 4 + 1] = static_cast<float>(t);
  }
  auto bytes = [](const std::vector<float>& v) {
    std::vector<uint8_t> b(v.size() * 4);
    std::memcpy(b.data(), v.data(), b.size());
    return b;
  };
  embd.resize(4 * n_vocab);
  EXPECT_TRUE(w.add_tensor("token_embd.weight", GgmlType::F32, {4, n_vocab}, bytes(embd)).ok());
  if (with_output) {
    EXPECT_TRUE(w.add_tensor("output.weight", GgmlType::F32, {4, 16}, bytes(out)).ok());
  }
  const std::string path = dir + "/" + arch + ".gguf";
  EXPECT_TRUE(w.write(path).ok());
  return path;
}

class CliModelLib : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("power-model-lib"); }
  void TearDown() override { testing::remove_tree(dir_); }
  std::string dir_;
};

TEST_F(CliModelLib, APluginsArchitectureRunsAndScores) {
  const std::string model = write_model(dir_, "plugtest_linear", true);
  auto r = testing::run_power({"run", "--model-lib", POWER_TEST_PLUGIN_LINEAR, "-m", model, "-p",
                               "a b", "-n", "4", "--temp", "0", "--ignore-eos", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  // Id 15 is the vocabulary's "▁m": four of them, the first space dropped at the start.
  EXPECT_EQ(r.out.substr(0, 8), " m m m m") << r.out;
  const std::string out = dir_ + "/logits.f32";
  r = testing::run_power({"logits", "--model-lib", POWER_TEST_PLUGIN_LINEAR, "-m", model,
                          "--tokens", "1,7", "--out", out});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto logits = testing::read_f32(out);
  ASSERT_EQ(logits.size(), 32u);
  for (int t : {0, 1}) {
    const int tok = t == 0 ? 1 : 7;
    for (int v = 0; v < 16; ++v) EXPECT_NEAR(logits[t * 16 + v], (tok + v) / 16.0f, 1e-6);
  }
}

TEST_F(CliModelLib, WithoutTheLibraryTheArchitectureIsUnknown) {
  const std::string model = write_model(dir_, "plugtest_linear", true);
  auto r = testing::run_power({"run", "-m", model, "-p", "a", "-n", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("architecture is not supported"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("architecture=plugtest_linear"), std::string::npos) << r.err;
}

TEST_F(CliModelLib, AnotherSdkVersionIsRefusedByRunAndServe) {
  const std::string model = write_model(dir_, "plugtest_linear", true);
  for (const char* cmd : {"run", "serve"}) {
    std::vector<std::string> args = {cmd, "--model-lib", POWER_TEST_PLUGIN_WRONG_SDK, "-m", model};
    if (std::strcmp(cmd, "serve") == 0) args.insert(args.end(), {"--port", "0"});
    auto r = testing::run_power(args);
    EXPECT_NE(r.exit_code, 0) << cmd;
    EXPECT_NE(r.err.find("another SDK version"), std::string::npos) << cmd << ": " << r.err;
    EXPECT_NE(r.err.find("library_sdk="), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("power_sdk="), std::string::npos) << r.err;
  }
}

TEST_F(CliModelLib, ATensorThePackageNeedsButTheFileLacksIsNamed) {
  // The plugin's package wants token_embd [4, 8] and blk.0.needed.weight [4, 4].
  const std::string model = write_model(dir_, "plugtest_missing", false, 8);
  auto r = testing::run_power(
      {"run", "--model-lib", POWER_TEST_PLUGIN_MISSING, "-m", model, "-p", "a", "-n", "1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("tensor=blk.0.needed.weight"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace power
