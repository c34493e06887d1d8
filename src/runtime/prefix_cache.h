// Prefix reuse over the KV blocks: identical prompt prefixes share blocks across requests.
//
// A full block is keyed by a chained hash: key(i) = hash(key(i-1), tokens of block i), so a
// key names the whole prefix up to the end of its block. Each entry keeps the block's tokens
// and its parent key and a lookup compares them, so a hash collision can never hand out the
// wrong KV. The cache holds one reference on every block it lists; a block only the cache
// references is idle and evictable, least recently used first (a lookup touches children
// before parents, so a prefix's tail goes before its head).
// Thread-safety: none; the scheduler that owns it serializes access.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "device/kv_cache.h"

namespace power::runtime {

class PrefixCache {
 public:
  PrefixCache(KvCache* cache, size_t max_entries) : cache_(cache), max_entries_(max_entries) {}
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  // Blocks holding the longest cached prefix of `tokens`, at most max_blocks of them (not
  // retained: the caller adopts them with KvSequence::share_prefix right away).
  std::vector<int> match(std::span<const int32_t> tokens, int64_t max_blocks);
  // Lists the full blocks of `blocks` that hold tokens[0, n_written) (n_written rounded down
  // to whole blocks); entries already present keep their block.
  void insert(std::span<const int32_t> tokens, int64_t n_written, const std::vector<int>& blocks);
  // Frees the least recently used idle block; false when none is idle.
  bool evict_one();
  // Blocks only the cache references (free for the taking).
  int64_t idle_blocks() const;
  size_t entries() const { return map_.size(); }
  void clear();

 private:
  struct Entry {
    uint64_t parent = 0;
    int block = -1;
    std::vector<int32_t> tokens;
    std::list<uint64_t>::iterator lru;  // position in lru_ (front = most recent)
  };
  uint64_t key_of(uint64_t parent, std::span<const int32_t> block_tokens) const;
  void erase(std::unordered_map<uint64_t, Entry>::iterator it);

  KvCache* cache_;
  size_t max_entries_;
  std::unordered_map<uint64_t, Entry> map_;
  std::list<uint64_t> lru_;
};

}  // namespace power::runtime
