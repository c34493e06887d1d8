// Memory for secrets: model keys and decrypted weights (docs/CONFIDENTIAL.md "Encrypted
// weights").
//
// A LockedBuffer is private anonymous memory (never backed by a file, so its bytes cannot reach
// a filesystem) that is
//   - locked in RAM with mlock, so it is never written to swap;
//   - excluded from core dumps (MADV_DONTDUMP);
//   - overwritten with zeros (OPENSSL_cleanse, which the compiler may not elide) before it is
//     unlocked and unmapped, on destruction or reset().
// mlock is limited by RLIMIT_MEMLOCK (often 8 MiB for unprivileged users). With
// MemoryLock::kBestEffort a buffer that cannot be locked is still returned (locked() false) and
// the caller decides whether to warn; kRequired turns that into kResourceExhausted.
// Ownership: move-only, one owner. Thread-safety: one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "base/status.h"

namespace power {

enum class MemoryLock { kBestEffort, kRequired };

class LockedBuffer {
 public:
  LockedBuffer() = default;
  ~LockedBuffer() { reset(); }
  LockedBuffer(LockedBuffer&& o) noexcept;
  LockedBuffer& operator=(LockedBuffer&& o) noexcept;
  LockedBuffer(const LockedBuffer&) = delete;
  LockedBuffer& operator=(const LockedBuffer&) = delete;

  // `purpose` names the contents in errors and for the test observer ("model key", "weights");
  // it must outlive the buffer (a string literal). size_bytes 0 gives an empty buffer.
  static Result<LockedBuffer> allocate(size_t size_bytes, MemoryLock lock,
                                       std::string_view purpose);

  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::span<uint8_t> bytes() { return {data_, size_}; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  // Whether mlock succeeded (always false for an empty buffer).
  bool locked() const { return locked_; }
  std::string_view purpose() const { return purpose_; }

  // Makes the pages read-only once filled, so a stray write faults instead of corrupting
  // weights; reset() makes them writable again to wipe them.
  void seal();
  // Wipes, unlocks and unmaps now; the buffer becomes empty.
  void reset();

 private:
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
  size_t mapped_bytes_ = 0;  // size_ rounded up to whole pages
  bool locked_ = false;
  bool sealed_ = false;
  std::string_view purpose_;
};

// Zeroes bytes so that the store is not optimised away (OPENSSL_cleanse): for secrets held
// outside a LockedBuffer (a stack array, a std::string the caller is done with).
void secure_wipe(void* data, size_t size_bytes);

// mlock(2) / munlock(2) as system calls: the sanitizer runtimes (ASan, TSan) replace the libc
// functions with no-ops that report success, which would make an unlocked buffer claim to be
// locked. lock_pages returns false (errno set) when the kernel refuses.
bool lock_pages(void* data, size_t size_bytes);
void unlock_pages(void* data, size_t size_bytes);

// True when `p` points into a live LockedBuffer: code that copies such bytes into memory of
// its own (the kernels' packed weight copies) treats the copy as a secret too.
bool in_locked_buffer(const void* p);

}  // namespace power
