// File utilities: read-only mappings, whole-file reads, atomic durable writes and advisory
// cross-process locks.
//
// MappedFile maps a file read-only (MAP_PRIVATE); the mapping lives as long as the object and
// the bytes are never copied. It may instead own decrypted bytes in a LockedBuffer (adopt()),
// read through the same interface and wiped when the MappedFile goes. write_file_atomic writes a
// temporary file in the target's directory, fsyncs it, renames it over the target and fsyncs the
// directory, so a reader sees the old file or the new one, never a mix, even across a crash.
// FileLock is flock(2): held by an open file description, released on destruction or process death.
// Thread-safety: objects are used by one thread at a time.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/secure_memory.h"
#include "base/status.h"

namespace power {

// Owns a file descriptor; closes it on destruction.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {
    int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1);

 private:
  int fd_ = -1;
};

// kHugePage: MADV_HUGEPAGE, so that pages the mapping's faults read in come as 2 MiB folios
// where the filesystem supports them (ext4, xfs on recent kernels) and are mapped with one TLB
// entry each (base/huge_pages.h says why that matters for weights). Pages already cached keep
// the folio size they were cached with.
enum class AccessHint { kNormal, kSequential, kRandom, kWillNeed, kHugePage };

class MappedFile {
 public:
  MappedFile() = default;
  ~MappedFile();
  MappedFile(MappedFile&& o) noexcept;
  MappedFile& operator=(MappedFile&& o) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  // Maps the whole file. An empty file gives an empty mapping (data() == nullptr).
  static Result<MappedFile> open(const std::string& path, AccessHint hint = AccessHint::kNormal);
  // Owns `region` (decrypted weights, secure/container.h) in place of a file mapping; `path`
  // names the file the bytes came from. The region is sealed read-only here and wiped,
  // unlocked and unmapped on destruction.
  static MappedFile adopt(LockedBuffer region, std::string path);

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }
  // True for adopt(): the bytes live in locked, non-dumpable anonymous memory.
  bool is_secure_memory() const { return secure_.data() != nullptr; }
  bool is_locked() const { return secure_.locked(); }

  // madvise over a byte range of the mapping (rounded out to pages). Best effort.
  void advise(size_t offset, size_t length, AccessHint hint) const;
  // What release() does with the pages in the page cache.
  enum class PageCache { kDrop, kKeep };
  // Drops the whole pages inside [offset, offset + length) from this process's resident set
  // (the bytes stay readable: a later access maps them again, from the page cache or the file)
  // and, with kDrop, asks the kernel to drop them from the page cache too. No effect on adopted
  // (secure) memory. Best effort.
  void release(size_t offset, size_t length, PageCache cache = PageCache::kDrop) const;

 private:
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
  std::string path_;
  LockedBuffer secure_;  // adopt(): owns the bytes data_ points to
};

Result<std::vector<uint8_t>> read_file(const std::string& path);
Result<std::string> read_file_text(const std::string& path);

// Writes bytes to path atomically and durably (temp + fsync + rename + directory fsync).
Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes);
inline Status write_file_atomic(const std::string& path, std::string_view text) {
  return write_file_atomic(
      path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// Writes all n bytes at the file position (retrying short writes and EINTR).
Status write_all(int fd, const uint8_t* p, size_t n, const std::string& path);
// Reads exactly n bytes at `offset`: kCorrupt on a short read (the file ends first), kIo on an
// error.
Status pread_all(int fd, uint8_t* dst, uint64_t n, uint64_t offset, const std::string& path);
// Publishes `from` as `to` without ever replacing a file (link(2): kIo/EEXIST when `to`
// exists), removes the name `from` and fsyncs the directory.
Status link_durable(const std::string& from, const std::string& to);
// As write_file_atomic, but never replaces: fails when `path` exists. The file gets `mode`.
Status write_file_exclusive(const std::string& path, std::span<const uint8_t> bytes,
                            mode_t mode = 0644);

// fsync of a directory, so that a rename or create inside it survives a crash.
Status fsync_directory(const std::string& dir);
// Renames from -> to, then fsyncs the destination's directory.
Status rename_durable(const std::string& from, const std::string& to);
// Directory part of a path ("." when it has none).
std::string parent_directory(const std::string& path);

// Advisory cross-process lock on a lock file (created if missing).
class FileLock {
 public:
  enum class Mode { kShared, kExclusive };

  FileLock() = default;
  FileLock(FileLock&&) noexcept = default;
  FileLock& operator=(FileLock&&) noexcept = default;
  ~FileLock() = default;  // closing the descriptor releases the lock

  // Blocks until the lock is held.
  static Result<FileLock> acquire(const std::string& path, Mode mode = Mode::kExclusive);
  // Returns kResourceExhausted at once if another holder conflicts.
  static Result<FileLock> try_acquire(const std::string& path, Mode mode = Mode::kExclusive);

  bool held() const { return fd_.valid(); }
  void release() { fd_.reset(); }

 private:
  static Result<FileLock> lock(const std::string& path, Mode mode, bool block);
  UniqueFd fd_;
};

}  // namespace power
