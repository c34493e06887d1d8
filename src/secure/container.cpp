#include "secure/container.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <random>

#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>

namespace power::secure {
namespace {

// Header field offsets (docs/CONFIDENTIAL.md has the same table).
constexpr size_t kOffMagic = 0;
constexpr size_t kOffVersion = 8;      // u32 LE
constexpr size_t kOffAlgorithm = 12;   // u8: 1 = AES-256-GCM, HKDF-SHA256 file key
constexpr size_t kOffChunkLog2 = 13;   // u8
constexpr size_t kOffReserved0 = 14;   // 2 zero bytes
constexpr size_t kOffPlainBytes = 16;  // u64 LE
constexpr size_t kOffPlainSha = 24;    // 32 bytes
constexpr size_t kOffSalt = 56;        // 32 bytes
constexpr size_t kOffKeyId = 88;       // 16 bytes
constexpr size_t kOffReserved1 = 104;  // 24 zero bytes to the end of the header
constexpr uint8_t kAlgorithmAes256GcmHkdf = 1;
constexpr size_t kSaltBytes = 32;
constexpr size_t kNonceBytes = 12;
constexpr size_t kAadBytes = 32 + 8 + 1;
// Plaintexts up to 2^56 bytes: sizes and offsets below never overflow 64 bits.
constexpr uint64_t kMaxPlaintextBytes = uint64_t{1} << 56;
constexpr const char* kFileKeyInfo = "power-enc-v1 file key";

using Header = std::array<uint8_t, kContainerHeaderBytes>;
using Tag = std::array<uint8_t, kContainerTagBytes>;
using Nonce = std::array<uint8_t, kNonceBytes>;

void put_u32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put_u64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get_u32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
uint64_t get_u64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}
void put_be64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (56 - 8 * i));
}

// Domain 0: chunks (index = chunk number); domain 1: the header tag (index 0).
Nonce make_nonce(uint8_t domain, uint64_t index) {
  Nonce n{};
  n[0] = domain;
  put_be64(n.data() + 4, index);
  return n;
}

uint64_t chunk_count(uint64_t plaintext_bytes, uint64_t chunk_bytes) {
  return plaintext_bytes == 0 ? 1 : (plaintext_bytes + chunk_bytes - 1) / chunk_bytes;
}

uint64_t container_size(uint64_t plaintext_bytes, uint64_t chunk_bytes) {
  return kContainerPrefixBytes + plaintext_bytes +
         chunk_count(plaintext_bytes, chunk_bytes) * kContainerTagBytes;
}

Result<uint32_t> chunk_log2_of(uint64_t chunk_bytes) {
  for (uint32_t l = kChunkLog2Min; l <= kChunkLog2Max; ++l) {
    if (chunk_bytes == (uint64_t{1} << l)) return l;
  }
  return Status(StatusCode::kInvalidArgument,
                fmt::format("the chunk size must be a power of two from {} to {} bytes",
                            uint64_t{1} << kChunkLog2Min, uint64_t{1} << kChunkLog2Max))
      .with("chunk_bytes", chunk_bytes);
}

// The per-file key, in locked memory like the model key it comes from.
Result<LockedBuffer> derive_file_key(const ModelKey& key, const uint8_t* salt) {
  POWER_ASSIGN_OR_RETURN(LockedBuffer out,
                         LockedBuffer::allocate(32, MemoryLock::kBestEffort, "file key"));
  std::unique_ptr<EVP_PKEY_CTX, decltype(&EVP_PKEY_CTX_free)> ctx(
      EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, nullptr), EVP_PKEY_CTX_free);
  size_t n = out.size();
  const auto* info = reinterpret_cast<const unsigned char*>(kFileKeyInfo);
  if (ctx == nullptr || EVP_PKEY_derive_init(ctx.get()) <= 0 ||
      EVP_PKEY_CTX_set_hkdf_md(ctx.get(), EVP_sha256()) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_salt(ctx.get(), salt, static_cast<int>(kSaltBytes)) <= 0 ||
      EVP_PKEY_CTX_set1_hkdf_key(ctx.get(), key.bytes().data(),
                                 static_cast<int>(key.bytes().size())) <= 0 ||
      EVP_PKEY_CTX_add1_hkdf_info(ctx.get(), info, static_cast<int>(std::strlen(kFileKeyInfo))) <=
          0 ||
      EVP_PKEY_derive(ctx.get(), out.data(), &n) <= 0 || n != out.size()) {
    return Status(StatusCode::kInternal, "HKDF-SHA256 (OpenSSL) failed");
  }
  out.seal();
  return out;
}

