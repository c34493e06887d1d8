// The AES-256 key that opens encrypted model containers (secure/container.h), and where it
// comes from: a key file, 64 hex digits given directly, or $POWER_MODEL_KEY.
//
// A key file holds exactly 32 raw bytes, or 64 hex digits optionally followed by one "\n" or
// "\r\n"; anything else is kInvalidArgument naming the file. The key bytes live in a
// LockedBuffer (base/secure_memory.h: locked, not dumped, wiped when the ModelKey goes), and
// the file's text is read into one too, so no copy of the key is left behind in freed memory.
// What this module cannot wipe: the caller's own strings (LoadOptions::model_key_hex) and the
// process environment ($POWER_MODEL_KEY); docs/CONFIDENTIAL.md says so.
// Ownership: move-only. Thread-safety: a const ModelKey may be read from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "base/secure_memory.h"
#include "base/status.h"

namespace power::secure {

inline constexpr size_t kModelKeyBytes = 32;
inline constexpr const char* kModelKeyEnv = "POWER_MODEL_KEY";

// Public identifier of a key (the first 16 bytes of SHA-256 over a fixed label and the key):
// stored in a container so that a wrong key is reported as such rather than as tampering. It
// reveals nothing usable about a random 256-bit key.
using KeyId = std::array<uint8_t, 16>;

class ModelKey {
 public:
  ModelKey() = default;
  ModelKey(ModelKey&&) noexcept = default;
  ModelKey& operator=(ModelKey&&) noexcept = default;

  static Result<ModelKey> from_bytes(std::span<const uint8_t> bytes);
  // `source` names where the text came from in errors (never the text itself).
  static Result<ModelKey> from_hex(std::string_view hex, std::string_view source);
  static Result<ModelKey> from_file(const std::string& path);
  // 32 bytes from the OpenSSL CSPRNG.
  static Result<ModelKey> generate();

  std::span<const uint8_t> bytes() const { return buf_.bytes(); }
  const KeyId& id() const { return id_; }

 private:
  static Result<ModelKey> with_buffer(LockedBuffer buf);
  LockedBuffer buf_;
  KeyId id_{};
};

// The key for model containers: key_file if set, else key_hex if set, else $POWER_MODEL_KEY if
// set; std::nullopt when none is. Both key_file and key_hex set: kInvalidArgument (an explicit
// choice is never silently dropped); either one wins over the environment.
Result<std::optional<ModelKey>> resolve_model_key(const std::string& key_file,
                                                  std::string_view key_hex);

std::string key_id_hex(const KeyId& id);

}  // namespace power::secure
