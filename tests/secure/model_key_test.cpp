// Model keys (secure/model_key.h): the key-file formats accepted and refused (errors name the
// file, never its bytes), where a key comes from when several are given, and that every copy
// of the key the module makes (the key, the file's text, derived file keys) is wiped.
#include "secure/model_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>

#include "base/sha256.h"
#include "secure/container.h"
#include "secure_test_util.h"
#include "test_util.h"

namespace power::secure {
namespace {

class ModelKeyTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("power-modelkey"); }
  void TearDown() override { testing::remove_tree(dir_); }
  std::string write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_ + "/" + name;
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    EXPECT_GE(fd, 0);
    EXPECT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
    ::close(fd);
    return path;
  }
  std::string dir_;
};

std::string raw_key() {
  std::string k(32, '\0');
  for (int i = 0; i < 32; ++i) k[i] = static_cast<char>(0xA0 + i);
  return k;
}
std::string hex_of(const std::string& raw) {
  return to_hex(reinterpret_cast<const uint8_t*>(raw.data()), raw.size());
}

TEST_F(ModelKeyTest, AcceptedFileFormatsGiveTheSameKey) {
  const std::string raw = raw_key(), hex = hex_of(raw);
  std::string upper = hex;
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  auto from_raw = ModelKey::from_file(write("raw.key", raw));
  ASSERT_TRUE(from_raw.ok()) << from_raw.status().to_string();
  ASSERT_EQ(from_raw->bytes().size(), 32u);
  EXPECT_EQ(std::memcmp(from_raw->bytes().data(), raw.data(), 32), 0);
  for (const std::string& text : {hex, hex + "\n", hex + "\r\n", upper + "\n"}) {
    auto k = ModelKey::from_file(write("hex.key", text));
    ASSERT_TRUE(k.ok()) << k.status().to_string();
    EXPECT_EQ(std::memcmp(k->bytes().data(), raw.data(), 32), 0);
    EXPECT_EQ(k->id(), from_raw->id());
  }
  auto h = ModelKey::from_hex(hex, "test");
  ASSERT_TRUE(h.ok());
  EXPECT_EQ(h->id(), from_raw->id());
  // The id is not the key, nor a prefix of its plain SHA-256.
  const Sha256Digest plain_hash = sha256(raw.data(), raw.size());
  EXPECT_NE(std::memcmp(h->id().data(), plain_hash.data(), 16), 0);
  EXPECT_NE(std::memcmp(h->id().data(), raw.data(), 16), 0);
}

TEST_F(ModelKeyTest, OtherFileContentsAreRefusedNamingTheFile) {
  const std::string raw = raw_key(), hex = hex_of(raw);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"empty", ""},
      {"short_raw", raw.substr(0, 31)},
      {"long_raw", raw + "x"},
      {"short_hex", hex.substr(0, 63) + "\n"},
      {"long_hex", hex + "0"},
      {"not_hex", "g" + hex.substr(1)},
      {"two_newlines", hex + "\n\n"},
      {"space", hex + " "},
      {"huge", std::string(4096, 'a')},
  };
  for (const auto& [name, text] : bad) {
    const std::string path = write(name + ".key", text);
    auto k = ModelKey::from_file(path);
    ASSERT_FALSE(k.ok()) << name;
    EXPECT_EQ(k.status().code(), StatusCode::kInvalidArgument) << name;
    const std::string msg = k.status().to_string();
    EXPECT_NE(msg.find(path), std::string::npos) << msg;
    EXPECT_EQ(msg.find(hex.substr(0, 16)), std::string::npos) << "the error leaks key text";
  }
  auto missing = ModelKey::from_file(dir_ + "/nope.key");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_FALSE(ModelKey::from_file(dir_).ok());  // a directory
  EXPECT_FALSE(ModelKey::from_hex(hex.substr(2), "x").ok());
  EXPECT_FALSE(ModelKey::from_hex("zz" + hex.substr(2), "x").ok());
}

