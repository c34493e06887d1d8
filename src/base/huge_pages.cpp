// HugeRegion: 2 MiB-aligned anonymous mappings advised MADV_HUGEPAGE (huge_pages.h).
#include "base/huge_pages.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>

#include "base/env.h"
#include "base/secure_memory.h"

namespace power {

namespace {

uint64_t page_bytes() {
  const long p = ::sysconf(_SC_PAGESIZE);
  return p > 0 ? static_cast<uint64_t>(p) : 4096;
}

}  // namespace

bool huge_pages_enabled() {
  return env_switch_on("POWER_HUGEPAGES");
}

HugeRegion::~HugeRegion() {
  release();
}

void HugeRegion::release() {
  if (data_ == nullptr) return;
  if (secret_) {
    secure_wipe(data_, size_);
    if (locked_) unlock_pages(data_, size_);
  }
  ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

HugeRegion::HugeRegion(HugeRegion&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)),
      advised_(std::exchange(o.advised_, false)),
      secret_(std::exchange(o.secret_, false)),
      locked_(std::exchange(o.locked_, false)) {}

HugeRegion& HugeRegion::operator=(HugeRegion&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    size_ = std::exchange(o.size_, 0);
    advised_ = std::exchange(o.advised_, false);
    secret_ = std::exchange(o.secret_, false);
    locked_ = std::exchange(o.locked_, false);
  }
  return *this;
}

Result<HugeRegion> HugeRegion::allocate(uint64_t bytes, bool secret) {
  if (bytes == 0) return Status(StatusCode::kInvalidArgument, "huge region of 0 bytes");
  const uint64_t page = page_bytes();
  if (bytes > UINT64_MAX / 2 - kHugePageBytes) {
    return Status(StatusCode::kResourceExhausted, "huge region too large")
        .with("bytes", std::to_string(bytes));
  }
  const uint64_t size = (bytes + page - 1) / page * page;
  // Reserve 2 MiB more than needed, keep the part that starts at a 2 MiB boundary.
  const uint64_t reserve = size + kHugePageBytes;
  void* m = ::mmap(nullptr, reserve, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) {
    return Status(StatusCode::kResourceExhausted, "cannot map anonymous memory")
        .with("bytes", std::to_string(size))
        .with("error", std::strerror(errno));
  }
  const auto base = reinterpret_cast<uintptr_t>(m);
  const uintptr_t aligned = (base + kHugePageBytes - 1) / kHugePageBytes * kHugePageBytes;
  const uint64_t head = aligned - base;
  const uint64_t tail = reserve - head - size;
  if (head > 0) ::munmap(m, head);
  if (tail > 0) ::munmap(reinterpret_cast<void*>(aligned + size), tail);
  HugeRegion r;
  r.data_ = reinterpret_cast<uint8_t*>(aligned);
  r.size_ = size;
  // The packed copies are weights: never useful in a core dump, and secret when the model came
  // from an encrypted container (docs/CONFIDENTIAL.md "Encrypted weights").
  ::madvise(r.data_, size, MADV_DONTDUMP);
#if defined(MADV_HUGEPAGE)
  if (huge_pages_enabled()) r.advised_ = ::madvise(r.data_, size, MADV_HUGEPAGE) == 0;
#endif
  // Secret copies stay out of swap where the lock limit allows (as the decrypted weights
  // they come from; a copy that cannot be locked is still made, like those weights under
  // the default best-effort locking).
  r.secret_ = secret;
  if (secret) r.locked_ = lock_pages(r.data_, size);
  return r;
}

std::string transparent_huge_page_mode() {
  std::ifstream in("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(in, line)) return "";
  // "always [madvise] never": the bracketed word is the mode.
  const size_t open = line.find('[');
  const size_t close = line.find(']', open == std::string::npos ? 0 : open);
  if (open == std::string::npos || close == std::string::npos) return "";
  return line.substr(open + 1, close - open - 1);
}

HugePageUsage process_huge_page_usage() {
  HugePageUsage u;
  std::ifstream in("/proc/self/smaps_rollup");
  std::string key;
  while (in >> key) {
    int64_t kib = 0;
    if (key == "AnonHugePages:" && (in >> kib)) u.anon_bytes = kib * 1024;
    if (key == "FilePmdMapped:" && (in >> kib)) u.file_bytes = kib * 1024;
    std::string rest;
    std::getline(in, rest);
  }
  return u;
}

}  // namespace power
