#include "base/secure_memory.h"

#include <map>
#include <mutex>

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include <openssl/crypto.h>

#include "base/secure_memory_testing.h"

namespace power {
namespace {

std::atomic<const testing::SecureMemoryObserver*> g_observer{nullptr};

std::string memlock_limit_text() {
  struct rlimit rl {};
  if (::getrlimit(RLIMIT_MEMLOCK, &rl) != 0) return "unknown";
  if (rl.rlim_cur == RLIM_INFINITY) return "unlimited";
  return fmt::format("{} bytes", static_cast<unsigned long long>(rl.rlim_cur));
}

}  // namespace

void testing::set_secure_memory_observer(const SecureMemoryObserver* observer) {
  g_observer.store(observer);
}

void secure_wipe(void* data, size_t size_bytes) {
  if (data != nullptr && size_bytes > 0) OPENSSL_cleanse(data, size_bytes);
}

namespace {

// Live LockedBuffers' mapped ranges [begin, end), for in_locked_buffer().
std::mutex& ranges_mu() {
  static std::mutex mu;
  return mu;
}
std::map<uintptr_t, uintptr_t>& ranges() {
  static std::map<uintptr_t, uintptr_t> r;
  return r;
}

}  // namespace

bool lock_pages(void* data, size_t size_bytes) {
  return ::syscall(SYS_mlock, data, size_bytes) == 0;
}

void unlock_pages(void* data, size_t size_bytes) {
  ::syscall(SYS_munlock, data, size_bytes);
}

bool in_locked_buffer(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lk(ranges_mu());
  auto it = ranges().upper_bound(a);
  if (it == ranges().begin()) return false;
  --it;
  return a >= it->first && a < it->second;
}

LockedBuffer::LockedBuffer(LockedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      mapped_bytes_(std::exchange(o.mapped_bytes_, 0)),
      locked_(std::exchange(o.locked_, false)),
      sealed_(std::exchange(o.sealed_, false)),
      purpose_(o.purpose_) {}

LockedBuffer& LockedBuffer::operator=(LockedBuffer&& o) noexcept {
  if (this != &o) {
    reset();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    mapped_bytes_ = std::exchange(o.mapped_bytes_, 0);
    locked_ = std::exchange(o.locked_, false);
    sealed_ = std::exchange(o.sealed_, false);
    purpose_ = o.purpose_;
  }
  return *this;
}

Result<LockedBuffer> LockedBuffer::allocate(size_t size_bytes, MemoryLock lock,
                                            std::string_view purpose) {
  LockedBuffer b;
  b.purpose_ = purpose;
  if (size_bytes == 0) return b;
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  if (size_bytes > SIZE_MAX - page) {
    return Status(StatusCode::kResourceExhausted, "secure buffer size overflows")
        .with("purpose", purpose)
        .with("bytes", size_bytes);
  }
  const size_t mapped = (size_bytes + page - 1) / page * page;
  void* p = ::mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("cannot map memory for the {}: {}", purpose, std::strerror(errno)))
        .with("bytes", size_bytes);
  }
  b.data_ = static_cast<uint8_t*>(p);
  b.size_ = size_bytes;
  b.mapped_bytes_ = mapped;
  // A core dump would write the secret to disk; the kernel honours this for every dumper.
  ::madvise(p, mapped, MADV_DONTDUMP);
  if (lock_pages(p, mapped)) {
    b.locked_ = true;
  } else if (lock == MemoryLock::kRequired) {
    const int err = errno;
    return Status(StatusCode::kResourceExhausted,
                  fmt::format("cannot lock the {} in RAM (mlock: {}); raise RLIMIT_MEMLOCK "
                              "(ulimit -l, systemd LimitMEMLOCK=) or grant CAP_IPC_LOCK",
                              purpose, std::strerror(err)))
        .with("bytes", size_bytes)
        .with("memlock_limit", memlock_limit_text());
  }
  if (const auto* obs = g_observer.load(); obs != nullptr && obs->on_allocate != nullptr) {
    obs->on_allocate(purpose, b.data_, b.size_);
  }
  {
    std::lock_guard<std::mutex> lk(ranges_mu());
    const auto begin = reinterpret_cast<uintptr_t>(b.data_);
    ranges()[begin] = begin + mapped;
  }
  return b;
}

void LockedBuffer::seal() {
  if (data_ == nullptr || sealed_) return;
  if (::mprotect(data_, mapped_bytes_, PROT_READ) == 0) sealed_ = true;
}

void LockedBuffer::reset() {
  if (data_ == nullptr) return;
  if (sealed_) ::mprotect(data_, mapped_bytes_, PROT_READ | PROT_WRITE);
  // The whole mapping, not just size_: nothing of the secret may survive in the tail page.
  OPENSSL_cleanse(data_, mapped_bytes_);
  if (const auto* obs = g_observer.load(); obs != nullptr && obs->on_wipe != nullptr) {
    obs->on_wipe(purpose_, data_, size_);
  }
  {
    std::lock_guard<std::mutex> lk(ranges_mu());
    ranges().erase(reinterpret_cast<uintptr_t>(data_));
  }
  if (locked_) unlock_pages(data_, mapped_bytes_);
  ::munmap(data_, mapped_bytes_);
  data_ = nullptr;
  size_ = 0;
  mapped_bytes_ = 0;
  locked_ = false;
  sealed_ = false;
}

}  // namespace power