TEST_F(ModelKeyTest, ExplicitSourcesWinOverTheEnvironmentAndBothAreRefused) {
  const testing::ScopedEnv env(kModelKeyEnv);
  env.unset();
  auto none = resolve_model_key("", "");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());

  const std::string file_raw = raw_key();
  std::string env_raw = raw_key();
  env_raw[0] = 'Z';
  const std::string file = write("k.key", hex_of(file_raw) + "\n");
  env.set(hex_of(env_raw).c_str());
  auto from_env = resolve_model_key("", "");
  ASSERT_TRUE(from_env.ok());
  ASSERT_TRUE(from_env->has_value());
  EXPECT_EQ(std::memcmp((*from_env)->bytes().data(), env_raw.data(), 32), 0);
  auto from_file = resolve_model_key(file, "");
  ASSERT_TRUE(from_file.ok());
  EXPECT_EQ(std::memcmp((*from_file)->bytes().data(), file_raw.data(), 32), 0);
  auto from_hex = resolve_model_key("", hex_of(file_raw));
  ASSERT_TRUE(from_hex.ok());
  EXPECT_EQ(std::memcmp((*from_hex)->bytes().data(), file_raw.data(), 32), 0);
  auto both = resolve_model_key(file, hex_of(file_raw));
  ASSERT_FALSE(both.ok());
  EXPECT_EQ(both.status().code(), StatusCode::kInvalidArgument);
  env.set("not a key");
  auto bad_env = resolve_model_key("", "");
  ASSERT_FALSE(bad_env.ok());
  EXPECT_NE(bad_env.status().to_string().find(kModelKeyEnv), std::string::npos);
}

// Every buffer that held key material is wiped when it goes, and reads back as zeros after the
// wipe (the observer sees the bytes before they are unmapped: a skipped wipe would show the
// key). The key bytes really were in the buffer the observer saw being made.
TEST_F(ModelKeyTest, KeyMaterialIsWipedWhenItGoes) {
  const std::string path = write("k.key", hex_of(raw_key()) + "\n");
  testing::WipeWatcher watcher;
  {
    auto k = ModelKey::from_file(path);
    ASSERT_TRUE(k.ok());
    EXPECT_EQ(std::memcmp(k->bytes().data(), raw_key().data(), 32), 0);
    // The file's text copy is already gone; the key itself lives until `k` does.
    EXPECT_EQ(watcher.wipes_of("model key file text"), 1);
    EXPECT_EQ(watcher.wipes_of("model key"), 0);
    // Using the key derives a file key, which is wiped after the operation.
    auto c = encrypt_bytes(std::vector<uint8_t>(1000, 7), *k, 256);
    ASSERT_TRUE(c.ok());
    auto d = decrypt_bytes(*c, *k);
    ASSERT_TRUE(d.ok());
  }
  EXPECT_EQ(watcher.allocations("model key"), 1);
  EXPECT_EQ(watcher.wipes_of("model key"), 1);
  EXPECT_EQ(watcher.allocations("file key"), 2);
  EXPECT_EQ(watcher.wipes_of("file key"), 2);
  EXPECT_EQ(watcher.allocations("plaintext chunk"), watcher.wipes_of("plaintext chunk"));
  EXPECT_TRUE(watcher.all_wipes_zero());
  // A refused key file is wiped too.
  const std::string bad = write("bad.key", hex_of(raw_key()).substr(0, 60) + "zzzz");
  EXPECT_FALSE(ModelKey::from_file(bad).ok());
  EXPECT_EQ(watcher.allocations("model key file text"), watcher.wipes_of("model key file text"));
  EXPECT_EQ(watcher.allocations("model key"), watcher.wipes_of("model key"));
  EXPECT_TRUE(watcher.all_wipes_zero());
}

}  // namespace
}  // namespace power::secure
