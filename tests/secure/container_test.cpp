// The encrypted model container (secure/container.h) as hostile input: round trips at the
// sizes around chunk boundaries, every single-byte change of a three-chunk container (header,
// tags and ciphertext), truncation at every length, chunk swaps, duplicates and splices from
// another container, appended bytes, the wrong key; and the file forms: atomic output, the
// input never overwritten, decryption into locked non-dumpable memory that is wiped.
#include "secure/container.h"

#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "base/file.h"
#include "secure_test_util.h"
#include "test_util.h"

namespace power::secure {
namespace {

constexpr uint64_t kSmallChunk = 256;
constexpr size_t kChunkStride = kSmallChunk + kContainerTagBytes;  // one sealed chunk

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

ModelKey new_key() {
  auto k = ModelKey::generate();
  EXPECT_TRUE(k.ok());
  return std::move(*k);
}

std::vector<uint8_t> encrypt(std::span<const uint8_t> plain, const ModelKey& key,
                             uint64_t chunk = kSmallChunk) {
  auto c = encrypt_bytes(plain, key, chunk);
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? std::move(*c) : std::vector<uint8_t>{};
}

class ContainerTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("power-container"); }
  void TearDown() override { testing::remove_tree(dir_); }
  std::string write(const std::string& name, std::span<const uint8_t> bytes) {
    const std::string path = dir_ + "/" + name;
    EXPECT_TRUE(write_file_atomic(path, bytes).ok());
    return path;
  }
  std::string dir_;
};

TEST_F(ContainerTest, RoundTripAtChunkBoundaries) {
  const ModelKey key = new_key();
  for (size_t n : {size_t{0}, size_t{1}, size_t{255}, size_t{256}, size_t{257}, size_t{512},
                   size_t{3 * 256 + 5}, size_t{100000}}) {
    const auto plain = random_bytes(n, static_cast<uint32_t>(n));
    const auto sealed = encrypt(plain, key);
    const uint64_t chunks = n == 0 ? 1 : (n + kSmallChunk - 1) / kSmallChunk;
    EXPECT_EQ(sealed.size(), kContainerPrefixBytes + n + chunks * kContainerTagBytes) << n;
    EXPECT_TRUE(is_container(sealed));
    ContainerInfo info;
    auto back = decrypt_bytes(sealed, key, &info);
    ASSERT_TRUE(back.ok()) << n << ": " << back.status().to_string();
    ASSERT_EQ(back->size(), n);
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), back->data())) << n;
    EXPECT_EQ(info.plaintext_bytes, n);
    EXPECT_EQ(info.chunks, chunks);
    EXPECT_EQ(info.chunk_bytes, kSmallChunk);
    EXPECT_EQ(info.plaintext_sha256, sha256(plain.data(), plain.size()));
    EXPECT_EQ(info.key_id, key.id());
  }
  // The default chunk size (1 MiB) over a multi-chunk input.
  const auto plain = random_bytes((2 << 20) + 3, 7);
  const auto sealed = encrypt(plain, key, kChunkBytesDefault);
  auto back = decrypt_bytes(sealed, key);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_TRUE(std::equal(plain.begin(), plain.end(), back->data()));
}

TEST_F(ContainerTest, EachEncryptionHasItsOwnSalt) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(600, 1);
  const auto a = encrypt(plain, key), b = encrypt(plain, key);
  ASSERT_EQ(a.size(), b.size());
  // Same plaintext and key, yet no ciphertext byte pattern in common beyond chance.
  EXPECT_NE(std::vector<uint8_t>(a.begin() + kContainerPrefixBytes, a.end()),
            std::vector<uint8_t>(b.begin() + kContainerPrefixBytes, b.end()));
}

TEST_F(ContainerTest, ChunkSizeMustBeABoundedPowerOfTwo) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(10, 1);
  for (uint64_t bad : {uint64_t{0}, uint64_t{128}, uint64_t{300}, uint64_t{1} << 31}) {
    auto c = encrypt_bytes(plain, key, bad);
    ASSERT_FALSE(c.ok()) << bad;
    EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
  }
}

