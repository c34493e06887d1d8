#include "device/kv_cache.h"

#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "base/checked.h"
#include "base/cpu.h"
#include "device/recurrent_state.h"
#include "kernels/cpu/isa.h"
#include "tensor/half.h"

namespace power {

Result<uint64_t> KvCache::planned_bytes(const KvCacheConfig& c) {
  if (c.dtype != GgmlType::F16 && c.dtype != GgmlType::F32) {
    return Status(StatusCode::kUnsupported, "KV cache dtype must be F16 or F32")
        .with("dtype", ggml_type_name(c.dtype));
  }
  if (c.block_tokens <= 0 || c.n_blocks <= 0 || c.n_layer < 0) {
    return Status(StatusCode::kInvalidArgument, "KV cache dimensions must be positive");
  }
  // A model without attention layers (only recurrent state) still counts positions in blocks;
  // they hold no bytes.
  if (c.n_layer == 0) return uint64_t{0};
  if (c.n_kv_heads <= 0 || c.head_dim_k <= 0 || c.head_dim_v <= 0) {
    return Status(StatusCode::kInvalidArgument, "KV cache dimensions must be positive");
  }
  const uint64_t elem = c.dtype == GgmlType::F16 ? 2 : 4;
  uint64_t per_pos = static_cast<uint64_t>(c.n_kv_heads) * (c.head_dim_k + c.head_dim_v) * elem;
  uint64_t total = 0;
  if (!checked_mul<uint64_t>(per_pos, static_cast<uint64_t>(c.block_tokens), &total) ||
      !checked_mul<uint64_t>(total, static_cast<uint64_t>(c.n_blocks), &total) ||
      !checked_mul<uint64_t>(total, static_cast<uint64_t>(c.n_layer), &total)) {
    return Status(StatusCode::kDoesNotFit, "KV cache size overflows");
  }
  return total;
}

Result<std::unique_ptr<KvCache>> KvCache::create(const KvCacheConfig& config) {
  POWER_ASSIGN_OR_RETURN(uint64_t bytes, planned_bytes(config));
  std::unique_ptr<KvCache> kv(new KvCache(config));
  kv->elem_bytes_ = config.dtype == GgmlType::F16 ? 2 : 4;
  kv->k_pos_bytes_ = static_cast<uint64_t>(config.n_kv_heads) * config.head_dim_k * kv->elem_bytes_;
  kv->v_pos_bytes_ = static_cast<uint64_t>(config.n_kv_heads) * config.head_dim_v * kv->elem_bytes_;
  kv->bytes_total_ = bytes;
  const uint64_t positions = static_cast<uint64_t>(config.n_blocks) * config.block_tokens;
  for (int l = 0; l < config.n_layer; ++l) {
    kv->k_.emplace_back(new (std::nothrow) uint8_t[positions * kv->k_pos_bytes_]);
    kv->v_.emplace_back(new (std::nothrow) uint8_t[positions * kv->v_pos_bytes_]);
    if (!kv->k_.back() || !kv->v_.back()) {
      return Status(StatusCode::kResourceExhausted, "cannot allocate the KV cache")
          .with("bytes", bytes);
    }
  }
  kv->refs_.assign(static_cast<size_t>(config.n_blocks), 0);
  for (int b = config.n_blocks - 1; b >= 0; --b) kv->free_list_.push_back(b);
  return kv;
}

int KvCache::blocks_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(free_list_.size());
}

Result<int> KvCache::allocate_block() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_list_.empty()) {
    return Status(StatusCode::kResourceExhausted, "KV cache has no free block")
        .with("blocks", cfg_.n_blocks);
  }
  int b = free_list_.back();
  free_list_.pop_back();
  refs_[static_cast<size_t>(b)] = 1;
  return b;
}

void KvCache::retain_block(int block) {
  std::lock_guard<std::mutex> lock(mu_);
  POWER_CHECK(refs_.at(static_cast<size_t>(block)) > 0);
  ++refs_[static_cast<size_t>(block)];
}

void KvCache::release_block(int block) {
  std::lock_guard<std::mutex> lock(mu_);
  int& r = refs_.at(static_cast<size_t>(block));
  POWER_CHECK(r > 0);
  if (--r == 0) free_list_.push_back(block);
}

int KvCache::block_refs(int block) const {
  std::lock_guard<std::mutex> lock(mu_);
  return refs_.at(static_cast<size_t>(block));
}

// Layout of one layer: [block][head][slot][dim]. A block is one contiguous region (copy_block
// copies it whole), and within it the rows one KV head reads for consecutive positions are
// adjacent, so attention's walk over positions streams memory instead of striding over all
// heads (with [slot][head][dim] every row was a cache miss the prefetcher did not hide).
uint8_t* KvCache::k_ptr(int layer, int block, int slot, int head) const {
  const uint64_t row = (static_cast<uint64_t>(block) * cfg_.n_kv_heads + head) * cfg_.block_tokens +
                       static_cast<uint64_t>(slot);
  return k_[static_cast<size_t>(layer)].get() + row * cfg_.head_dim_k * elem_bytes_;
}

uint8_t* KvCache::v_ptr(int layer, int block, int slot, int head) const {
  const uint64_t row = (static_cast<uint64_t>(block) * cfg_.n_kv_heads + head) * cfg_.block_tokens +
                       static_cast<uint64_t>(slot);
  return v_[static_cast<size_t>(layer)].get() + row * cfg_.head_dim_v * elem_bytes_;
}

namespace {

#if defined(__x86_64__)
// Writing K and V rows: F16C rounds to nearest even as f32_to_f16 does, so finite values and
// infinities get the same bits; a NaN stays a NaN (F16C keeps part of its payload where
// f32_to_f16 stores the canonical quiet NaN).
__attribute__((target("avx,f16c"))) void f32_to_f16_f16c(const float* src, uint8_t* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) f32_to_f16_row(src + i, dst + 2 * i, n - i);
}