// AES-256-GCM with one key for many messages (the key schedule is set once; each message sets
// its nonce). The OpenSSL context wipes its key schedule when freed.
class Gcm {
 public:
  Gcm(bool encrypt, std::span<const uint8_t> key)
      : ctx_(EVP_CIPHER_CTX_new(), EVP_CIPHER_CTX_free), encrypt_(encrypt) {
    ok_ = ctx_ != nullptr && EVP_CipherInit_ex(ctx_.get(), EVP_aes_256_gcm(), nullptr, key.data(),
                                               nullptr, encrypt ? 1 : 0) == 1;
  }
  bool ok() const { return ok_; }

  // Encrypts in -> out (same length) and writes the tag.
  bool seal(const Nonce& nonce, std::span<const uint8_t> aad, std::span<const uint8_t> in,
            uint8_t* out, uint8_t* tag) {
    int n = 0;
    if (!start(nonce, aad)) return false;
    if (!in.empty() &&
        EVP_EncryptUpdate(ctx_.get(), out, &n, in.data(), static_cast<int>(in.size())) != 1) {
      return false;
    }
    uint8_t none = 0;  // GCM's final step writes no bytes; out may be null for a tag-only call
    if (EVP_EncryptFinal_ex(ctx_.get(), in.empty() ? &none : out + n, &n) != 1) return false;
    return EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_GET_TAG, kContainerTagBytes, tag) == 1;
  }

  // Decrypts in -> out and checks the tag; false when authentication fails (out then holds
  // unauthenticated bytes the caller must wipe).
  bool open(const Nonce& nonce, std::span<const uint8_t> aad, std::span<const uint8_t> in,
            uint8_t* out, const uint8_t* tag) {
    int n = 0;
    if (!start(nonce, aad)) return false;
    if (!in.empty() &&
        EVP_DecryptUpdate(ctx_.get(), out, &n, in.data(), static_cast<int>(in.size())) != 1) {
      return false;
    }
    if (EVP_CIPHER_CTX_ctrl(ctx_.get(), EVP_CTRL_GCM_SET_TAG, kContainerTagBytes,
                            const_cast<uint8_t*>(tag)) != 1) {
      return false;
    }
    uint8_t none = 0;
    return EVP_DecryptFinal_ex(ctx_.get(), in.empty() ? &none : out + n, &n) == 1;
  }

 private:
  bool start(const Nonce& nonce, std::span<const uint8_t> aad) {
    int n = 0;
    if (EVP_CipherInit_ex(ctx_.get(), nullptr, nullptr, nullptr, nonce.data(), encrypt_ ? 1 : 0) !=
        1) {
      return false;
    }
    return aad.empty() ||
           EVP_CipherUpdate(ctx_.get(), nullptr, &n, aad.data(), static_cast<int>(aad.size())) == 1;
  }

  std::unique_ptr<EVP_CIPHER_CTX, decltype(&EVP_CIPHER_CTX_free)> ctx_;
  bool encrypt_ = false;
  bool ok_ = false;
};

std::array<uint8_t, kAadBytes> chunk_aad(const Sha256Digest& header_digest, uint64_t index,
                                         bool last) {
  std::array<uint8_t, kAadBytes> aad{};
  std::memcpy(aad.data(), header_digest.data(), header_digest.size());
  put_be64(aad.data() + 32, index);
  aad[40] = last ? 1 : 0;
  return aad;
}

Sha256Digest header_digest_of(const Header& header, const Tag& tag) {
  Sha256 h;
  h.update(header.data(), header.size());
  h.update(tag.data(), tag.size());
  return h.finish();
}