// Every byte of a three-chunk container (header, header tag, each chunk's ciphertext and
// tag), changed three ways, is refused; the error class says what was hit.
TEST_F(ContainerTest, EverySingleByteChangeIsDetected) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(2 * kSmallChunk + 100, 3);  // chunks of 256, 256, 100
  const auto sealed = encrypt(plain, key);
  ASSERT_EQ(sealed.size(), kContainerPrefixBytes + plain.size() + 3 * kContainerTagBytes);
  int detected = 0;
  for (size_t pos = 0; pos < sealed.size(); ++pos) {
    for (uint8_t flip : {uint8_t{0x01}, uint8_t{0x80}, uint8_t{0xff}}) {
      auto bad = sealed;
      bad[pos] ^= flip;
      auto r = decrypt_bytes(bad, key);
      ASSERT_FALSE(r.ok()) << "byte " << pos << " ^ " << int(flip) << " went unnoticed";
      ++detected;
      const StatusCode code = r.status().code();
      if (pos < 8) {
        EXPECT_EQ(code, StatusCode::kCorrupt) << pos;  // magic
      } else if (pos < 12) {
        EXPECT_EQ(code, StatusCode::kUnsupported) << pos;  // version
      } else if (pos >= 88 && pos < 104) {
        EXPECT_EQ(code, StatusCode::kInvalidArgument) << pos;  // key id: "wrong key"
      } else {
        EXPECT_EQ(code, StatusCode::kIntegrity) << pos << ": " << r.status().to_string();
      }
    }
  }
  EXPECT_EQ(detected, static_cast<int>(3 * sealed.size()));
  // The file path (which also knows the size up front) refuses a body change the same way.
  auto bad = sealed;
  bad[kContainerPrefixBytes + kChunkStride + 5] ^= 0x20;
  auto m = decrypt_file_to_memory(write("bad.pwenc", bad), key, MemoryLock::kBestEffort);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kIntegrity);
  EXPECT_NE(m.status().to_string().find("chunk=1"), std::string::npos) << m.status().to_string();
}

TEST_F(ContainerTest, TruncationAtEveryLengthIsDetected) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(2 * kSmallChunk + 100, 4);
  const auto sealed = encrypt(plain, key);
  for (size_t len = 0; len < sealed.size(); ++len) {
    auto r = decrypt_bytes(std::span<const uint8_t>(sealed.data(), len), key);
    EXPECT_FALSE(r.ok()) << "truncated to " << len << " bytes went unnoticed";
  }
  // At each chunk boundary, through the file path too.
  for (size_t len : {kContainerPrefixBytes, kContainerPrefixBytes + kChunkStride,
                     kContainerPrefixBytes + 2 * kChunkStride, sealed.size() - 1}) {
    auto m = decrypt_file_to_memory(write("t.pwenc", {sealed.data(), len}), key,
                                    MemoryLock::kBestEffort);
    ASSERT_FALSE(m.ok()) << len;
    EXPECT_EQ(m.status().code(), StatusCode::kIntegrity) << len;
    EXPECT_NE(m.status().message().find("truncated"), std::string::npos) << m.status().to_string();
  }
}

TEST_F(ContainerTest, AppendedBytesAreDetected) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(2 * kSmallChunk + 100, 5);
  const auto sealed = encrypt(plain, key);
  for (size_t extra : {size_t{1}, size_t{16}, kChunkStride}) {
    auto longer = sealed;
    longer.insert(longer.end(), extra, 0);
    auto r = decrypt_bytes(longer, key);
    ASSERT_FALSE(r.ok()) << extra;
    EXPECT_EQ(r.status().code(), StatusCode::kIntegrity);
    auto m = decrypt_file_to_memory(write("x.pwenc", longer), key, MemoryLock::kBestEffort);
    ASSERT_FALSE(m.ok()) << extra;
    EXPECT_EQ(m.status().code(), StatusCode::kIntegrity);
  }
  // A whole extra copy of a full chunk appended: still refused.
  auto dup = sealed;
  dup.insert(dup.end(), sealed.begin() + kContainerPrefixBytes,
             sealed.begin() + kContainerPrefixBytes + kChunkStride);
  EXPECT_FALSE(decrypt_bytes(dup, key).ok());
}

