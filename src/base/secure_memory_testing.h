// Test hook for base/secure_memory.h: lets a test watch every LockedBuffer being made and being
// wiped, so it can check that key material and decrypted weights are zeroed when they go (the
// observer reads the bytes after the wipe, before the pages are unmapped: if the wipe were
// skipped the test would see the secret). Not for production code.
// Thread-safety: set the observer before the code under test runs and clear it afterwards; the
// callbacks run on whichever thread allocates or frees the buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace power::testing {

struct SecureMemoryObserver {
  // After a buffer is mapped (and locked when possible).
  void (*on_allocate)(std::string_view purpose, const uint8_t* data, size_t size_bytes) = nullptr;
  // After the wipe, while the bytes are still mapped and readable.
  void (*on_wipe)(std::string_view purpose, const uint8_t* data, size_t size_bytes) = nullptr;
};

// nullptr removes the observer. The object must outlive its installation.
void set_secure_memory_observer(const SecureMemoryObserver* observer);

}  // namespace power::testing