// A source of container or plaintext bytes: a file descriptor or a span.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  // Fills up to n bytes; fewer only at the end of the input.
  virtual Result<size_t> read(uint8_t* dst, size_t n) = 0;
};

class FdSource : public ByteSource {
 public:
  FdSource(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  Result<size_t> read(uint8_t* dst, size_t n) override {
    size_t got = 0;
    while (got < n) {
      ssize_t r = ::read(fd_, dst + got, n - got);
      if (r < 0) {
        if (errno == EINTR) continue;
        return Status(StatusCode::kIo, fmt::format("read failed: {}", std::strerror(errno)))
            .with("path", path_);
      }
      if (r == 0) break;
      got += static_cast<size_t>(r);
    }
    return got;
  }

 private:
  int fd_;
  std::string path_;
};

class SpanSource : public ByteSource {
 public:
  explicit SpanSource(std::span<const uint8_t> bytes) : bytes_(bytes) {}
  Result<size_t> read(uint8_t* dst, size_t n) override {
    const size_t k = std::min(n, bytes_.size() - pos_);
    if (k > 0) std::memcpy(dst, bytes_.data() + pos_, k);
    pos_ += k;
    return k;
  }

 private:
  std::span<const uint8_t> bytes_;
  size_t pos_ = 0;
};

struct OpenedHeader {
  ContainerInfo info;
  Sha256Digest header_digest{};
  LockedBuffer file_key;
};

// Reads the 144-byte prefix and authenticates it. The order of the checks decides the error a
// user sees: not a container, a later version, the wrong key, then tampering; fields are only
// interpreted once the header tag holds.
Result<OpenedHeader> open_header(ByteSource& src, const ModelKey& key) {
  std::array<uint8_t, kContainerPrefixBytes> prefix{};
  POWER_ASSIGN_OR_RETURN(size_t got, src.read(prefix.data(), prefix.size()));
  if (got < kContainerMagic.size() ||
      std::memcmp(prefix.data() + kOffMagic, kContainerMagic.data(), kContainerMagic.size()) != 0) {
    return Status(StatusCode::kCorrupt, "not an encrypted Power container (bad magic)");
  }
  if (got < prefix.size()) {
    return Status(StatusCode::kIntegrity, "the container is truncated inside its header")
        .with("bytes", got);
  }
  const uint32_t version = get_u32(prefix.data() + kOffVersion);
  if (version != kContainerVersion) {
    return Status(StatusCode::kUnsupported, "unsupported encrypted container version")
        .with("version", version)
        .with("supported", kContainerVersion);
  }
  KeyId stored{};
  std::memcpy(stored.data(), prefix.data() + kOffKeyId, stored.size());
  if (stored != key.id()) {
    return Status(StatusCode::kInvalidArgument,
                  "wrong model key: the container was encrypted with a different key")
        .with("container_key_id", key_id_hex(stored))
        .with("given_key_id", key_id_hex(key.id()));
  }
  OpenedHeader h;
  POWER_ASSIGN_OR_RETURN(h.file_key, derive_file_key(key, prefix.data() + kOffSalt));
  Header header{};
  Tag tag{};
  std::memcpy(header.data(), prefix.data(), header.size());
  std::memcpy(tag.data(), prefix.data() + kContainerHeaderBytes, tag.size());
  Gcm gcm(true, h.file_key.bytes());
  Tag expect{};
  if (!gcm.ok() || !gcm.seal(make_nonce(1, 0), header, {}, nullptr, expect.data())) {
    return Status(StatusCode::kInternal, "AES-256-GCM (OpenSSL) failed");
  }
  if (CRYPTO_memcmp(expect.data(), tag.data(), tag.size()) != 0) {
    return Status(StatusCode::kIntegrity,
                  "the encrypted container's header fails authentication (tampered or corrupt)");
  }
  const uint8_t algorithm = header[kOffAlgorithm];
  const uint32_t chunk_log2 = header[kOffChunkLog2];
  bool reserved_zero = header[kOffReserved0] == 0 && header[kOffReserved0 + 1] == 0;
  for (size_t i = kOffReserved1; i < kContainerHeaderBytes; ++i) reserved_zero &= header[i] == 0;
  h.info.plaintext_bytes = get_u64(header.data() + kOffPlainBytes);
  if (algorithm != kAlgorithmAes256GcmHkdf || chunk_log2 < kChunkLog2Min ||
      chunk_log2 > kChunkLog2Max || !reserved_zero || h.info.plaintext_bytes > kMaxPlaintextBytes) {
    return Status(StatusCode::kCorrupt, "the encrypted container's header has invalid fields")
        .with("algorithm", algorithm)
        .with("chunk_log2", chunk_log2)
        .with("plaintext_bytes", h.info.plaintext_bytes);
  }
  h.info.chunk_bytes = uint64_t{1} << chunk_log2;
  h.info.chunks = chunk_count(h.info.plaintext_bytes, h.info.chunk_bytes);
  h.info.container_bytes = container_size(h.info.plaintext_bytes, h.info.chunk_bytes);
  std::memcpy(h.info.plaintext_sha256.data(), header.data() + kOffPlainSha, 32);
  h.info.key_id = stored;
  h.header_digest = header_digest_of(header, tag);
  return h;
}

Status size_mismatch(uint64_t actual, uint64_t expected) {
  if (actual < expected) {
    return Status(StatusCode::kIntegrity,
                  "the encrypted container is truncated (its header declares more chunks)")
        .with("bytes", actual)
        .with("expected_bytes", expected);
  }
  return Status(StatusCode::kIntegrity, "bytes follow the encrypted container's last chunk")
      .with("bytes", actual)
      .with("expected_bytes", expected);
}

// Where chunk plaintext goes: a span of n bytes for plaintext offset `offset`.
using PlaintextDest =
    std::function<Result<std::span<uint8_t>>(const ContainerInfo&, uint64_t offset, size_t n)>;

// Streams the chunks after the header. known_bytes: the container's size when the source
// knows it (a file), so a truncated or extended file is refused before any allocation.
Result<ContainerInfo> decrypt_stream(ByteSource& src, const ModelKey& key,
                                     std::optional<uint64_t> known_bytes,
                                     const PlaintextDest& dest) {
  POWER_ASSIGN_OR_RETURN(OpenedHeader h, open_header(src, key));
  const ContainerInfo& info = h.info;
  if (known_bytes && *known_bytes != info.container_bytes) {
    return size_mismatch(*known_bytes, info.container_bytes);
  }
  Gcm gcm(false, h.file_key.bytes());
  if (!gcm.ok()) return Status(StatusCode::kInternal, "AES-256-GCM (OpenSSL) failed");
  std::vector<uint8_t> sealed(
      static_cast<size_t>(std::min(info.chunk_bytes, info.plaintext_bytes)) + kContainerTagBytes);
  Sha256 hash;
  for (uint64_t i = 0; i < info.chunks; ++i) {
    const bool last = i + 1 == info.chunks;
    const uint64_t offset = i * info.chunk_bytes;
    const size_t n = static_cast<size_t>(last ? info.plaintext_bytes - offset : info.chunk_bytes);
    POWER_ASSIGN_OR_RETURN(size_t got, src.read(sealed.data(), n + kContainerTagBytes));
    if (got < n + kContainerTagBytes) {
      return Status(StatusCode::kIntegrity, "the encrypted container is truncated")
          .with("chunk", i)
          .with("chunks", info.chunks);
    }
    POWER_ASSIGN_OR_RETURN(std::span<uint8_t> out, dest(info, offset, n));
    const auto aad = chunk_aad(h.header_digest, i, last);
    if (!gcm.open(make_nonce(0, i), aad, {sealed.data(), n}, out.data(), sealed.data() + n)) {
      secure_wipe(out.data(), out.size());
      return Status(StatusCode::kIntegrity,
                    "an encrypted container chunk fails authentication (tampered, reordered, "
                    "truncated or from another container)")
          .with("chunk", i)
          .with("chunks", info.chunks)
          .with("offset", kContainerPrefixBytes + offset + i * kContainerTagBytes);
    }
    hash.update(out.data(), out.size());
  }
  uint8_t extra = 0;
  POWER_ASSIGN_OR_RETURN(size_t trailing, src.read(&extra, 1));
  if (trailing != 0) {
    return Status(StatusCode::kIntegrity, "bytes follow the encrypted container's last chunk");
  }
  if (hash.finish() != info.plaintext_sha256) {
    return Status(StatusCode::kIntegrity,
                  "the decrypted plaintext's SHA-256 differs from the container header's");
  }
  return info;
}

// Streams a plaintext of plaintext_bytes whose SHA-256 is `sha` into a container, calling
// `write` for each piece. The input is hashed again on the way and must match (a file that
// changes between the two passes is refused).
Result<ContainerInfo> encrypt_stream(ByteSource& in, uint64_t plaintext_bytes,
                                     const Sha256Digest& sha, const ModelKey& key,
                                     uint64_t chunk_bytes,
                                     const std::function<Status(std::span<const uint8_t>)>& write) {
  POWER_ASSIGN_OR_RETURN(uint32_t chunk_log2, chunk_log2_of(chunk_bytes));
  if (plaintext_bytes > kMaxPlaintextBytes) {
    return Status(StatusCode::kInvalidArgument, "the input is too large to encrypt")
        .with("bytes", plaintext_bytes);
  }
  Header header{};
  std::memcpy(header.data() + kOffMagic, kContainerMagic.data(), kContainerMagic.size());
  put_u32(header.data() + kOffVersion, kContainerVersion);
  header[kOffAlgorithm] = kAlgorithmAes256GcmHkdf;
  header[kOffChunkLog2] = static_cast<uint8_t>(chunk_log2);
  put_u64(header.data() + kOffPlainBytes, plaintext_bytes);
  std::memcpy(header.data() + kOffPlainSha, sha.data(), sha.size());
  if (RAND_bytes(header.data() + kOffSalt, static_cast<int>(kSaltBytes)) != 1) {
    return Status(StatusCode::kInternal, "the OpenSSL random generator failed");
  }
  std::memcpy(header.data() + kOffKeyId, key.id().data(), key.id().size());
  POWER_ASSIGN_OR_RETURN(LockedBuffer file_key, derive_file_key(key, header.data() + kOffSalt));
  Gcm gcm(true, file_key.bytes());
  Tag tag{};
  if (!gcm.ok() || !gcm.seal(make_nonce(1, 0), header, {}, nullptr, tag.data())) {
    return Status(StatusCode::kInternal, "AES-256-GCM (OpenSSL) failed");
  }
  POWER_RETURN_IF_ERROR(write(header));
  POWER_RETURN_IF_ERROR(write(tag));
  const Sha256Digest header_digest = header_digest_of(header, tag);

  ContainerInfo info;
  info.plaintext_bytes = plaintext_bytes;
  info.plaintext_sha256 = sha;
  info.chunk_bytes = chunk_bytes;
  info.chunks = chunk_count(plaintext_bytes, chunk_bytes);
  info.key_id = key.id();
  info.container_bytes = container_size(plaintext_bytes, chunk_bytes);
  const size_t buf_bytes = static_cast<size_t>(std::min(chunk_bytes, plaintext_bytes));
  // The plaintext chunk: locked like any decrypted copy, although the input file is plaintext.
  POWER_ASSIGN_OR_RETURN(
      LockedBuffer plain,
      LockedBuffer::allocate(buf_bytes, MemoryLock::kBestEffort, "plaintext chunk"));
  std::vector<uint8_t> sealed(buf_bytes + kContainerTagBytes);
  Sha256 hash;
  for (uint64_t i = 0; i < info.chunks; ++i) {
    const bool last = i + 1 == info.chunks;
    const uint64_t offset = i * chunk_bytes;
    const size_t n = static_cast<size_t>(last ? plaintext_bytes - offset : chunk_bytes);
    POWER_ASSIGN_OR_RETURN(size_t got, in.read(plain.data(), n));
    if (got != n) {
      return Status(StatusCode::kIo, "the input shrank while it was being encrypted")
          .with("offset", offset + got);
    }
    hash.update(plain.data(), n);
    const auto aad = chunk_aad(header_digest, i, last);
    if (!gcm.seal(make_nonce(0, i), aad, {plain.data(), n}, sealed.data(), sealed.data() + n)) {
      return Status(StatusCode::kInternal, "AES-256-GCM (OpenSSL) failed");
    }
    POWER_RETURN_IF_ERROR(write({sealed.data(), n + kContainerTagBytes}));
  }
  uint8_t extra = 0;
  POWER_ASSIGN_OR_RETURN(size_t more, in.read(&extra, 1));
  if (more != 0 || hash.finish() != sha) {
    return Status(StatusCode::kIo, "the input changed while it was being encrypted");
  }
  return info;
}

Status errno_status(std::string_view what, const std::string& path) {
  const int err = errno;
  return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kIo,
                fmt::format("{}: {}", what, std::strerror(err)))
      .with("path", path);
}

