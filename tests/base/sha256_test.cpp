#include "base/sha256.h"

#include <gtest/gtest.h>

#include <string>

#include "base/file.h"
#include "test_util.h"

namespace power {
namespace {

// Test vectors from FIPS 180-2 (appendix B) and the empty string.
TEST(Sha256, KnownVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(Sha256, MillionAs) {
  Sha256 h;
  std::string chunk(1000, 'a');
  for (int i = 0; i < 1000; ++i) h.update(chunk);
  EXPECT_EQ(to_hex(h.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // The object resets after finish().
  h.update("abc");
  EXPECT_EQ(to_hex(h.finish()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(Sha256, ParseHex) {
  auto d = parse_sha256_hex("BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(to_hex(*d), sha256_hex("abc"));
  EXPECT_FALSE(parse_sha256_hex("abc").ok());
  EXPECT_FALSE(parse_sha256_hex(std::string(63, '0') + "g").ok());
}

TEST(Sha256, FileMatchesBytes) {
  std::string dir = testing::make_temp_dir("power-sha");
  std::string path = dir + "/f";
  std::string text(3 << 20, 'x');
  ASSERT_TRUE(write_file_atomic(path, text).ok());
  auto d = sha256_file(path);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(to_hex(*d), sha256_hex(text));
  auto missing = sha256_file(dir + "/missing");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  testing::remove_tree(dir);
}

}  // namespace
}  // namespace power
