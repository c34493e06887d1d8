#include "base/file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace power {
namespace {

Status errno_status(std::string_view what, const std::string& path, int err) {
  StatusCode code = err == ENOENT ? StatusCode::kNotFound : StatusCode::kIo;
  if (err == ENOSPC || err == EDQUOT) code = StatusCode::kResourceExhausted;
  return Status(code, fmt::format("{}: {}", what, std::strerror(err))).with("path", path);
}

int advice_of(AccessHint hint) {
  switch (hint) {
    case AccessHint::kSequential:
      return MADV_SEQUENTIAL;
    case AccessHint::kRandom:
      return MADV_RANDOM;
    case AccessHint::kWillNeed:
      return MADV_WILLNEED;
    case AccessHint::kHugePage:
#if defined(MADV_HUGEPAGE)
      return MADV_HUGEPAGE;
#else
      break;
#endif
    case AccessHint::kNormal:
      break;
  }
  return MADV_NORMAL;
}

}  // namespace

Status write_all(int fd, const uint8_t* p, size_t n, const std::string& path) {
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      return errno_status("write failed", path, errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
  return Status();
}

Status pread_all(int fd, uint8_t* dst, uint64_t n, uint64_t offset, const std::string& path) {
  uint64_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) return errno_status("read failed", path, errno);
    if (r == 0) {
      return Status(StatusCode::kCorrupt, "short read (file truncated?)")
          .with("path", path)
          .with("offset", offset + done)
          .with("expected_end", offset + n);
    }
    done += static_cast<uint64_t>(r);
  }
  return Status();
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

// A file mapping is unmapped here; secure_ (adopt()) wipes and unmaps its own region.
MappedFile::~MappedFile() {
  if (data_ != nullptr && !is_secure_memory()) ::munmap(const_cast<uint8_t*>(data_), size_);
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : data_(o.data_), size_(o.size_), path_(std::move(o.path_)), secure_(std::move(o.secure_)) {
  o.data_ = nullptr;
  o.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
  if (this != &o) {
    if (data_ != nullptr && !is_secure_memory()) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = o.data_;
    size_ = o.size_;
    path_ = std::move(o.path_);
    secure_ = std::move(o.secure_);
    o.data_ = nullptr;
    o.size_ = 0;
  }
  return *this;
}

MappedFile MappedFile::adopt(LockedBuffer region, std::string path) {
  MappedFile m;
  region.seal();
  m.data_ = region.data();
  m.size_ = region.size();
  m.path_ = std::move(path);
  m.secure_ = std::move(region);
  return m;
}

Result<MappedFile> MappedFile::open(const std::string& path, AccessHint hint) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno_status("cannot open", path, errno);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return errno_status("cannot stat", path, errno);
  if (!S_ISREG(st.st_mode)) {
    return Status(StatusCode::kInvalidArgument, "not a regular file").with("path", path);
  }
  MappedFile m;
  m.path_ = path;
  m.size_ = static_cast<size_t>(st.st_size);
  if (m.size_ == 0) return m;
  void* p = ::mmap(nullptr, m.size_, PROT_READ, MAP_PRIVATE, fd.get(), 0);
  if (p == MAP_FAILED) {
    m.size_ = 0;
    return errno_status("mmap failed", path, errno);
  }
  m.data_ = static_cast<const uint8_t*>(p);
  m.advise(0, m.size_, hint);
  return m;
}

void MappedFile::advise(size_t offset, size_t length, AccessHint hint) const {
  if (data_ == nullptr || offset >= size_) return;
  if (length > size_ - offset) length = size_ - offset;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  size_t begin = offset / page * page;
  ::madvise(const_cast<uint8_t*>(data_) + begin, length + (offset - begin), advice_of(hint));
}

