// Repacking Q4_0 / Q8_0 / Q4_K weights into the 8-row interleaved layout (matmul_repack.h) and the
// registry through which matmul() finds the packed copies.
#include "kernels/cpu/matmul_repack.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <shared_mutex>
#include <string>
#include <unordered_map>

#include "kernels/cpu/isa.h"
#include "kernels/cpu/matmul_internal.h"

namespace power {

namespace {

struct Entry {
  std::shared_ptr<const kernels::PackedMatrix> packed;
  int owners = 0;
};

struct Registry {
  std::shared_mutex mu;
  std::unordered_map<const void*, Entry> entries;
  std::atomic<int64_t> size{0};  // lets matmul skip the lock when nothing is packed
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: models may outlive static teardown
  return *r;
}

bool same_view(const kernels::PackedMatrix& p, const TensorView& w) {
  return p.type == w.type && p.k == w.ne[0] && p.rows == w.ne[1] && w.ne[2] == 1 && w.ne[3] == 1 &&
         p.row_stride == w.nb[1];
}

// Q4_K: 8 rows' super-block b (ggml block_q4_K: f16 d, f16 dmin, 12 bytes of 6-bit scales and
// mins, 128 bytes of nibbles) into the record laid out in matmul_repack.h.
void pack_block_q4_k(const uint8_t* const rows[8], int64_t b, uint8_t* out) {
  for (int i = 0; i < kernels::kPackRows; ++i) {
    const uint8_t* blk = rows[i] + static_cast<uint64_t>(b) * 144;
    std::memcpy(out + 2 * i, blk, 2);           // d
    std::memcpy(out + 16 + 2 * i, blk + 2, 2);  // dmin
    const uint8_t* s = blk + 4;
    for (int j = 0; j < 8; ++j) {
      // ggml's get_scale_min_k4.
      const uint8_t sc = j < 4 ? (s[j] & 63) : ((s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4));
      const uint8_t m = j < 4 ? (s[j + 4] & 63) : ((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
      out[32 + 8 * j + i] = sc;
      out[96 + 16 * (j / 2) + 2 * i + (j % 2)] = m;
    }
    for (int ch = 0; ch < 32; ++ch) std::memcpy(out + 160 + 32 * ch + 4 * i, blk + 16 + 4 * ch, 4);
  }
}

// Copies 8 rows' block b into the packed record at `out`.
void pack_block(GgmlType type, const uint8_t* const rows[8], int64_t b, uint8_t* out) {
  if (type == GgmlType::Q4_K) {
    pack_block_q4_k(rows, b, out);
    return;
  }
  const uint64_t src_block = type == GgmlType::Q4_0 ? 18 : 34;
  const int chunks = type == GgmlType::Q4_0 ? 4 : 8;
  for (int i = 0; i < kernels::kPackRows; ++i) {
    const uint8_t* blk = rows[i] + static_cast<uint64_t>(b) * src_block;
    std::memcpy(out + 2 * i, blk, 2);  // f16 d
    for (int c = 0; c < chunks; ++c) std::memcpy(out + 16 + 32 * c + 4 * i, blk + 2 + 4 * c, 4);
  }
}

std::shared_ptr<kernels::PackedMatrix> pack(const TensorView& w) {
  auto p = std::make_shared<kernels::PackedMatrix>();
  p->type = w.type;
  p->k = w.ne[0];
  p->rows = w.ne[1];
  p->row_stride = w.nb[1];
  p->n_groups = w.ne[1] / kernels::kPackRows;
  const int64_t nb = w.ne[0] / kernels::packed_block_elems(w.type);
  const uint64_t rec = kernels::packed_block_bytes(w.type);
  p->group_bytes = static_cast<uint64_t>(nb) * rec;
  const uint64_t total = (p->bytes() + 63) / 64 * 64;
  auto* mem = static_cast<uint8_t*>(::operator new (total, std::align_val_t{64}));
  p->data = std::shared_ptr<uint8_t>(
      mem, [](uint8_t* q) { ::operator delete (q, std::align_val_t{64}); });
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p->n_groups; ++g) {
    const uint8_t* rows[kernels::kPackRows];
    for (int i = 0; i < kernels::kPackRows; ++i) {
      rows[i] = base + static_cast<uint64_t>(g * kernels::kPackRows + i) * w.nb[1];
    }
    uint8_t* out = mem + static_cast<uint64_t>(g) * p->group_bytes;
    for (int64_t b = 0; b < nb; ++b)
      pack_block(w.type, rows, b, out + static_cast<uint64_t>(b) * rec);
  }
  return p;
}

}  // namespace

bool matmul_repack_enabled() {
  const char* v = std::getenv("POWER_REPACK");
  if (v == nullptr) return true;
  const std::string s(v);
  return !(s == "0" || s == "off" || s == "false" || s == "no");
}

bool matmul_repack_supported(GgmlType type) {
  if (kernels::packed_block_bytes(type) == 0) return false;
#if defined(POWER_KERNELS_X86)
  switch (cpu_isa()) {
    case CpuIsa::kAvx512:
      return kernels::matmul_packed_avx512(type) != nullptr;
    case CpuIsa::kAvx2:
      return kernels::matmul_packed_avx2(type) != nullptr;
    case CpuIsa::kScalar:
      break;
  }
#endif
  return false;
}

bool RepackedWeights::add(const TensorView& w) {
  if (w.data == nullptr || !matmul_repack_enabled() || !matmul_repack_supported(w.type)) {
    return false;
  }
  if (w.ne[2] != 1 || w.ne[3] != 1 || w.ne[1] < kernels::kPackRows ||
      w.ne[0] % kernels::packed_block_elems(w.type) != 0 || w.ne[0] <= 0) {
    return false;
  }
  for (const void* k : keys_) {
    if (k == w.data) return true;  // this owner has it already
  }
  Registry& reg = registry();
  {
    std::unique_lock lock(reg.mu);
    auto it = reg.entries.find(w.data);
    if (it != reg.entries.end()) {
      if (!same_view(*it->second.packed, w)) return false;  // another view of these bytes
      ++it->second.owners;
      keys_.push_back(w.data);
      bytes_ += it->second.packed->bytes();
      return true;
    }
  }
  // Pack outside the lock (it reads the whole matrix), then publish unless someone else won.
  std::shared_ptr<kernels::PackedMatrix> p = pack(w);
  std::unique_lock lock(reg.mu);
  auto [it, inserted] = reg.entries.try_emplace(w.data);
  if (inserted) {
    it->second.packed = std::move(p);
    reg.size.fetch_add(1, std::memory_order_relaxed);
  } else if (!same_view(*it->second.packed, w)) {
    return false;
  }
  ++it->second.owners;
  keys_.push_back(w.data);
  bytes_ += it->second.packed->bytes();
  return true;
}

RepackedWeights::~RepackedWeights() {
  if (keys_.empty()) return;
  Registry& reg = registry();
  std::unique_lock lock(reg.mu);
  for (const void* k : keys_) {
    auto it = reg.entries.find(k);
    if (it == reg.entries.end()) continue;
    if (--it->second.owners == 0) {
      reg.entries.erase(it);  // in-flight matmuls hold their own reference
      reg.size.fetch_sub(1, std::memory_order_relaxed);
    }
  }
}

namespace kernels {

std::shared_ptr<const PackedMatrix> find_packed(const TensorView& w) {
  Registry& reg = registry();
  if (reg.size.load(std::memory_order_relaxed) == 0 || packed_block_bytes(w.type) == 0) {
    return nullptr;
  }
  std::shared_lock lock(reg.mu);
  auto it = reg.entries.find(w.data);
  if (it == reg.entries.end() || !same_view(*it->second.packed, w)) return nullptr;
  return it->second.packed;
}

}  // namespace kernels

bool matmul_uses_repacked(const TensorView& w) {
  return matmul_repack_supported(w.type) && kernels::find_packed(w) != nullptr;
}

}  // namespace power
