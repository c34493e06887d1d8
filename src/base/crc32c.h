// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, as in iSCSI, ext4 and SSE4.2's crc32
// instruction): a cheap check of bytes read back from a cache or mirror, where a SHA-256 per
// read would cost more than the read. crc32c("123456789") == 0xE3069283.
// Uses the SSE4.2 instruction where the CPU has it, else a table; both give the same value.
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>

namespace power {

// Continues `crc` (0 to start) over `size` bytes.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);
// Three independent CRCs (from 0) of three n-byte blocks at once: the crc32 instruction has a
// latency of about three cycles and a throughput of one, so three chains run at about three
// times the speed of one. out[i] == crc32c(blocks[i], n).
void crc32c_x3(const uint8_t* const blocks[3], size_t n, uint32_t out[3]);
// The table version (tests compare the two).
uint32_t crc32c_portable(const void* data, size_t size, uint32_t crc = 0);

}  // namespace power
