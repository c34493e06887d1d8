// The encrypted model container ("PWENC1"): a file of any kind (in practice a GGUF model)
// encrypted with AES-256-GCM in independently authenticated chunks, so that it is decrypted
// as a stream and any change is caught chunk by chunk. docs/CONFIDENTIAL.md "Encrypted weights"
// is the byte-level specification; this header and container.cpp are its one implementation.
//
//   [0, 128)    header: magic "PWENC1\0\0", version, algorithm, chunk size, plaintext size,
//               plaintext SHA-256, random 32-byte file salt, key id
//   [128, 144)  header tag: GMAC of the header under the file key
//   then        chunk i = ciphertext (chunk size bytes; the last one the remainder, possibly 0)
//               followed by its 16-byte GCM tag
//
// File key = HKDF-SHA256(model key, salt = file salt, info "power-enc-v1 file key"), so every
// container has its own key and nonces never repeat across files; chunk nonce = 0x00 0 0 0 ||
// big-endian chunk index; chunk AAD = SHA-256(header || header tag) || big-endian index ||
// last-chunk flag, so a chunk moved to another position, another container, or presented as the
// end (truncation) fails its tag. The chunk count follows from the authenticated plaintext
// size, so missing or extra bytes are errors too, and after the last chunk the plaintext
// SHA-256 is compared with the header's.
//
// Errors: kCorrupt (not a container, bad structure), kUnsupported (a later version),
// kInvalidArgument (the key is not the one the container was made with: its key id differs),
// kIntegrity (authentication failed: tampering, truncation, reordering, trailing bytes).
// Decrypted bytes that fail authentication are wiped before the error returns.
// Thread-safety: the functions are reentrant.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/secure_memory.h"
#include "base/sha256.h"
#include "base/status.h"
#include "secure/model_key.h"

namespace power::secure {

inline constexpr std::array<uint8_t, 8> kContainerMagic = {'P', 'W', 'E', 'N', 'C', '1', 0, 0};
inline constexpr uint32_t kContainerVersion = 1;
inline constexpr size_t kContainerHeaderBytes = 128;
inline constexpr size_t kContainerTagBytes = 16;
inline constexpr size_t kContainerPrefixBytes = kContainerHeaderBytes + kContainerTagBytes;
inline constexpr uint32_t kChunkLog2Min = 8;   // 256 B: small enough for exhaustive tests
inline constexpr uint32_t kChunkLog2Max = 30;  // 1 GiB: one GCM call per chunk
inline constexpr uint64_t kChunkBytesDefault = uint64_t{1} << 20;

struct ContainerInfo {
  uint64_t plaintext_bytes = 0;
  Sha256Digest plaintext_sha256{};
  uint64_t chunk_bytes = 0;
  uint64_t chunks = 0;  // at least 1: an empty plaintext is one empty last chunk
  KeyId key_id{};
  uint64_t container_bytes = 0;  // the whole file
};

// Whether bytes start with the container magic (enough to route a file to decryption; the
// rest is checked when it is opened with a key).
bool is_container(std::span<const uint8_t> prefix);
// Reads the first bytes of a file: false for a short or non-matching file.
Result<bool> is_container_file(const std::string& path);

// Writes `out` atomically: a temporary file in its directory, fsync, rename, directory fsync.
// Reads `in` twice (the plaintext SHA-256 goes in the header, which authenticates every chunk)
// and fails if it changed in between. Refuses an `out` that is `in`, and an `in` that is
// already a container. chunk_bytes: a power of two in [2^kChunkLog2Min, 2^kChunkLog2Max].
Result<ContainerInfo> encrypt_file(const std::string& in, const std::string& out,
                                   const ModelKey& key, uint64_t chunk_bytes = kChunkBytesDefault);

// Decrypts a container file into locked, non-dumpable anonymous memory (base/secure_memory.h)
// owned by the returned MappedFile, which wipes it on destruction. The file is read with
// read(2) and closed; nothing else is written or mapped. With MemoryLock::kBestEffort the
// weights may end up unlocked (mapping.is_locked() tells).
struct DecryptedContainer {
  MappedFile mapping;
  ContainerInfo info;
};
Result<DecryptedContainer> decrypt_file_to_memory(const std::string& path, const ModelKey& key,
                                                  MemoryLock lock);

// Authenticates every chunk and the plaintext digest without keeping the plaintext (one
// chunk at a time in a locked scratch buffer).
Result<ContainerInfo> verify_container_file(const std::string& path, const ModelKey& key);

// In-memory forms of the same format, for tests and small payloads.
Result<std::vector<uint8_t>> encrypt_bytes(std::span<const uint8_t> plaintext, const ModelKey& key,
                                           uint64_t chunk_bytes = kChunkBytesDefault);
Result<LockedBuffer> decrypt_bytes(std::span<const uint8_t> container, const ModelKey& key,
                                   ContainerInfo* info = nullptr);

}  // namespace power::secure
