// KV cache storage in fixed-size blocks with reference counts.
//
// A KvCache owns, for every layer, K and V storage for `n_blocks` blocks of `block_tokens`
// positions; one position holds n_kv_heads * head_dim_k keys and n_kv_heads * head_dim_v
// values in the cache dtype (F16 default, or F32). All memory is allocated when the cache is
// made (the planned size is bytes_total()), never while decoding.
// A KvSequence is one sequence's view: a block table (block i holds positions
// [i*block_tokens, (i+1)*block_tokens)) plus the number of positions written. Blocks are
// ref-counted so that sequences can share a prefix; truncate() drops positions past n (the
// rollback of speculative decoding) and releases blocks no longer needed.
// Sharing: share_prefix() adopts full blocks another sequence wrote (prefix reuse; each is
// retained). A sequence never writes into a block it shares: truncate() to a position inside
// a shared block copies that block first (copy-on-write), so later writes stay private.
// Thread-safety: block allocation and reference counts are guarded by a mutex; writing and
// reading positions of one sequence is the caller's to serialize.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "base/status.h"
#include "format/ggml_types.h"

namespace power {

class RecurrentState;

struct KvCacheConfig {
  int n_layer = 0;  // 0: a model without attention layers (blocks count positions only)
  int n_kv_heads = 0;
  int head_dim_k = 0;
  int head_dim_v = 0;
  int block_tokens = 16;
  int n_blocks = 0;
  GgmlType dtype = GgmlType::F16;  // F16 or F32
};

class KvCache {
 public:
  static Result<std::unique_ptr<KvCache>> create(const KvCacheConfig& config);
  // Bytes a cache with this config holds (for admission and --verbose).
  static Result<uint64_t> planned_bytes(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return cfg_; }
  uint64_t bytes_total() const { return bytes_total_; }
  int blocks_free() const;
  int blocks_used() const { return cfg_.n_blocks - blocks_free(); }

  // Takes a free block (ref count 1); kResourceExhausted when none is free.
  Result<int> allocate_block();
  void retain_block(int block);
  void release_block(int block);
  int block_refs(int block) const;
  // Bytes one block holds over all layers (K and V).
  uint64_t block_bytes() const {
    return (k_pos_bytes_ + v_pos_bytes_) * cfg_.block_tokens * cfg_.n_layer;
  }
  // Copies every layer's K and V of block `src` into block `dst` (copy-on-write).
  void copy_block(int src, int dst);

  // Writes one position's keys/values (f32 in, stored in the cache dtype).
  void write_k(int layer, int block, int slot, const float* k);
  void write_v(int layer, int block, int slot, const float* v);
  // Reads one position's keys/values for one KV head as f32.
  void read_k(int layer, int block, int slot, int head, float* out) const;
  void read_v(int layer, int block, int slot, int head, float* out) const;
  // One position's stored key/value row for one KV head, in the cache dtype (head_dim floats, or
  // head_dim IEEE halves for F16). Attention reads these in place (kernels/cpu/ops.h
  // dot_f16_rows / axpy_f16_rows convert while they multiply) instead of copying each 64-value
  // row out through read_k / read_v.
  const uint8_t* k_row(int layer, int block, int slot, int head) const {
    return k_ptr(layer, block, slot, head);
  }
  const uint8_t* v_row(int layer, int block, int slot, int head) const {
    return v_ptr(layer, block, slot, head);
  }

 private:
  explicit KvCache(const KvCacheConfig& cfg) : cfg_(cfg) {}
  // One KV head's row of one position (layout in kv_cache.cpp: [block][head][slot][dim]).
  uint8_t* k_ptr(int layer, int block, int slot, int head) const;
  uint8_t* v_ptr(int layer, int block, int slot, int head) const;

  KvCacheConfig cfg_;
  uint64_t elem_bytes_ = 2;
  uint64_t k_pos_bytes_ = 0, v_pos_bytes_ = 0;
  uint64_t bytes_total_ = 0;
  std::vector<std::unique_ptr<uint8_t[]>> k_;  // per layer
  std::vector<std::unique_ptr<uint8_t[]>> v_;
  mutable std::mutex mu_;
  std::vector<int> refs_;
  std::vector<int> free_list_;
};

class KvSequence {
 public:
  explicit KvSequence(KvCache* cache) : cache_(cache) {}
  ~KvSequence();
  KvSequence(const KvSequence&) = delete;
  KvSequence& operator=(const KvSequence&) = delete;

  KvCache& cache() const { return *cache_; }
  int n_tokens() const { return n_tokens_; }
  const std::vector<int>& blocks() const { return blocks_; }
  int capacity_tokens() const;

  // Makes room for positions [0, n): allocates blocks as needed. Fails with
  // kResourceExhausted (nothing changed) when the cache has too few free blocks.
  Status reserve(int n);
  // Records that positions [0, n) are written (n <= capacity).
  void set_n_tokens(int n);
  // Drops positions >= n and releases blocks past the last one needed. A kept partial block
  // that other sequences share is replaced by a private copy (kResourceExhausted when no free
  // block is left for the copy; positions are dropped either way and the shared block kept).
  Status truncate(int n);
  // Adopts `blocks` (full, already written by another sequence) as this empty sequence's
  // first positions: retains each and sets n_tokens to blocks.size() * block_tokens.
  void share_prefix(const std::vector<int>& blocks);
  // The sequence's slot of recurrent state (models with recurrent layers; null otherwise). The
  // sequence releases the slot when it is destroyed.
  void attach_recurrent(RecurrentState* state, int slot);
  RecurrentState* recurrent() const { return recurrent_; }
  int recurrent_slot() const { return recurrent_slot_; }
  // Block and slot of position pos.
  int block_of(int pos) const { return blocks_[static_cast<size_t>(pos / block_tokens())]; }
  int slot_of(int pos) const { return pos % block_tokens(); }

 private:
  int block_tokens() const { return cache_->config().block_tokens; }
  KvCache* cache_;
  std::vector<int> blocks_;
  int n_tokens_ = 0;
  RecurrentState* recurrent_ = nullptr;
  int recurrent_slot_ = -1;
};

}  // namespace power