// Reordering, duplicating and dropping whole sealed chunks, and splicing chunks or the header
// from another container made with the same key and plaintext.
TEST_F(ContainerTest, ChunkSwapsAndSplicesAreDetected) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(4 * kSmallChunk, 6);  // four full chunks
  const auto sealed = encrypt(plain, key);
  auto chunk_at = [&](const std::vector<uint8_t>& c, size_t i) {
    return std::vector<uint8_t>(c.begin() + kContainerPrefixBytes + i * kChunkStride,
                                c.begin() + kContainerPrefixBytes + (i + 1) * kChunkStride);
  };
  auto with_chunks = [&](const std::vector<uint8_t>& header_from,
                         const std::vector<std::vector<uint8_t>>& chunks) {
    std::vector<uint8_t> out(header_from.begin(), header_from.begin() + kContainerPrefixBytes);
    for (const auto& ch : chunks) out.insert(out.end(), ch.begin(), ch.end());
    return out;
  };
  const auto c0 = chunk_at(sealed, 0), c1 = chunk_at(sealed, 1), c2 = chunk_at(sealed, 2),
             c3 = chunk_at(sealed, 3);
  ASSERT_TRUE(decrypt_bytes(with_chunks(sealed, {c0, c1, c2, c3}), key).ok());
  const std::vector<std::vector<std::vector<uint8_t>>> bad_orders = {
      {c1, c0, c2, c3}, {c0, c2, c1, c3}, {c0, c1, c3, c2}, {c3, c1, c2, c0},
      {c0, c0, c2, c3}, {c0, c1, c2, c2}, {c0, c1, c3, c3}};
  for (size_t k = 0; k < bad_orders.size(); ++k) {
    auto r = decrypt_bytes(with_chunks(sealed, bad_orders[k]), key);
    ASSERT_FALSE(r.ok()) << "order " << k;
    EXPECT_EQ(r.status().code(), StatusCode::kIntegrity) << k;
  }
  // Dropping a chunk (the header still declares four).
  EXPECT_FALSE(decrypt_bytes(with_chunks(sealed, {c0, c1, c3}), key).ok());
  // Another container of the same plaintext under the same key: its chunks do not fit this
  // header, nor its header these chunks.
  const auto other = encrypt(plain, key);
  const auto o1 = chunk_at(other, 1);
  EXPECT_FALSE(decrypt_bytes(with_chunks(sealed, {c0, o1, c2, c3}), key).ok());
  EXPECT_FALSE(decrypt_bytes(with_chunks(other, {c0, c1, c2, c3}), key).ok());
  // A shorter plaintext's container cannot pose as a prefix (its last chunk is flagged last
  // and its header declares its own size).
  const auto half = encrypt(std::span<const uint8_t>(plain.data(), 2 * kSmallChunk), key);
  EXPECT_FALSE(decrypt_bytes(with_chunks(half, {c0, c1}), key).ok());
}

TEST_F(ContainerTest, WrongKeyIsReportedAsSuch) {
  const ModelKey key = new_key(), other = new_key();
  const auto sealed = encrypt(random_bytes(300, 8), key);
  auto r = decrypt_bytes(sealed, other);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("wrong model key"), std::string::npos);
  EXPECT_NE(r.status().to_string().find(key_id_hex(key.id())), std::string::npos);
  // A plain file is not a container.
  const auto plain = random_bytes(300, 9);
  auto p = decrypt_bytes(plain, key);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kCorrupt);
}

