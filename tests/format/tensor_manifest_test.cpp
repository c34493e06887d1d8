// Per-tensor hash manifests (format/tensor_manifest.h): the digests are the SHA-256 of each
// tensor's bytes as they lie in the file (read back here with plain file reads), the pread and
// mapping paths agree, the cache is written once and then read, and a cache that does not
// describe the file (another artifact, a changed table, a damaged digest, bad JSON) is hashed
// again and rewritten.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/sha256.h"
#include "format/gguf.h"
#include "format/tensor_manifest.h"
#include "test_util.h"

namespace power {
namespace {

using json = nlohmann::json;

std::vector<uint8_t> Pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(seed * 31 + i * 7 + (i >> 9));
  return v;
}

std::string FileBytes(const std::string& path, uint64_t offset, uint64_t n) {
  std::ifstream in(path, std::ios::binary);
  in.seekg(static_cast<std::streamoff>(offset));
  std::string s(n, '\0');
  in.read(s.data(), static_cast<std::streamsize>(n));
  EXPECT_EQ(static_cast<uint64_t>(in.gcount()), n);
  return s;
}

class TensorManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir("power_tensor_manifest");
    path_ = dir_ + "/m.gguf";
    GgufWriter w;
    w.set("general.architecture", GgufValue::str("llama"));
    // A tensor over the 4 MiB read chunk, one of an odd size, and a quantized one.
    ASSERT_TRUE(w.add_tensor("blk.0.ffn_up.weight", GgmlType::F32, {1024, 1100},
                             Pattern(1024 * 1100 * 4, 1))
                    .ok());
    ASSERT_TRUE(w.add_tensor("a_norm", GgmlType::F32, {3}, Pattern(12, 2)).ok());
    ASSERT_TRUE(w.add_tensor("q", GgmlType::Q8_0, {64, 2}, Pattern(2 * 2 * 34, 3)).ok());
    ASSERT_TRUE(w.write(path_).ok());
    auto f = GgufFile::open(path_);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    file_ = std::move(*f);
    auto d = sha256_file(path_);
    ASSERT_TRUE(d.ok());
    digest_ = to_hex(*d);
  }
  void TearDown() override { testing::remove_tree(dir_); }

  std::string dir_, path_, digest_;
  std::unique_ptr<GgufFile> file_;
};

TEST_F(TensorManifestTest, DigestsAreTheSha256OfEachTensorsFileBytes) {
  auto by_pread = hash_tensors(*file_, path_, digest_);
  auto by_map = hash_tensors(*file_, "", digest_);
  ASSERT_TRUE(by_pread.ok()) << by_pread.status().to_string();
  ASSERT_TRUE(by_map.ok());
  ASSERT_EQ(by_pread->tensors.size(), 3u);
  EXPECT_EQ(by_pread->artifact_sha256, digest_);
  for (size_t i = 0; i < 3; ++i) {
    const TensorDigest& t = by_pread->tensors[i];
    const GgufTensor& g = file_->tensors()[i];
    EXPECT_EQ(t.name, g.name);
    EXPECT_EQ(t.type, g.type);
    EXPECT_EQ(t.ne, g.ne);
    EXPECT_EQ(t.offset, g.file_offset);
    EXPECT_EQ(t.length, g.n_bytes);
    EXPECT_EQ(t.sha256, sha256_hex(FileBytes(path_, t.offset, t.length))) << t.name;
    EXPECT_EQ(t.sha256, by_map->tensors[i].sha256);
  }
  EXPECT_EQ(by_pread->tensors[0].length, 1024u * 1100 * 4);
  EXPECT_EQ(by_pread->tensors[2].length, 2u * 2 * 34);
  // Damage one byte of the file: only that tensor's digest changes.
  {
    std::fstream f(path_, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(by_pread->tensors[1].offset + 5));
    f.put('\x55');
  }
  auto again = hash_tensors(*file_, path_, digest_);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->tensors[0].sha256, by_pread->tensors[0].sha256);
  EXPECT_NE(again->tensors[1].sha256, by_pread->tensors[1].sha256);
  EXPECT_EQ(again->tensors[2].sha256, by_pread->tensors[2].sha256);
}

