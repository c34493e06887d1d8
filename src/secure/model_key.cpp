#include "secure/model_key.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include <openssl/rand.h>

#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"

namespace power::secure {
namespace {

// Longest accepted key file: 64 hex digits + "\r\n". Anything larger is refused before reading.
constexpr size_t kKeyFileMaxBytes = 66;

int hex_value(uint8_t c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Decodes 64 hex digits into out[0..32). No early exit that depends on which digit is bad, and
// no digit is echoed into the error.
bool decode_hex_key(std::span<const uint8_t> hex, uint8_t* out) {
  if (hex.size() != 2 * kModelKeyBytes) return false;
  bool ok = true;
  for (size_t i = 0; i < kModelKeyBytes; ++i) {
    const int hi = hex_value(hex[2 * i]), lo = hex_value(hex[2 * i + 1]);
    ok &= hi >= 0 && lo >= 0;
    out[i] = static_cast<uint8_t>(((hi & 0xf) << 4) | (lo & 0xf));
  }
  return ok;
}

Status key_file_error(const std::string& path, std::string_view why) {
  return Status(StatusCode::kInvalidArgument,
                fmt::format("a model key file holds 32 raw bytes or 64 hex digits (and an "
                            "optional newline); {}",
                            why))
      .with("key_file", path);
}

KeyId compute_key_id(std::span<const uint8_t> key) {
  Sha256 h;
  h.update(std::string_view("power-model-key-id-v1", 22));  // the label and its NUL
  h.update(key.data(), key.size());
  Sha256Digest d = h.finish();
  KeyId id{};
  std::memcpy(id.data(), d.data(), id.size());
  return id;
}

}  // namespace

std::string key_id_hex(const KeyId& id) {
  return to_hex(id.data(), id.size());
}

Result<ModelKey> ModelKey::with_buffer(LockedBuffer buf) {
  ModelKey k;
  k.id_ = compute_key_id(buf.bytes());
  k.buf_ = std::move(buf);
  k.buf_.seal();
  return k;
}

Result<ModelKey> ModelKey::from_bytes(std::span<const uint8_t> bytes) {
  if (bytes.size() != kModelKeyBytes) {
    return Status(StatusCode::kInvalidArgument, "a model key is 32 bytes")
        .with("bytes", bytes.size());
  }
  POWER_ASSIGN_OR_RETURN(
      LockedBuffer buf,
      LockedBuffer::allocate(kModelKeyBytes, MemoryLock::kBestEffort, "model key"));
  std::memcpy(buf.data(), bytes.data(), kModelKeyBytes);
  return with_buffer(std::move(buf));
}

Result<ModelKey> ModelKey::from_hex(std::string_view hex, std::string_view source) {
  POWER_ASSIGN_OR_RETURN(
      LockedBuffer buf,
      LockedBuffer::allocate(kModelKeyBytes, MemoryLock::kBestEffort, "model key"));
  if (!decode_hex_key({reinterpret_cast<const uint8_t*>(hex.data()), hex.size()}, buf.data())) {
    return Status(StatusCode::kInvalidArgument, "a model key in hex is exactly 64 hex digits")
        .with("source", source)
        .with("length", hex.size());
  }
  return with_buffer(std::move(buf));
}

Result<ModelKey> ModelKey::from_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) {
    const int err = errno;
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kIo,
                  fmt::format("cannot open the model key file: {}", std::strerror(err)))
        .with("key_file", path);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return key_file_error(path, "it is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > kKeyFileMaxBytes) {
    return key_file_error(path, fmt::format("this file has {} bytes", st.st_size));
  }
  if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    POWER_LOG_WARN("model key file {} is accessible to group or others (mode {:o}); chmod 600 it",
                   path, st.st_mode & 0777);
  }
  // The file's text is a copy of the key too: it goes into locked memory and is wiped.
  POWER_ASSIGN_OR_RETURN(
      LockedBuffer text,
      LockedBuffer::allocate(kKeyFileMaxBytes + 1, MemoryLock::kBestEffort, "model key file text"));
  size_t n = 0;
  while (n < text.size()) {
    ssize_t r = ::read(fd.get(), text.data() + n, text.size() - n);
    if (r < 0) {
      if (errno == EINTR) continue;
      return Status(StatusCode::kIo,
                    fmt::format("cannot read the model key file: {}", std::strerror(errno)))
          .with("key_file", path);
    }
    if (r == 0) break;
    n += static_cast<size_t>(r);
  }
  if (n > kKeyFileMaxBytes) return key_file_error(path, "this file grew while being read");
  if (n == kModelKeyBytes) return from_bytes(text.bytes().first(n));
  size_t len = n;
  if (len > 0 && text.data()[len - 1] == '\n') --len;
  if (len > 0 && text.data()[len - 1] == '\r' && len + 1 == n) --len;
  POWER_ASSIGN_OR_RETURN(
      LockedBuffer buf,
      LockedBuffer::allocate(kModelKeyBytes, MemoryLock::kBestEffort, "model key"));
  if (!decode_hex_key(text.bytes().first(len), buf.data())) {
    return key_file_error(path, fmt::format("this file has {} bytes that are neither", n));
  }
  return with_buffer(std::move(buf));
}

Result<ModelKey> ModelKey::generate() {
  POWER_ASSIGN_OR_RETURN(
      LockedBuffer buf,
      LockedBuffer::allocate(kModelKeyBytes, MemoryLock::kBestEffort, "model key"));
  if (RAND_bytes(buf.data(), static_cast<int>(kModelKeyBytes)) != 1) {
    return Status(StatusCode::kInternal, "the OpenSSL random generator failed");
  }
  return with_buffer(std::move(buf));
}

Result<std::optional<ModelKey>> resolve_model_key(const std::string& key_file,
                                                  std::string_view key_hex) {
  if (!key_file.empty() && !key_hex.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "give the model key one way: a key file or hex digits, not both")
        .with("key_file", key_file);
  }
  if (!key_file.empty()) {
    POWER_ASSIGN_OR_RETURN(ModelKey k, ModelKey::from_file(key_file));
    return std::optional<ModelKey>(std::move(k));
  }
  if (!key_hex.empty()) {
    POWER_ASSIGN_OR_RETURN(ModelKey k, ModelKey::from_hex(key_hex, "model_key_hex"));
    return std::optional<ModelKey>(std::move(k));
  }
  const char* env = std::getenv(kModelKeyEnv);
  if (env != nullptr && *env != '\0') {
    POWER_ASSIGN_OR_RETURN(ModelKey k, ModelKey::from_hex(env, kModelKeyEnv));
    return std::optional<ModelKey>(std::move(k));
  }
  return std::optional<ModelKey>();
}

}  // namespace power::secure