TEST_F(ContainerTest, EncryptFileIsAtomicAndNeverTouchesTheInput) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(5000, 10);
  const std::string in = write("model.gguf", plain);
  const std::string out = dir_ + "/model.pwenc";
  auto info = encrypt_file(in, out, key, 1024);
  ASSERT_TRUE(info.ok()) << info.status().to_string();
  EXPECT_EQ(info->plaintext_bytes, plain.size());
  EXPECT_EQ(info->chunks, 5u);
  EXPECT_EQ(std::filesystem::file_size(out), info->container_bytes);
  EXPECT_EQ(testing::files_under(dir_), (std::set<std::string>{in, out}));  // no temp left
  EXPECT_EQ(testing::read_bytes(in), plain);
  auto verified = verify_container_file(out, key);
  ASSERT_TRUE(verified.ok()) << verified.status().to_string();
  EXPECT_EQ(verified->plaintext_sha256, sha256(plain.data(), plain.size()));
  auto is = is_container_file(out);
  ASSERT_TRUE(is.ok());
  EXPECT_TRUE(*is);
  EXPECT_FALSE(*is_container_file(in));

  // The input as output (same path, or a hard link to it) is refused and left intact.
  auto same = encrypt_file(in, in, key);
  ASSERT_FALSE(same.ok());
  EXPECT_EQ(same.status().code(), StatusCode::kInvalidArgument);
  const std::string link = dir_ + "/link.gguf";
  ASSERT_EQ(::link(in.c_str(), link.c_str()), 0);
  EXPECT_FALSE(encrypt_file(in, link, key).ok());
  EXPECT_EQ(testing::read_bytes(in), plain);
  // Encrypting a container again is refused.
  auto twice = encrypt_file(out, dir_ + "/twice.pwenc", key);
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("already"), std::string::npos);
  // A failed write leaves nothing behind: an output directory that does not exist.
  EXPECT_FALSE(encrypt_file(in, dir_ + "/missing/out.pwenc", key).ok());
  EXPECT_EQ(testing::files_under(dir_), (std::set<std::string>{in, out, link}));
}

// Decryption goes to anonymous memory marked not-dumpable (and locked where RLIMIT_MEMLOCK
// allows), that is wiped when the mapping goes; a failed decryption wipes what it wrote.
TEST_F(ContainerTest, DecryptsIntoLockedNonDumpableMemoryThatIsWiped) {
  const ModelKey key = new_key();
  const auto plain = random_bytes(3 * 4096 + 17, 11);
  const std::string path = write("m.pwenc", encrypt(plain, key, 4096));
  testing::WipeWatcher watcher;
  {
    auto d = decrypt_file_to_memory(path, key, MemoryLock::kBestEffort);
    ASSERT_TRUE(d.ok()) << d.status().to_string();
    const MappedFile& m = d->mapping;
    ASSERT_TRUE(m.is_secure_memory());
    ASSERT_EQ(m.size(), plain.size());
    EXPECT_TRUE(std::equal(plain.begin(), plain.end(), m.data()));
    EXPECT_EQ(m.path(), path);
    const std::string flags = testing::vm_flags_of(m.data());
    ASSERT_FALSE(flags.empty());
    EXPECT_TRUE(testing::has_vm_flag(flags, "dd")) << flags;  // MADV_DONTDUMP
    EXPECT_EQ(testing::has_vm_flag(flags, "lo"), m.is_locked()) << flags;
    EXPECT_FALSE(testing::has_vm_flag(flags, "wr")) << flags;  // sealed read-only
    // Nothing of the file stays open or mapped.
    for (const auto& p : testing::open_file_targets()) EXPECT_NE(p, path);
    for (const auto& p : testing::mapped_paths()) EXPECT_NE(p, path);
    EXPECT_EQ(watcher.wipes_of("weights"), 0);
  }
  EXPECT_EQ(watcher.wipes_of("weights"), 1);
  EXPECT_EQ(watcher.allocations("file key"), watcher.wipes_of("file key"));
  EXPECT_TRUE(watcher.all_wipes_zero());
  bool weights_size_seen = false;
  for (const auto& w : watcher.wipes()) weights_size_seen |= w.size_bytes == plain.size();
  EXPECT_TRUE(weights_size_seen);

  // Tampering in the last chunk: the first chunks were decrypted into the buffer, and the
  // failure wipes all of it.
  auto bad = testing::read_bytes(path);
  bad[bad.size() - 20] ^= 1;
  const std::string bad_path = write("bad.pwenc", bad);
  const int before = watcher.wipes_of("weights");
  auto d = decrypt_file_to_memory(bad_path, key, MemoryLock::kBestEffort);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(watcher.wipes_of("weights"), before + 1);
  EXPECT_TRUE(watcher.all_wipes_zero());
}

}  // namespace
}  // namespace power::secure