TEST_F(TensorManifestTest, TheCacheIsWrittenOnceThenRead) {
  const std::string cache = dir_ + "/tensors";
  TensorManifestSource src;
  auto first = load_or_hash_tensors(*file_, path_, digest_, cache, &src);
  ASSERT_TRUE(first.ok()) << first.status().to_string();
  EXPECT_FALSE(src.from_cache);
  EXPECT_TRUE(src.written);
  const std::string cached = tensor_manifest_path(cache, digest_);
  EXPECT_EQ(cached, cache + "/sha256-" + digest_ + ".json");
  auto text = read_file_text(cached);
  ASSERT_TRUE(text.ok());
  const json j = json::parse(*text);
  EXPECT_EQ(j["schema"], "power.tensor-manifest/1");
  EXPECT_EQ(j["artifact_sha256"], digest_);
  EXPECT_EQ(j["tensors"].size(), 3u);
  EXPECT_EQ(j["tensors"][2]["type"], "Q8_0");
  EXPECT_EQ(j["tensors_digest"], sha256_hex(j["tensors"].dump()));

  auto second = load_or_hash_tensors(*file_, path_, digest_, cache, &src);
  ASSERT_TRUE(second.ok());
  EXPECT_TRUE(src.from_cache);
  EXPECT_FALSE(src.written);
  ASSERT_EQ(second->tensors.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(second->tensors[i].sha256, first->tensors[i].sha256);

  // No cache directory: hashed, nothing written.
  auto none = load_or_hash_tensors(*file_, path_, digest_, "", &src);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(src.from_cache);
  EXPECT_FALSE(src.written);
  // A cache directory that cannot be made (a file is in the way): hashed, not an error.
  ASSERT_TRUE(write_file_atomic(dir_ + "/blocked", std::string_view("x")).ok());
  auto blocked = load_or_hash_tensors(*file_, path_, digest_, dir_ + "/blocked/tensors", &src);
  ASSERT_TRUE(blocked.ok()) << blocked.status().to_string();
  EXPECT_FALSE(src.written);
  EXPECT_EQ(blocked->tensors[0].sha256, first->tensors[0].sha256);
}

TEST_F(TensorManifestTest, ACacheThatDoesNotDescribeTheFileIsHashedAgain) {
  const std::string cache = dir_ + "/tensors";
  auto good = load_or_hash_tensors(*file_, path_, digest_, cache);
  ASSERT_TRUE(good.ok());
  const std::string cached = tensor_manifest_path(cache, digest_);
  const std::string good_text = *read_file_text(cached);
  const json j = json::parse(good_text);
  auto with_digest = [](json m) {
    m["tensors_digest"] = sha256_hex(m["tensors"].dump());
    return m.dump();
  };
  json wrong_artifact = j;
  wrong_artifact["artifact_sha256"] = std::string(64, 'a');
  json moved = j;
  moved["tensors"][1]["offset"] = moved["tensors"][1]["offset"].get<uint64_t>() + 32;
  json renamed = j;
  renamed["tensors"][0]["name"] = "blk.0.ffn_down.weight";
  json missing = j;
  missing["tensors"].erase(2);
  json not_hex = j;
  not_hex["tensors"][0]["sha256"] = std::string(64, 'G');
  std::string flipped = good_text;  // one digest character changed, tensors_digest not
  const size_t at = flipped.find(j["tensors"][1]["sha256"].get<std::string>());
  ASSERT_NE(at, std::string::npos);
  flipped[at] = flipped[at] == '0' ? '1' : '0';
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"another artifact", wrong_artifact.dump()},
      {"a moved tensor", with_digest(moved)},
      {"a renamed tensor", with_digest(renamed)},
      {"a missing tensor", with_digest(missing)},
      {"a digest that is not hex", with_digest(not_hex)},
      {"a changed digest", flipped},
      {"not JSON", "{\"schema\": "},
      {"another schema",
       [&] {
         json o = j;
         o["schema"] = "power.tensor-manifest/2";
         return o.dump();
       }()},
  };
  for (const auto& [what, text] : cases) {
    SCOPED_TRACE(what);
    auto parsed = parse_tensor_manifest(text, *file_, digest_);
    EXPECT_EQ(parsed.status().code(), StatusCode::kCorrupt);
    ASSERT_TRUE(write_file_atomic(cached, std::string_view(text)).ok());
    TensorManifestSource src;
    auto m = load_or_hash_tensors(*file_, path_, digest_, cache, &src);
    ASSERT_TRUE(m.ok());
    EXPECT_FALSE(src.from_cache);
    EXPECT_TRUE(src.written);
    for (size_t i = 0; i < 3; ++i) EXPECT_EQ(m->tensors[i].sha256, good->tensors[i].sha256);
    EXPECT_EQ(*read_file_text(cached), good_text);  // rewritten
  }
  // The good text parses, and only for its own artifact.
  EXPECT_TRUE(parse_tensor_manifest(good_text, *file_, digest_).ok());
  EXPECT_FALSE(parse_tensor_manifest(good_text, *file_, std::string(64, 'b')).ok());
}

TEST_F(TensorManifestTest, AnUnreadableFileIsAnError) {
  auto m = hash_tensors(*file_, dir_ + "/absent.gguf", digest_);
  EXPECT_EQ(m.status().code(), StatusCode::kIo);
  // Truncated after it was opened: the read comes up short.
  ASSERT_EQ(::truncate(path_.c_str(), 1000), 0);
  auto short_read = hash_tensors(*file_, path_, digest_);
  EXPECT_EQ(short_read.status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace power
