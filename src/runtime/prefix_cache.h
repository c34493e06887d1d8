// Prefix reuse over the KV blocks: identical prompt prefixes share blocks across requests.
//
// A full block is keyed by a chained hash: key(i) = hash(key(i-1), tokens of block i), so a
// key names the whole prefix up to the end of its block. Each entry keeps the block's tokens
// and its parent key and a lookup compares them, so a hash collision can never hand out the
// wrong KV. The cache holds one reference on every block it lists; a block only the cache
// references is idle and evictable, least recently used first (a lookup touches children
// before parents, so a prefix's tail goes before its head).
// Models with recurrent layers: shared KV blocks do not give a recurrent layer its state at
// the end of the prefix, so an entry may also hold a state checkpoint (a slot of the replica's
// RecurrentState with the state after the entry's last token). A lookup for such a model stops
// at the deepest entry of the matching chain that has one (without any it finds nothing: the
// prompt is recomputed, never continued from a wrong state). Checkpoints are bounded
// (max_checkpoints); the least recently used one goes first, and a checkpoint goes with its
// entry.
// Thread-safety: none; the scheduler that owns it serializes access.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

#include "device/kv_cache.h"
#include "device/recurrent_state.h"

namespace power::runtime {

class PrefixCache {
 public:
  // `state` (models with recurrent layers): the pool checkpoints live in, at most
  // max_checkpoints of them held at once.
  PrefixCache(KvCache* cache, size_t max_entries, RecurrentState* state = nullptr,
              int max_checkpoints = 0)
      : cache_(cache),
        max_entries_(max_entries),
        state_(state),
        max_checkpoints_(max_checkpoints) {}
  ~PrefixCache();
  PrefixCache(const PrefixCache&) = delete;
  PrefixCache& operator=(const PrefixCache&) = delete;

  struct Match {
    std::vector<int> blocks;   // the usable prefix (not retained: the caller adopts them with
                               // KvSequence::share_prefix right away)
    int checkpoint = -1;       // recurrent models: the slot with the state after those blocks
    int64_t chain_blocks = 0;  // matching blocks, checkpoint or not (>= blocks.size())
  };
  // The longest cached prefix of `tokens`, at most max_blocks blocks; with a state pool only as
  // deep as the deepest checkpoint on it.
  Match match(std::span<const int32_t> tokens, int64_t max_blocks);
  // Checkpoint to attach: the state after block `block` (0-based) of the inserted tokens.
  struct Checkpoint {
    int64_t block = 0;
    int slot = -1;
  };
  // Lists the full blocks of `blocks` that hold tokens[0, n_written) (n_written rounded down
  // to whole blocks); entries already present keep their block. Takes over the slots of
  // `checkpoints`: each goes to its block's entry, or back to the pool when that entry already
  // has one or is not listed.
  void insert(std::span<const int32_t> tokens, int64_t n_written, const std::vector<int>& blocks,
              std::span<const Checkpoint> checkpoints = {});
  // A slot for a new checkpoint (the caller has the pass write it and then hands it to
  // insert(), or gives it back with drop_checkpoint()): from the pool while fewer than
  // max_checkpoints are held or pending, else the least recently used entry's; -1 when none.
  int take_checkpoint();
  void drop_checkpoint(int slot);
  // Frees the least recently used idle block; false when none is idle.
  bool evict_one();
  // Blocks only the cache references (free for the taking).
  int64_t idle_blocks() const;
  size_t entries() const { return map_.size(); }
  int checkpoints() const { return checkpoints_; }
  void clear();

 private:
  struct Entry {
    uint64_t parent = 0;
    int block = -1;
    int checkpoint = -1;  // state slot, or -1
    std::vector<int32_t> tokens;
    std::list<uint64_t>::iterator lru;  // position in lru_ (front = most recent)
  };
  uint64_t key_of(uint64_t parent, std::span<const int32_t> block_tokens) const;
  void erase(std::unordered_map<uint64_t, Entry>::iterator it);

  KvCache* cache_;
  size_t max_entries_;
  RecurrentState* state_;
  int max_checkpoints_;
  int checkpoints_ = 0;  // entries holding one
  int pending_ = 0;      // taken, not yet inserted or dropped
  std::unordered_map<uint64_t, Entry> map_;
  std::list<uint64_t> lru_;
};

}  // namespace power::runtime
