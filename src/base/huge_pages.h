// Anonymous memory for large, hot, long-lived buffers (the kernels' packed weight copies),
// placed so that the kernel can back it with 2 MiB transparent huge pages.
//
// Why: decoding one token reads every weight once, front to back. With 4 KiB pages a 600 MB
// model spans about 150,000 pages, far beyond any TLB, so the stream takes a page walk every
// 4 KiB; in a virtual machine each walk is two-dimensional (guest and host tables, up to 24
// memory references), and the walks compete with the stream for the same memory. Measured on
// an AMD EPYC VM (TinyLlama-1.1B Q4_K_M, packed copies, 1 thread): 16.5 tok/s with 4 KiB
// pages, varying run to run, against 34-35 tok/s with huge pages, which is the machine's
// single-thread read bandwidth divided by the bytes read per token.
//
// HugeRegion::allocate(bytes) maps `bytes` (rounded up to 4 KiB) of private anonymous memory
// starting at a 2 MiB boundary: it reserves 2 MiB more address space than asked, keeps the
// aligned part and unmaps the rest, so no memory is spent on alignment. It then advises
// MADV_HUGEPAGE over the range. Under THP `always` or `madvise` (most distributions) the
// kernel backs each whole 2 MiB of the range with a huge page when it is first touched; a
// tail shorter than 2 MiB stays in 4 KiB pages, so nothing is wasted there either. Under
// `never`, or where no huge page can be assembled, the memory is ordinary pages: nothing fails.
//
// POWER_HUGEPAGES=0 (or off/false/no) in the environment skips the advice (A/B measurements);
// it is read at each allocation.
//
// Thread-safety: a HugeRegion is used by one owner; allocate() and the query functions may be
// called from any thread.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace power {

inline constexpr uint64_t kHugePageBytes = uint64_t{2} << 20;

class HugeRegion {
 public:
  HugeRegion() = default;
  ~HugeRegion();
  HugeRegion(HugeRegion&& o) noexcept;
  HugeRegion& operator=(HugeRegion&& o) noexcept;
  HugeRegion(const HugeRegion&) = delete;
  HugeRegion& operator=(const HugeRegion&) = delete;

  // A zero-filled region of at least `bytes` (> 0) bytes at a 2 MiB boundary. Fails with
  // kResourceExhausted when the address space or memory cannot be mapped.
  // secret: the contents derive from a LockedBuffer (decrypted weights): the region is
  // mlock'ed where RLIMIT_MEMLOCK allows (locked() says whether) and zeroed before unmapping.
  static Result<HugeRegion> allocate(uint64_t bytes, bool secret = false);

  uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  // True when MADV_HUGEPAGE was advised (not switched off, accepted by the kernel).
  bool advised() const { return advised_; }
  bool secret() const { return secret_; }
  bool locked() const { return locked_; }

 private:
  uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
  bool advised_ = false;
  bool secret_ = false;
  bool locked_ = false;
  void release();
};

// False when POWER_HUGEPAGES disables the advice.
bool huge_pages_enabled();

// The system's transparent-huge-page mode as /sys/kernel/mm/transparent_hugepage/enabled
// selects it ("always", "madvise", "never"), or "" where the file is absent (no THP).
std::string transparent_huge_page_mode();

// This process's memory mapped with huge pages now, from /proc/self/smaps_rollup: anonymous
// (AnonHugePages) and file pages mapped as 2 MiB folios (FilePmdMapped); -1 where unknown.
struct HugePageUsage {
  int64_t anon_bytes = -1;
  int64_t file_bytes = -1;
};
HugePageUsage process_huge_page_usage();

}  // namespace power