Status write_all(int fd, std::span<const uint8_t> bytes, const std::string& path) {
  const uint8_t* p = bytes.data();
  size_t n = bytes.size();
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status("write failed", path);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status();
}

Result<UniqueFd> open_regular(const std::string& path, struct stat* st) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno_status("cannot open", path);
  if (::fstat(fd.get(), st) != 0) return errno_status("cannot stat", path);
  if (!S_ISREG(st->st_mode)) {
    return Status(StatusCode::kInvalidArgument, "not a regular file").with("path", path);
  }
  return fd;
}

}  // namespace

bool is_container(std::span<const uint8_t> prefix) {
  return prefix.size() >= kContainerMagic.size() &&
         std::memcmp(prefix.data(), kContainerMagic.data(), kContainerMagic.size()) == 0;
}

Result<bool> is_container_file(const std::string& path) {
  struct stat st {};
  POWER_ASSIGN_OR_RETURN(UniqueFd fd, open_regular(path, &st));
  std::array<uint8_t, kContainerMagic.size()> magic{};
  FdSource src(fd.get(), path);
  POWER_ASSIGN_OR_RETURN(size_t got, src.read(magic.data(), magic.size()));
  return is_container({magic.data(), got});
}

Result<ContainerInfo> encrypt_file(const std::string& in, const std::string& out,
                                   const ModelKey& key, uint64_t chunk_bytes) {
  POWER_RETURN_IF_ERROR(chunk_log2_of(chunk_bytes).status());
  struct stat in_st {};
  POWER_ASSIGN_OR_RETURN(UniqueFd in_fd, open_regular(in, &in_st));
  struct stat out_st {};
  if (::stat(out.c_str(), &out_st) == 0 && out_st.st_dev == in_st.st_dev &&
      out_st.st_ino == in_st.st_ino) {
    return Status(StatusCode::kInvalidArgument, "the output would overwrite the input")
        .with("path", in);
  }
  // First pass: the plaintext digest, which the header carries.
  FdSource src(in_fd.get(), in);
  std::array<uint8_t, kContainerMagic.size()> magic{};
  POWER_ASSIGN_OR_RETURN(size_t magic_got, src.read(magic.data(), magic.size()));
  if (is_container({magic.data(), magic_got})) {
    return Status(StatusCode::kInvalidArgument, "the input is already an encrypted container")
        .with("path", in);
  }
  Sha256 hash;
  hash.update(magic.data(), magic_got);
  std::vector<uint8_t> buf(1 << 20);
  uint64_t plaintext_bytes = magic_got;
  for (;;) {
    POWER_ASSIGN_OR_RETURN(size_t got, src.read(buf.data(), buf.size()));
    hash.update(buf.data(), got);
    plaintext_bytes += got;
    if (got < buf.size()) break;
  }
  secure_wipe(buf.data(), buf.size());
  const Sha256Digest sha = hash.finish();
  if (::lseek(in_fd.get(), 0, SEEK_SET) != 0) return errno_status("cannot seek", in);

  std::random_device rd;
  const std::string tmp = fmt::format("{}.tmp-{}-{:x}", out, ::getpid(), rd());
  UniqueFd out_fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!out_fd.valid()) return errno_status("cannot create temporary file", tmp);
  auto info =
      encrypt_stream(src, plaintext_bytes, sha, key, chunk_bytes,
                     [&](std::span<const uint8_t> b) { return write_all(out_fd.get(), b, tmp); });
  Status st = info.status();
  if (st.ok() && ::fsync(out_fd.get()) != 0) st = errno_status("fsync failed", tmp);
  out_fd.reset();
  if (st.ok()) st = rename_durable(tmp, out);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return info;
}

