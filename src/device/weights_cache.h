// A byte-capped cache of weight pieces for skewed access (docs/RESIDENCY.md, "The weights
// cache"): rows of token-embedding tables a budgeted model reads from the artifact, shared by
// every model a Runtime loads.
//
// Policies:
//   lfru  score = heat * 256 + (255 - min(age, 255)). `heat` is the entry's access count
//         (saturating at 255), halved for every entry every 4096 accesses to the cache; `age`
//         is the accesses to the cache since the entry's last one, in units of 16 (so that 255
//         spans one halving period). The entry of lowest score is evicted first. Admission: a
//         piece read after a miss enters only when its own score (its heat from a frequency
//         sketch of recent accesses, age 0) is above that of every entry it would evict, so a
//         scan of pieces used once cannot wipe entries used often.
//   lru   least recently used first; every piece enters.
// Thread-safety: every member function may be called from any thread (one mutex).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"

namespace power {

enum class CachePolicy : uint8_t { kLfru, kLru };
std::string_view cache_policy_name(CachePolicy p);
Result<CachePolicy> parse_cache_policy(std::string_view text);

struct WeightsCacheStats {
  uint64_t capacity_bytes = 0;
  uint64_t bytes = 0;  // of the pieces held
  uint64_t entries = 0;
  uint64_t hits = 0, misses = 0;
  uint64_t admitted = 0, rejected = 0;  // pieces offered after a miss
  uint64_t evictions = 0;
};

class WeightsCache {
 public:
  static constexpr uint64_t kHalvingPeriod = 4096;  // accesses between two halvings of heat
  static constexpr uint64_t kAgeUnit = 16;          // accesses per unit of age
  static constexpr uint32_t kMaxHeat = 255;

  WeightsCache(uint64_t capacity_bytes, CachePolicy policy);
  ~WeightsCache();
  WeightsCache(const WeightsCache&) = delete;
  WeightsCache& operator=(const WeightsCache&) = delete;

  CachePolicy policy() const { return policy_; }
  uint64_t capacity_bytes() const { return capacity_; }

  // A fresh owner id (one per table of one loaded model); its pieces are keyed (owner, item).
  uint64_t new_owner();
  // Drops an owner's pieces (its model unloads).
  void drop_owner(uint64_t owner);

  // One access: when (owner, item) is held, copies its `bytes` bytes into `dst` and returns
  // true (a hit); else false (a miss; the caller reads the piece and may offer it).
  bool lookup(uint64_t owner, uint64_t item, uint8_t* dst, uint64_t bytes);
  // Offers a piece read after a miss. Returns whether it was admitted.
  bool offer(uint64_t owner, uint64_t item, const uint8_t* src, uint64_t bytes);

  WeightsCacheStats stats() const;
  // The entry's current score (lfru formula; lru: 255 - min(age, 255)); nullopt when not held.
  std::optional<uint32_t> score(uint64_t owner, uint64_t item) const;
  std::optional<uint32_t> heat(uint64_t owner, uint64_t item) const;

 private:
  struct Key {
    uint64_t owner = 0, item = 0;
    bool operator==(const Key& o) const { return owner == o.owner && item == o.item; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Entry {
    Key key;
    std::unique_ptr<uint8_t[]> data;
    uint64_t bytes = 0;
    uint32_t heat = 0;
    uint64_t last = 0;  // access clock at its last access
  };
  using List = std::list<Entry>;  // most recent first

  uint32_t score_of(const Entry& e) const;
  void tick();  // one access: the clock, and the periodic halving
  void halve();
  uint32_t sketch_add(const Key& k);  // counts an access, returns the estimate
  uint32_t sketch_get(const Key& k) const;
  List& bucket(uint32_t heat) { return buckets_[policy_ == CachePolicy::kLru ? 0 : heat]; }
  List* lowest();
  void erase(List::iterator it, List& from);

  const uint64_t capacity_;
  const CachePolicy policy_;
  mutable std::mutex mu_;
  std::array<List, kMaxHeat + 1> buckets_;
  std::unordered_map<Key, List::iterator, KeyHash> index_;
  std::vector<uint8_t> sketch_;  // 4 rows of kSketchWidth saturating counters
  static constexpr size_t kSketchWidth = 1u << 16;
  uint64_t clock_ = 0;
  uint64_t next_owner_ = 1;
  WeightsCacheStats stats_;
};

// The rows of one table of the artifact (a token-embedding matrix of a model whose plan
// streams) read through a WeightsCache: a hit copies the cached row, a miss preads it from the
// artifact and offers it. The bytes are the artifact's: identity does not change.
class CachedRows {
 public:
  static Result<std::unique_ptr<CachedRows>> open(std::shared_ptr<WeightsCache> cache,
                                                  const std::string& path, uint64_t file_offset,
                                                  uint64_t row_bytes, int64_t n_rows);
  ~CachedRows();  // closes the file, drops its rows from the cache
  CachedRows(const CachedRows&) = delete;
  CachedRows& operator=(const CachedRows&) = delete;

  uint64_t row_bytes() const { return row_bytes_; }
  // Row `row`'s row_bytes() bytes into dst.
  Status read(int64_t row, uint8_t* dst) const;

  struct Counters {
    uint64_t hits = 0, misses = 0, read_bytes = 0;
  };
  Counters counters() const;

 private:
  CachedRows() = default;
  std::shared_ptr<WeightsCache> cache_;
  std::string path_;
  int fd_ = -1;
  uint64_t owner_ = 0, file_offset_ = 0, row_bytes_ = 0;
  int64_t n_rows_ = 0;
  mutable std::atomic<uint64_t> hits_{0}, misses_{0}, read_bytes_{0};
};

}  // namespace power
