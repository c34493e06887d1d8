// The receipt surface of the `power` binary: power run --receipt/--output/--policy, power key
// show, power verify (every check, one line each, exit status) and power replay, on
// stories260K from ../shared. $POWER_HOME points at a fresh directory per test.
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/file.h"
#include "base/sha256.h"
#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

using testing::run_power;

class CliReceiptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("power_cli_receipt");
    ::setenv("POWER_HOME", (dir_ + "/home").c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("POWER_HOME");
    testing::remove_tree(dir_);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  void write(const std::string& name, const std::string& text) {
    ASSERT_TRUE(write_file_atomic(path(name), std::string_view(text)).ok());
  }
  std::string model() const {
    return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  }
  std::string dir_;
};

TEST_F(CliReceiptTest, RunVerifyReplay) {
  POWER_REQUIRE_SHARED();
  auto run = run_power({"run", "-m", model(), "-p", "Once upon a time", "-n", "24", "--temp", "0",
                        "-t", "1", "--receipt", path("r.json"), "--output", path("out.txt")});
  ASSERT_EQ(run.exit_code, 0) << run.err;
  auto out = read_file_text(path("out.txt"));
  ASSERT_TRUE(out.ok());
  EXPECT_EQ(run.out, *out + "\n");  // --output holds exactly the streamed text
  write("req.json", R"({"prompt":"Once upon a time"})");

  auto key = run_power({"key", "show"});
  ASSERT_EQ(key.exit_code, 0) << key.err;
  ASSERT_EQ(key.out.size(), 65u);
  const std::string pub = key.out.substr(0, 64);

  auto v = run_power({"verify", path("r.json"), "--pubkey", pub, "-m", model(), "--request",
                      path("req.json"), "--output", path("out.txt")});
  EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
  for (const char* line : {"PASS canonical", "PASS schema", "PASS signature", "PASS model",
                           "PASS input", "PASS output", "receipt accepted"}) {
    EXPECT_NE(v.out.find(line), std::string::npos) << line << "\n" << v.out;
  }
  // Without --pubkey: the local runtime key.
  EXPECT_EQ(run_power({"verify", path("r.json")}).exit_code, 0);

  // Another model file, other output, another input, a wrong key: each fails its own line.
  auto other_model =
      run_power({"verify", path("r.json"), "-m",
                 testing::shared_dir() + "/models/stories260K/stories260K-F16.gguf"});
  EXPECT_EQ(other_model.exit_code, 1);
  EXPECT_NE(other_model.out.find("FAIL model"), std::string::npos) << other_model.out;
  write("other.txt", *out + " ");
  auto other_out = run_power({"verify", path("r.json"), "--output", path("other.txt")});
  EXPECT_EQ(other_out.exit_code, 1);
  EXPECT_NE(other_out.out.find("FAIL output"), std::string::npos);
  write("other_req.json", R"({"prompt":"Once upon a time!"})");
  auto other_in = run_power({"verify", path("r.json"), "--request", path("other_req.json")});
  EXPECT_EQ(other_in.exit_code, 1);
  EXPECT_NE(other_in.out.find("FAIL input"), std::string::npos);
  auto wrong_key = run_power({"verify", path("r.json"), "--pubkey", std::string(64, 'a')});
  EXPECT_EQ(wrong_key.exit_code, 1);
  EXPECT_NE(wrong_key.out.find("FAIL signature"), std::string::npos);

  // A flipped byte in the file.
  auto text = read_file_text(path("r.json"));
  ASSERT_TRUE(text.ok());
  std::string bad = *text;
  bad[bad.find("\"n_tokens\":24") + 12] = '5';
  write("bad.json", bad);
  auto tampered = run_power({"verify", path("bad.json")});
  EXPECT_EQ(tampered.exit_code, 1);
  EXPECT_NE(tampered.out.find("FAIL signature"), std::string::npos) << tampered.out;

  // Policy at verify time.
  write("pol_ok.json", R"({"min_power_version":"0.1","require_deterministic":true})");
  EXPECT_EQ(run_power({"verify", path("r.json"), "--policy", path("pol_ok.json")}).exit_code, 0);
  write("pol_new.json", R"({"min_power_version":"99"})");
  auto old = run_power({"verify", path("r.json"), "--policy", path("pol_new.json")});
  EXPECT_EQ(old.exit_code, 1);
  EXPECT_NE(old.out.find("FAIL policy"), std::string::npos);

  // Replay reproduces the output digests.
  auto replay = run_power({"replay", path("r.json"), "-m", model(), "--request", path("req.json")});
  EXPECT_EQ(replay.exit_code, 0) << replay.out << replay.err;
  EXPECT_NE(replay.out.find("PASS output.tokens_sha256"), std::string::npos) << replay.out;
  auto replay_other = run_power({"replay", path("r.json"), "-m",
                                 testing::shared_dir() + "/models/stories260K/stories260K-F16.gguf",
                                 "--request", path("req.json")});
  EXPECT_EQ(replay_other.exit_code, 1);
  EXPECT_NE(replay_other.out.find("FAIL model"), std::string::npos) << replay_other.out;
}

TEST_F(CliReceiptTest, RunRefusesUnderPolicy) {
  POWER_REQUIRE_SHARED();
  write("pol.json", R"({"allowed_model_sha256":[")" + std::string(64, '0') + R"("]})");
  auto r = run_power(
      {"run", "-m", model(), "-p", "Hi", "-n", "4", "-t", "1", "--policy", path("pol.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("policy_refused"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is not in allowed_model_sha256"), std::string::npos) << r.err;
  EXPECT_TRUE(r.out.empty());  // nothing was generated
  write("det.json", R"({"require_deterministic":true})");
  auto d = run_power({"run", "-m", model(), "-p", "Hi", "-n", "4", "--policy", path("det.json")});
  EXPECT_EQ(d.exit_code, 1);
  EXPECT_NE(d.err.find("thread count is not fixed"), std::string::npos) << d.err;
  write("typo.json", R"({"require_signatur":true})");
  auto t = run_power({"run", "-m", model(), "-p", "Hi", "--policy", path("typo.json")});
  EXPECT_EQ(t.exit_code, 1);
  EXPECT_NE(t.err.find("unknown policy member"), std::string::npos) << t.err;
}

}  // namespace
}  // namespace power