Result<DecryptedContainer> decrypt_file_to_memory(const std::string& path, const ModelKey& key,
                                                  MemoryLock lock) {
  struct stat st {};
  POWER_ASSIGN_OR_RETURN(UniqueFd fd, open_regular(path, &st));
  FdSource src(fd.get(), path);
  LockedBuffer plain;
  auto info = decrypt_stream(
      src, key, static_cast<uint64_t>(st.st_size),
      [&](const ContainerInfo& ci, uint64_t offset, size_t n) -> Result<std::span<uint8_t>> {
        if (offset == 0) {
          POWER_ASSIGN_OR_RETURN(
              plain,
              LockedBuffer::allocate(static_cast<size_t>(ci.plaintext_bytes), lock, "weights"));
        }
        return std::span<uint8_t>(plain.data() + offset, n);
      });
  if (!info.ok()) return std::move(info).take_status().with("path", path);
  DecryptedContainer d;
  d.info = *info;
  d.mapping = MappedFile::adopt(std::move(plain), path);
  return d;
}

Result<ContainerInfo> verify_container_file(const std::string& path, const ModelKey& key) {
  struct stat st {};
  POWER_ASSIGN_OR_RETURN(UniqueFd fd, open_regular(path, &st));
  FdSource src(fd.get(), path);
  LockedBuffer scratch;
  auto info = decrypt_stream(
      src, key, static_cast<uint64_t>(st.st_size),
      [&](const ContainerInfo& ci, uint64_t offset, size_t n) -> Result<std::span<uint8_t>> {
        if (offset == 0) {
          POWER_ASSIGN_OR_RETURN(
              scratch, LockedBuffer::allocate(
                           static_cast<size_t>(std::min(ci.chunk_bytes, ci.plaintext_bytes)),
                           MemoryLock::kBestEffort, "plaintext chunk"));
        }
        return std::span<uint8_t>(scratch.data(), n);
      });
  if (!info.ok()) return std::move(info).take_status().with("path", path);
  return info;
}

