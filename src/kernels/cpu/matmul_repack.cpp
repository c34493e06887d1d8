// Repacking Q4_0 / Q8_0 / Q4_K weights into the 8-row interleaved layout (matmul_repack.h) and the
// registry through which matmul() finds the packed copies.
#include "kernels/cpu/matmul_repack.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/env.h"
#include "base/huge_pages.h"
#include "base/log.h"
#include "base/secure_memory.h"

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

// The packed copy's shape for `w` (data not yet set).
std::shared_ptr<kernels::PackedMatrix> packed_shape(const TensorView& w) {
  auto p = std::make_shared<kernels::PackedMatrix>();
  p->type = w.type;
  p->k = w.ne[0];
  p->rows = w.ne[1];
  p->row_stride = w.nb[1];
  p->n_groups = w.ne[1] / kernels::kPackRows;
  const int64_t nb = w.ne[0] / kernels::packed_block_elems(w.type);
  p->group_bytes = static_cast<uint64_t>(nb) * kernels::packed_block_bytes(w.type);
  return p;
}

// Writes the packed copy of `w` at p.data.
void pack_into(const TensorView& w, const kernels::PackedMatrix& p) {
  const int64_t nb = w.ne[0] / kernels::packed_block_elems(w.type);
  const uint64_t rec = kernels::packed_block_bytes(w.type);
  const auto* base = static_cast<const uint8_t*>(w.data);
  uint8_t* mem = p.data.get();
  for (int64_t g = 0; g < p.n_groups; ++g) {
    const uint8_t* rows[kernels::kPackRows];
    for (int i = 0; i < kernels::kPackRows; ++i) {
      rows[i] = base + static_cast<uint64_t>(g * kernels::kPackRows + i) * w.nb[1];
    }
    uint8_t* out = mem + static_cast<uint64_t>(g) * p.group_bytes;
    for (int64_t b = 0; b < nb; ++b)
      pack_block(w.type, rows, b, out + static_cast<uint64_t>(b) * rec);
  }
}

bool packable(const TensorView& w) {
  return w.data != nullptr && matmul_repack_supported(w.type) && w.ne[2] == 1 && w.ne[3] == 1 &&
         w.ne[1] >= kernels::kPackRows && w.ne[0] > 0 &&
         w.ne[0] % kernels::packed_block_elems(w.type) == 0;
}

}  // namespace

bool matmul_repack_enabled() {
  return env_switch_on("POWER_REPACK");
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
  return add_all(std::span<const TensorView>(&w, 1)) == 1;
}

int64_t RepackedWeights::add_all(std::span<const TensorView> ws,
                                 const std::function<void(const TensorView&)>& packed_one) {
  if (!matmul_repack_enabled()) return 0;
  Registry& reg = registry();
  // How many of `ws` this owner now serves from packed copies (a view repeated in `ws`
  // counts each time).
  auto served = [&]() {
    int64_t n = 0;
    for (const TensorView& w : ws) {
      if (!packable(w) || std::find(keys_.begin(), keys_.end(), w.data) == keys_.end()) continue;
      auto it = reg.entries.find(w.data);
      n += it != reg.entries.end() && same_view(*it->second.packed, w) ? 1 : 0;
    }
    return n;
  };
  // This owner takes a share of a registered copy (under the registry's lock).
  auto adopt = [&](Entry& e, const void* key) {
    ++e.owners;
    keys_.push_back(key);
    bytes_ += e.packed->bytes();
  };
  // Views this owner holds already, or another owner packed: shared. The rest are packed here.
  std::vector<const TensorView*> todo;
  {
    std::unique_lock lock(reg.mu);
    for (const TensorView& w : ws) {
      if (!packable(w)) continue;
      if (std::find(keys_.begin(), keys_.end(), w.data) != keys_.end()) continue;
      auto it = reg.entries.find(w.data);
      if (it != reg.entries.end()) {
        if (same_view(*it->second.packed, w)) adopt(it->second, w.data);  // else: another view
        continue;
      }
      bool dup = false;  // the same view twice in `ws`
      for (const TensorView* t : todo) dup = dup || t->data == w.data;
      if (!dup) todo.push_back(&w);
    }
    if (todo.empty()) return served();
  }
  // One huge-page region for all the new copies (base/huge_pages.h): decode streams through
  // them every token, and 4 KiB pages cost a page walk per 4 KiB of that stream.
  std::vector<std::shared_ptr<kernels::PackedMatrix>> packs;
  std::vector<uint64_t> offsets;
  uint64_t total = 0;
  for (const TensorView* w : todo) {
    packs.push_back(packed_shape(*w));
    offsets.push_back(total);
    total += (packs.back()->bytes() + 63) / 64 * 64;
  }
  // Copies of decrypted weights (an encrypted container) are secrets like their source:
  // locked where allowed, zeroed when freed (docs/CONFIDENTIAL.md "Encrypted weights").
  const bool secret = in_locked_buffer(todo.front()->data);
  Result<HugeRegion> region = HugeRegion::allocate(total, secret);
  if (!region.ok()) {
    POWER_LOG_WARN("weights stay unpacked: {}", region.status().to_string());
    std::shared_lock lock(reg.mu);
    return served();
  }
  auto shared_region = std::make_shared<HugeRegion>(std::move(region).value());
  if (shared_region->advised()) huge_bytes_ += shared_region->size();
  // Pack outside the lock (it reads every matrix), then publish unless someone else won.
  for (size_t i = 0; i < todo.size(); ++i) {
    packs[i]->data = std::shared_ptr<uint8_t>(shared_region, shared_region->data() + offsets[i]);
    pack_into(*todo[i], *packs[i]);
    if (packed_one) packed_one(*todo[i]);
  }
  std::unique_lock lock(reg.mu);
  for (size_t i = 0; i < todo.size(); ++i) {
    const TensorView& w = *todo[i];
    auto [it, inserted] = reg.entries.try_emplace(w.data);
    if (inserted) {
      it->second.packed = std::move(packs[i]);
      reg.size.fetch_add(1, std::memory_order_relaxed);
    } else if (!same_view(*it->second.packed, w)) {
      continue;
    }
    adopt(it->second, w.data);
  }
  return served();
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

std::span<const uint8_t> packed_copy_bytes(const TensorView& w) {
  const std::shared_ptr<const kernels::PackedMatrix> p = kernels::find_packed(w);
  if (p == nullptr || p->data == nullptr) return {};
  return {p->data.get(), static_cast<size_t>(p->n_groups) * p->group_bytes};
}

uint64_t packed_bytes(const TensorView& w) {
  if (!matmul_repack_enabled() || !packable(w)) return 0;
  return packed_shape(w)->bytes();
}

std::shared_ptr<const kernels::PackedMatrix> make_packed(const TensorView& w,
                                                         std::shared_ptr<uint8_t> mem) {
  if (packed_bytes(w) == 0 || mem == nullptr) return nullptr;
  std::shared_ptr<kernels::PackedMatrix> p = packed_shape(w);
  p->data = std::move(mem);
  pack_into(w, *p);
  return p;
}

bool matmul_uses_repacked(const TensorView& w) {
  return matmul_repack_supported(w.type) && kernels::find_packed(w) != nullptr;
}

}  // namespace power
