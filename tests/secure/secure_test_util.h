// Helpers for the encrypted-weights tests: keys, /proc/self inspection (what a mapping's
// VmFlags say, which files the process has open or mapped) and a watcher of secure-memory
// wipes (base/secure_memory_testing.h).
#pragma once

#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "secure/model_key.h"

namespace power::testing {

// A random key written as 64 hex digits and a newline (mode 0600) at `path`.
secure::ModelKey write_hex_key_file(const std::string& path);

// The VmFlags line of the /proc/self/smaps entry that contains `address` ("" if none).
std::string vm_flags_of(const void* address);
// Whether a two-letter VmFlags code ("dd", "lo") is present.
bool has_vm_flag(const std::string& flags, const std::string& code);
// The targets of /proc/self/fd/* and the path names in /proc/self/maps.
std::vector<std::string> open_file_targets();
std::vector<std::string> mapped_paths();
// Regular files below `dir` (recursively), as paths.
std::set<std::string> files_under(const std::string& dir);

// Records every LockedBuffer wipe while installed: its purpose, its size and whether every
// byte read back as zero after the wipe; and how many buffers of each purpose were made.
class WipeWatcher {
 public:
  struct Wipe {
    std::string purpose;
    size_t size_bytes = 0;
    bool all_zero = false;
  };
  WipeWatcher();
  ~WipeWatcher();
  WipeWatcher(const WipeWatcher&) = delete;
  WipeWatcher& operator=(const WipeWatcher&) = delete;

  std::vector<Wipe> wipes() const;
  int allocations(const std::string& purpose) const;
  int wipes_of(const std::string& purpose) const;
  bool all_wipes_zero() const;

 private:
  static void on_allocate(std::string_view purpose, const uint8_t* data, size_t size_bytes);
  static void on_wipe(std::string_view purpose, const uint8_t* data, size_t size_bytes);
  mutable std::mutex mu_;
  std::vector<Wipe> wipes_;
  std::vector<std::string> allocations_;
};

}  // namespace power::testing