void MappedFile::release(size_t offset, size_t length, PageCache cache) const {
  if (data_ == nullptr || offset >= size_ || is_secure_memory()) return;
  if (length > size_ - offset) length = size_ - offset;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t begin = (offset + page - 1) / page * page;
  const size_t end = (offset + length) / page * page;
  if (end <= begin) return;
  ::madvise(const_cast<uint8_t*>(data_) + begin, end - begin, MADV_DONTNEED);
  if (path_.empty() || cache == PageCache::kKeep) return;
  UniqueFd fd(::open(path_.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.valid()) {
    ::posix_fadvise(fd.get(), static_cast<off_t>(begin), static_cast<off_t>(end - begin),
                    POSIX_FADV_DONTNEED);
  }
}

Result<std::vector<uint8_t>> read_file(const std::string& path) {
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return errno_status("cannot open", path, errno);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  for (;;) {
    ssize_t n = ::read(fd.get(), buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_status("read failed", path, errno);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  return out;
}

Result<std::string> read_file_text(const std::string& path) {
  POWER_ASSIGN_OR_RETURN(auto bytes, read_file(path));
  return std::string(bytes.begin(), bytes.end());
}

std::string parent_directory(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

Status fsync_directory(const std::string& dir) {
  UniqueFd fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd.valid()) return errno_status("cannot open directory", dir, errno);
  if (::fsync(fd.get()) != 0) return errno_status("fsync of directory failed", dir, errno);
  return Status();
}

Status rename_durable(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) return errno_status("rename failed", to, errno);
  return fsync_directory(parent_directory(to));
}

Status write_file_atomic(const std::string& path, std::span<const uint8_t> bytes) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::string tmp = fmt::format("{}.tmp-{}-{}-{:x}", path, ::getpid(), counter.fetch_add(1), rd());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return errno_status("cannot create temporary file", tmp, errno);
  Status st = write_all(fd.get(), bytes.data(), bytes.size(), tmp);
  if (st.ok() && ::fsync(fd.get()) != 0) st = errno_status("fsync failed", tmp, errno);
  fd.reset();
  if (st.ok()) st = rename_durable(tmp, path);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Status link_durable(const std::string& from, const std::string& to) {
  if (::link(from.c_str(), to.c_str()) != 0) return errno_status("cannot publish", to, errno);
  ::unlink(from.c_str());
  return fsync_directory(parent_directory(to));
}

Status write_file_exclusive(const std::string& path, std::span<const uint8_t> bytes, mode_t mode) {
  static std::atomic<uint64_t> counter{0};
  std::random_device rd;
  std::string tmp = fmt::format("{}.tmp-{}-{}-{:x}", path, ::getpid(), counter.fetch_add(1), rd());
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644));
  if (!fd.valid()) return errno_status("cannot create temporary file", tmp, errno);
  Status st = write_all(fd.get(), bytes.data(), bytes.size(), tmp);
  if (st.ok() && (::fchmod(fd.get(), mode) != 0 || ::fsync(fd.get()) != 0)) {
    st = errno_status("fsync failed", tmp, errno);
  }
  fd.reset();
  if (st.ok()) st = link_durable(tmp, path);
  if (!st.ok()) ::unlink(tmp.c_str());
  return st;
}

Result<FileLock> FileLock::lock(const std::string& path, Mode mode, bool block) {
  UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (!fd.valid()) return errno_status("cannot open lock file", path, errno);
  int op = (mode == Mode::kExclusive ? LOCK_EX : LOCK_SH) | (block ? 0 : LOCK_NB);
  for (;;) {
    if (::flock(fd.get(), op) == 0) break;
    if (errno == EINTR) continue;
    if (errno == EWOULDBLOCK) {
      return Status(StatusCode::kResourceExhausted, "lock is held by another owner")
          .with("path", path);
    }
    return errno_status("flock failed", path, errno);
  }
  FileLock l;
  l.fd_ = std::move(fd);
  return l;
}

Result<FileLock> FileLock::acquire(const std::string& path, Mode mode) {
  return lock(path, mode, true);
}
Result<FileLock> FileLock::try_acquire(const std::string& path, Mode mode) {
  return lock(path, mode, false);
}

}  // namespace power
