#include "base/sha256.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <openssl/evp.h>

namespace power {

struct Sha256::Ctx {
  EVP_MD_CTX* md = nullptr;
  Ctx() : md(EVP_MD_CTX_new()) {
    POWER_CHECK(md != nullptr);
    POWER_CHECK(EVP_DigestInit_ex(md, EVP_sha256(), nullptr) == 1);
  }
  ~Ctx() { EVP_MD_CTX_free(md); }
};

Sha256::Sha256() : ctx_(std::make_unique<Ctx>()) {}
Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t size_bytes) {
  if (size_bytes == 0) return;
  POWER_CHECK(EVP_DigestUpdate(ctx_->md, data, size_bytes) == 1);
}

Sha256Digest Sha256::finish() {
  Sha256Digest d{};
  unsigned int n = 0;
  POWER_CHECK(EVP_DigestFinal_ex(ctx_->md, d.data(), &n) == 1 && n == d.size());
  POWER_CHECK(EVP_DigestInit_ex(ctx_->md, EVP_sha256(), nullptr) == 1);
  return d;
}

Sha256Digest sha256(const void* data, size_t size_bytes) {
  Sha256 h;
  h.update(data, size_bytes);
  return h.finish();
}

std::string to_hex(const uint8_t* data, size_t size_bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s(size_bytes * 2, '0');
  for (size_t i = 0; i < size_bytes; ++i) {
    s[2 * i] = kDigits[data[i] >> 4];
    s[2 * i + 1] = kDigits[data[i] & 15];
  }
  return s;
}

std::string sha256_hex(std::string_view bytes) {
  return to_hex(sha256(bytes.data(), bytes.size()));
}

Result<Sha256Digest> parse_sha256_hex(std::string_view hex) {
  if (hex.size() != 64) {
    return make_error(StatusCode::kInvalidArgument, "SHA-256 must be 64 hex characters, got {}",
                      hex.size());
  }
  Sha256Digest d{};
  for (size_t i = 0; i < 64; ++i) {
    char c = hex[i];
    int v = (c >= '0' && c <= '9')   ? c - '0'
            : (c >= 'a' && c <= 'f') ? c - 'a' + 10
            : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                     : -1;
    if (v < 0) return make_error(StatusCode::kInvalidArgument, "bad hex character at {}", i);
    d[i / 2] = static_cast<uint8_t>(d[i / 2] | (i % 2 == 0 ? v << 4 : v));
  }
  return d;
}

Result<Sha256Digest> sha256_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return Status(errno == ENOENT ? StatusCode::kNotFound : StatusCode::kIo,
                  fmt::format("cannot open: {}", std::strerror(errno)))
        .with("path", path);
  }
  Sha256 h;
  std::vector<char> buf(1 << 20);
  for (;;) {
    ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return Status(StatusCode::kIo, fmt::format("read failed: {}", std::strerror(e)))
          .with("path", path);
    }
    if (n == 0) break;
    h.update(buf.data(), static_cast<size_t>(n));
  }
  ::close(fd);
  return h.finish();
}

}  // namespace power