Result<std::vector<uint8_t>> encrypt_bytes(std::span<const uint8_t> plaintext, const ModelKey& key,
                                           uint64_t chunk_bytes) {
  SpanSource src(plaintext);
  std::vector<uint8_t> out;
  POWER_RETURN_IF_ERROR(encrypt_stream(src, plaintext.size(),
                                       sha256(plaintext.data(), plaintext.size()), key, chunk_bytes,
                                       [&](std::span<const uint8_t> b) {
                                         out.insert(out.end(), b.begin(), b.end());
                                         return Status();
                                       })
                            .status());
  return out;
}

Result<LockedBuffer> decrypt_bytes(std::span<const uint8_t> container, const ModelKey& key,
                                   ContainerInfo* info_out) {
  SpanSource src(container);
  LockedBuffer plain;
  // No known size: truncation and extension must be caught by the stream itself.
  POWER_ASSIGN_OR_RETURN(
      ContainerInfo info,
      decrypt_stream(
          src, key, std::nullopt,
          [&](const ContainerInfo& ci, uint64_t offset, size_t n) -> Result<std::span<uint8_t>> {
            if (offset == 0) {
              POWER_ASSIGN_OR_RETURN(plain,
                                     LockedBuffer::allocate(static_cast<size_t>(ci.plaintext_bytes),
                                                            MemoryLock::kBestEffort, "plaintext"));
            }
            return std::span<uint8_t>(plain.data() + offset, n);
          }));
  if (info_out != nullptr) *info_out = info;
  return plain;
}

}  // namespace power::secure
