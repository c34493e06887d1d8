// SHA-256 over bytes, incrementally or at once (OpenSSL EVP). Digests print as lowercase hex.
// Thread-safety: a Sha256 object is used by one thread at a time; free functions are safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace power {

using Sha256Digest = std::array<uint8_t, 32>;

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size_bytes);
  void update(std::string_view s) { update(s.data(), s.size()); }
  // Returns the digest; the object is reset and may be reused.
  Sha256Digest finish();

 private:
  struct Ctx;
  std::unique_ptr<Ctx> ctx_;
};

Sha256Digest sha256(const void* data, size_t size_bytes);
std::string to_hex(const uint8_t* data, size_t size_bytes);
inline std::string to_hex(const Sha256Digest& d) {
  return to_hex(d.data(), d.size());
}
std::string sha256_hex(std::string_view bytes);
// Parses 64 hex characters (either case).
Result<Sha256Digest> parse_sha256_hex(std::string_view hex);
// Streams a file through SHA-256 without mapping it.
Result<Sha256Digest> sha256_file(const std::string& path);

}  // namespace power
