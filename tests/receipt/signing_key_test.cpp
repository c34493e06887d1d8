// The receipt key: RFC 8032 Ed25519 test vectors, the key file (made once, 0600, refused
// when others can read it), concurrent first use, and signature failures.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <thread>

#include "base/file.h"
#include "base/sha256.h"
#include "receipt/signing_key.h"
#include "test_util.h"

namespace power::receipt {
namespace {

std::array<uint8_t, 32> seed_of(const char* hex) {
  std::array<uint8_t, 32> s{};
  EXPECT_TRUE(decode_hex(hex, s.data(), s.size()).ok());
  return s;
}

// RFC 8032 section 7.1, TEST 1 (empty message) and TEST 2 (one byte 0x72).
TEST(SigningKey, Rfc8032Vectors) {
  struct Vector {
    const char *secret, *public_key, *message_hex, *signature;
  };
  const Vector vectors[] = {
      {"9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
       "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
       "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e3970"
       "1cf9b46bd25bf5f0595bbe24655141438e7a100b"},
      {"4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
       "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
       "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613"
       "d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
  };
  for (const Vector& v : vectors) {
    auto key = SigningKey::from_seed(seed_of(v.secret));
    ASSERT_TRUE(key.ok());
    EXPECT_EQ((*key)->public_key_hex(), v.public_key);
    std::string msg;
    for (size_t i = 0; i + 1 < std::strlen(v.message_hex); i += 2) {
      msg.push_back(static_cast<char>(std::stoi(std::string(v.message_hex + i, 2), nullptr, 16)));
    }
    auto sig = (*key)->sign(msg);
    ASSERT_TRUE(sig.ok());
    EXPECT_EQ(to_hex(sig->data(), sig->size()), v.signature);
    EXPECT_TRUE(verify_signature((*key)->public_key(), msg, *sig).ok());
    // Any other message, key or signature bit fails.
    EXPECT_EQ(verify_signature((*key)->public_key(), msg + "x", *sig).code(),
              StatusCode::kIntegrity);
    auto bad = *sig;
    bad[10] ^= 0x01;
    EXPECT_EQ(verify_signature((*key)->public_key(), msg, bad).code(), StatusCode::kIntegrity);
    PublicKey other = (*key)->public_key();
    other[0] ^= 0x01;
    EXPECT_FALSE(verify_signature(other, msg, *sig).ok());
  }
}

TEST(SigningKey, MadeOnceWithPrivatePermissions) {
  const std::string home = testing::make_temp_dir("power_keys");
  const std::string dir = home + "/keys";
  auto a = SigningKey::load_or_create(dir);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  struct stat sb {};
  ASSERT_EQ(::stat((dir + "/receipt-ed25519.key").c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat(dir.c_str(), &sb), 0);
  EXPECT_EQ(sb.st_mode & 077, 0u);
  auto b = SigningKey::load_or_create(dir);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*a)->public_key_hex(), (*b)->public_key_hex());
  auto pub = read_file_text(dir + "/receipt-ed25519.pub");
  ASSERT_TRUE(pub.ok());
  EXPECT_EQ(*pub, (*a)->public_key_hex() + "\n");

  // Readable by others: refused, as ssh refuses such a key.
  ASSERT_EQ(::chmod((dir + "/receipt-ed25519.key").c_str(), 0644), 0);
  auto open_key = SigningKey::load_or_create(dir);
  EXPECT_EQ(open_key.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(open_key.status().to_string().find("chmod 600"), std::string::npos);
  // Garbage in the key file: a clear error, not a new key.
  ASSERT_TRUE(write_file_atomic(dir + "/receipt-ed25519.key", std::string_view("zz\n")).ok());
  ASSERT_EQ(::chmod((dir + "/receipt-ed25519.key").c_str(), 0600), 0);
  EXPECT_EQ(SigningKey::load_or_create(dir).status().code(), StatusCode::kCorrupt);
  testing::remove_tree(home);
}

TEST(SigningKey, ConcurrentFirstUseMakesOneKey) {
  const std::string home = testing::make_temp_dir("power_keys_race");
  const std::string dir = home + "/keys";
  // Processes (the flock) and threads in each of them race to make the key.
  int pipes[4][2];
  pid_t pids[4];
  for (int p = 0; p < 4; ++p) {
    ASSERT_EQ(::pipe(pipes[p]), 0);
    pids[p] = ::fork();
    ASSERT_GE(pids[p], 0);
    if (pids[p] == 0) {
      ::close(pipes[p][0]);
      auto k = SigningKey::load_or_create(dir);
      const std::string out = k.ok() ? (*k)->public_key_hex() : "error";
      (void)!::write(pipes[p][1], out.data(), out.size());
      ::_exit(0);
    }
    ::close(pipes[p][1]);
  }
  std::vector<std::string> from_threads(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto k = SigningKey::load_or_create(dir);
      from_threads[static_cast<size_t>(t)] = k.ok() ? (*k)->public_key_hex() : "error";
    });
  }
  for (auto& t : threads) t.join();
  std::set<std::string> keys(from_threads.begin(), from_threads.end());
  for (int p = 0; p < 4; ++p) {
    char buf[128] = {};
    const ssize_t n = ::read(pipes[p][0], buf, sizeof(buf));
    ::close(pipes[p][0]);
    int status = 0;
    ::waitpid(pids[p], &status, 0);
    keys.insert(std::string(buf, n > 0 ? static_cast<size_t>(n) : 0));
  }
  EXPECT_EQ(keys.size(), 1u);
  EXPECT_EQ(keys.count("error"), 0u);
  EXPECT_EQ(keys.begin()->size(), 64u);
  testing::remove_tree(home);
}

TEST(SigningKey, PublicKeyParsing) {
  EXPECT_TRUE(
      parse_public_key_hex("  d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a\n")
          .ok());
  EXPECT_FALSE(parse_public_key_hex("d75a98").ok());
  EXPECT_FALSE(parse_public_key_hex(std::string(64, 'g')).ok());
}

}  // namespace
}  // namespace power::receipt