// Attention converts every cached K and V row it reads; the portable converter costs a few
// branches per element. F16C converts 8 at a time and gives the same bits (every f16 is an
// f32; NaNs keep their payload and get the quiet bit, as f16_to_f32 documents).
__attribute__((target("avx,f16c"))) void f16_to_f32_f16c(const uint8_t* src, float* dst,
                                                         int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + 2 * i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  if (i < n) f16_to_f32_row(src + 2 * i, dst + i, n - i);
}

// POWER_FORCE_ISA=scalar (kernels/cpu/isa.h) keeps the portable converter.
bool use_f16c() {
  static const bool have = cpu_features().avx && cpu_features().f16c;
  return have && cpu_isa() != CpuIsa::kScalar;
}
#endif

void store(uint8_t* dst, const float* src, int64_t n, bool f16) {
  if (f16) {
#if defined(__x86_64__)
    if (use_f16c()) {
      f32_to_f16_f16c(src, dst, n);
      return;
    }
#endif
    f32_to_f16_row(src, dst, n);
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
}

void load(const uint8_t* src, float* dst, int64_t n, bool f16) {
  if (f16) {
#if defined(__x86_64__)
    if (use_f16c()) {
      f16_to_f32_f16c(src, dst, n);
      return;
    }
#endif
    f16_to_f32_row(src, dst, n);
  } else {
    std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
  }
}

}  // namespace

void KvCache::write_k(int layer, int block, int slot, const float* k) {
  for (int h = 0; h < cfg_.n_kv_heads; ++h) {
    store(k_ptr(layer, block, slot, h), k + static_cast<int64_t>(h) * cfg_.head_dim_k,
          cfg_.head_dim_k, cfg_.dtype == GgmlType::F16);
  }
}

void KvCache::write_v(int layer, int block, int slot, const float* v) {
  for (int h = 0; h < cfg_.n_kv_heads; ++h) {
    store(v_ptr(layer, block, slot, h), v + static_cast<int64_t>(h) * cfg_.head_dim_v,
          cfg_.head_dim_v, cfg_.dtype == GgmlType::F16);
  }
}

void KvCache::read_k(int layer, int block, int slot, int head, float* out) const {
  load(k_ptr(layer, block, slot, head), out, cfg_.head_dim_k, cfg_.dtype == GgmlType::F16);
}

void KvCache::read_v(int layer, int block, int slot, int head, float* out) const {
  load(v_ptr(layer, block, slot, head), out, cfg_.head_dim_v, cfg_.dtype == GgmlType::F16);
}

void KvCache::copy_block(int src, int dst) {
  const uint64_t kb = k_pos_bytes_ * cfg_.block_tokens, vb = v_pos_bytes_ * cfg_.block_tokens;
  for (int l = 0; l < cfg_.n_layer; ++l) {
    std::memcpy(k_ptr(l, dst, 0, 0), k_ptr(l, src, 0, 0), kb);
    std::memcpy(v_ptr(l, dst, 0, 0), v_ptr(l, src, 0, 0), vb);
  }
}

// Truncating to 0 never copies, so it cannot fail.
KvSequence::~KvSequence() {
  (void)truncate(0);
  if (recurrent_ != nullptr) recurrent_->release(recurrent_slot_);
}

void KvSequence::attach_recurrent(RecurrentState* state, int slot) {
  if (recurrent_ != nullptr) recurrent_->release(recurrent_slot_);
  recurrent_ = state;
  recurrent_slot_ = slot;
}

int KvSequence::capacity_tokens() const {
  return static_cast<int>(blocks_.size()) * block_tokens();
}

Status KvSequence::reserve(int n) {
  const int need = (n + block_tokens() - 1) / block_tokens();
  std::vector<int> fresh;
  while (static_cast<int>(blocks_.size() + fresh.size()) < need) {
    auto b = cache_->allocate_block();
    if (!b.ok()) {
      for (int x : fresh) cache_->release_block(x);
      return std::move(b).take_status().with("positions", n);
    }
    fresh.push_back(*b);
  }
  blocks_.insert(blocks_.end(), fresh.begin(), fresh.end());
  return Status();
}

void KvSequence::set_n_tokens(int n) {
  POWER_CHECK(n >= 0 && n <= capacity_tokens());
  n_tokens_ = n;
}

Status KvSequence::truncate(int n) {
  if (n < 0) n = 0;
  if (n < n_tokens_) n_tokens_ = n;
  const size_t keep = static_cast<size_t>((n + block_tokens() - 1) / block_tokens());
  while (blocks_.size() > keep) {
    cache_->release_block(blocks_.back());
    blocks_.pop_back();
  }
  // Copy-on-write: the next position written lands in the last kept block when it is partial.
  if (n % block_tokens() != 0 && !blocks_.empty() && cache_->block_refs(blocks_.back()) > 1) {
    auto fresh = cache_->allocate_block();
    if (!fresh.ok()) return std::move(fresh).take_status().with("copy_on_write_position", n);
    cache_->copy_block(blocks_.back(), *fresh);
    cache_->release_block(blocks_.back());
    blocks_.back() = *fresh;
  }
  return Status();
}

void KvSequence::share_prefix(const std::vector<int>& blocks) {
  POWER_CHECK(blocks_.empty() && n_tokens_ == 0);
  for (int b : blocks) {
    cache_->retain_block(b);
    blocks_.push_back(b);
  }
  n_tokens_ = static_cast<int>(blocks.size()) * block_tokens();
}

}  // namespace power
