// `power encrypt`, `power decrypt --verify` and `power run --model-key-file` as a user runs
// them, on ../shared stories260K: the encrypted copy generates exactly what the plain file
// does and its receipt has the same model facts; a missing key, a wrong key and a changed byte
// are refused with a clear message; the input is never overwritten.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/sha256.h"
#include "run_util.h"
#include "secure_test_util.h"
#include "test_util.h"

namespace power {
namespace {

using testing::run_power;

std::string stories_f32() {
  return testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
}

class CliEncryptTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("power-clienc");
    std::filesystem::create_directory(dir_ + "/enc");
    container_ = dir_ + "/enc/stories260K-F32.gguf";  // same name: receipts compare whole
    key_ = dir_ + "/model.key";
  }
  void TearDown() override { testing::remove_tree(dir_); }
  std::string dir_, container_, key_;
};

std::vector<std::string> run_args(const std::string& model, const std::string& receipt) {
  return {"run",    "-m", model, "-p", "Once upon a time", "-n",   "40", "--temp", "0",
          "--seed", "1",  "-t",  "2",  "--receipt",        receipt};
}

TEST_F(CliEncryptTest, EncryptedModelRunsLikeThePlainOne) {
  POWER_REQUIRE_SHARED();
  (void)testing::write_hex_key_file(key_);
  auto enc = run_power(
      {"encrypt", stories_f32(), container_, "--key-file", key_, "--chunk-size", "65536"});
  ASSERT_EQ(enc.exit_code, 0) << enc.err;
  auto digest = sha256_file(stories_f32());
  ASSERT_TRUE(digest.ok());
  EXPECT_NE(enc.out.find(to_hex(*digest)), std::string::npos) << enc.out;
  auto verify = run_power({"decrypt", container_, "--verify", "--key-file", key_});
  ASSERT_EQ(verify.exit_code, 0) << verify.err;
  EXPECT_NE(verify.out.find(to_hex(*digest)), std::string::npos) << verify.out;

  const std::string plain_receipt = dir_ + "/plain.json", enc_receipt = dir_ + "/enc.json";
  auto a = run_power(run_args(stories_f32(), plain_receipt));
  ASSERT_EQ(a.exit_code, 0) << a.err;
  auto args = run_args(container_, enc_receipt);
  args.insert(args.end(), {"--model-key-file", key_});
  auto b = run_power(args);
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_FALSE(a.out.empty());
  EXPECT_EQ(b.out, a.out);
  auto ra = read_file_text(plain_receipt), rb = read_file_text(enc_receipt);
  ASSERT_TRUE(ra.ok() && rb.ok());
  const auto ja = nlohmann::json::parse(*ra), jb = nlohmann::json::parse(*rb);
  EXPECT_EQ(jb["model"], ja["model"]);
  EXPECT_EQ(jb["model"]["sha256"], to_hex(*digest));
  EXPECT_EQ(jb["output"], ja["output"]);
}

TEST_F(CliEncryptTest, RefusalsAreClear) {
  POWER_REQUIRE_SHARED();
  (void)testing::write_hex_key_file(key_);
  ASSERT_EQ(run_power({"encrypt", stories_f32(), container_, "--key-file", key_}).exit_code, 0);
  const std::string receipt = dir_ + "/r.json";

  auto no_key = run_power(run_args(container_, receipt));
  EXPECT_NE(no_key.exit_code, 0);
  EXPECT_NE(no_key.err.find("encrypted Power container"), std::string::npos) << no_key.err;
  EXPECT_NE(no_key.err.find("--model-key-file"), std::string::npos) << no_key.err;

  const std::string other = dir_ + "/other.key";
  (void)testing::write_hex_key_file(other);
  auto args = run_args(container_, receipt);
  args.insert(args.end(), {"--model-key-file", other});
  auto wrong = run_power(args);
  EXPECT_NE(wrong.exit_code, 0);
  EXPECT_NE(wrong.err.find("wrong model key"), std::string::npos) << wrong.err;

  const std::string bad_key = dir_ + "/bad.key";
  ASSERT_TRUE(write_file_atomic(bad_key, std::string("not a key\n")).ok());
  auto bad = run_power({"decrypt", container_, "--verify", "--key-file", bad_key});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find(bad_key), std::string::npos) << bad.err;

  // One changed byte in the middle of the weights.
  std::vector<uint8_t> bytes = testing::read_bytes(container_);
  bytes[bytes.size() / 2] ^= 0x10;
  const std::string tampered = dir_ + "/tampered.pwenc";
  ASSERT_TRUE(write_file_atomic(tampered, bytes).ok());
  auto t = run_power({"decrypt", tampered, "--verify", "--key-file", key_});
  EXPECT_NE(t.exit_code, 0);
  EXPECT_NE(t.err.find("fails authentication"), std::string::npos) << t.err;

  // Other commands name the container for what it is.
  auto inspect = run_power({"inspect", container_});
  EXPECT_NE(inspect.exit_code, 0);
  EXPECT_NE(inspect.err.find("encrypted Power container"), std::string::npos) << inspect.err;

  // The input is never the output; decrypt writes no plaintext.
  const auto before = testing::read_bytes(container_);
  EXPECT_NE(run_power({"encrypt", container_, container_, "--key-file", key_}).exit_code, 0);
  EXPECT_EQ(testing::read_bytes(container_), before);
  EXPECT_NE(run_power({"decrypt", container_, "--key-file", key_}).exit_code, 0);
}

}  // namespace
}  // namespace power
