// The runtime's Ed25519 receipt key, and signature checks.
//
// The key lives in a directory (default $POWER_HOME/keys, else ~/.power/keys) as
// `receipt-ed25519.key` (the 32-byte private seed in lowercase hex, mode 0600) beside
// `receipt-ed25519.pub` (the 32-byte public key in hex). load_or_create() makes both on first
// use under an exclusive flock on `receipt-ed25519.lock`, so concurrent processes end up with
// one key; a private key file readable by group or others is refused, as ssh does.
// Public keys and signatures travel as lowercase hex (64 and 128 characters).
// Thread-safety: a SigningKey is immutable after loading; sign() may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "base/status.h"

namespace power::receipt {

using PublicKey = std::array<uint8_t, 32>;

class SigningKey {
 public:
  ~SigningKey();
  SigningKey(const SigningKey&) = delete;
  SigningKey& operator=(const SigningKey&) = delete;

  // $POWER_HOME/keys, else $HOME/.power/keys.
  static std::string default_dir();
  static Result<std::unique_ptr<SigningKey>> load_or_create(const std::string& dir);
  // A key from its 32-byte seed (tests).
  static Result<std::unique_ptr<SigningKey>> from_seed(const std::array<uint8_t, 32>& seed);

  const PublicKey& public_key() const { return public_key_; }
  std::string public_key_hex() const;
  // Ed25519 signature (64 bytes) over `message`.
  Result<std::array<uint8_t, 64>> sign(std::string_view message) const;

 private:
  SigningKey() = default;
  struct Pkey;
  std::unique_ptr<Pkey> pkey_;
  PublicKey public_key_{};
};

// kIntegrity when `signature` is not a valid Ed25519 signature of `message` by `key`.
Status verify_signature(const PublicKey& key, std::string_view message,
                        const std::array<uint8_t, 64>& signature);

// Parses a hex public key (64 hex digits, surrounding whitespace ignored).
Result<PublicKey> parse_public_key_hex(std::string_view hex);
// Decodes exactly `n` bytes of hex.
Status decode_hex(std::string_view hex, uint8_t* out, size_t n);

}  // namespace power::receipt
