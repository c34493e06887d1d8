#include "device/weights_cache.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/file.h"

namespace power {

namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finalizer
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

}  // namespace

std::string_view cache_policy_name(CachePolicy p) {
  return p == CachePolicy::kLru ? "lru" : "lfru";
}

Result<CachePolicy> parse_cache_policy(std::string_view text) {
  if (text == "lfru") return CachePolicy::kLfru;
  if (text == "lru") return CachePolicy::kLru;
  return Status(StatusCode::kInvalidArgument, "unknown weights cache policy")
      .with("policy", std::string(text))
      .with("expected", "lfru or lru");
}

size_t WeightsCache::KeyHash::operator()(const Key& k) const {
  return static_cast<size_t>(mix(k.owner * 0x9e3779b97f4a7c15ULL ^ k.item));
}

WeightsCache::WeightsCache(uint64_t capacity_bytes, CachePolicy policy)
    : capacity_(capacity_bytes), policy_(policy) {
  if (policy_ == CachePolicy::kLfru) sketch_.assign(4 * kSketchWidth, 0);
}

WeightsCache::~WeightsCache() = default;

uint64_t WeightsCache::new_owner() {
  std::lock_guard<std::mutex> lock(mu_);
  return next_owner_++;
}

void WeightsCache::drop_owner(uint64_t owner) {
  std::lock_guard<std::mutex> lock(mu_);
  for (List& b : buckets_) {
    for (auto it = b.begin(); it != b.end();) {
      auto next = std::next(it);
      if (it->key.owner == owner) erase(it, b);
      it = next;
    }
  }
}

uint32_t WeightsCache::score_of(const Entry& e) const {
  const uint64_t age = std::min<uint64_t>((clock_ - e.last) / kAgeUnit, 255);
  const uint32_t recency = 255 - static_cast<uint32_t>(age);
  return policy_ == CachePolicy::kLru ? recency : e.heat * 256 + recency;
}

uint32_t WeightsCache::sketch_get(const Key& k) const {
  const uint64_t h = KeyHash()(k);
  uint32_t est = 255;
  for (int r = 0; r < 4; ++r) {
    const size_t i = static_cast<size_t>(mix(h + static_cast<uint64_t>(r) * 0x632be59bd9b4e019ULL) &
                                         (kSketchWidth - 1));
    est = std::min<uint32_t>(est, sketch_[static_cast<size_t>(r) * kSketchWidth + i]);
  }
  return est;
}

uint32_t WeightsCache::sketch_add(const Key& k) {
  const uint64_t h = KeyHash()(k);
  // Conservative update: only the counters at the minimum grow (fewer over-estimates).
  const uint32_t est = sketch_get(k);
  if (est >= kMaxHeat) return est;
  for (int r = 0; r < 4; ++r) {
    const size_t i = static_cast<size_t>(mix(h + static_cast<uint64_t>(r) * 0x632be59bd9b4e019ULL) &
                                         (kSketchWidth - 1));
    uint8_t& c = sketch_[static_cast<size_t>(r) * kSketchWidth + i];
    if (c == est) ++c;
  }
  return est + 1;
}

void WeightsCache::tick() {
  ++clock_;
  if (policy_ == CachePolicy::kLfru && clock_ % kHalvingPeriod == 0) halve();
}

void WeightsCache::halve() {
  for (uint8_t& c : sketch_) c = static_cast<uint8_t>(c >> 1);
  // Bucket h moves to h / 2: buckets 2k and 2k + 1 merge into k, most recent first.
  auto newer = [](const Entry& a, const Entry& b) { return a.last > b.last; };
  for (uint32_t h = 1; h <= kMaxHeat; ++h) {
    List& from = buckets_[h];
    if (from.empty()) continue;
    for (Entry& e : from) e.heat = h / 2;
    buckets_[h / 2].merge(from, newer);
  }
}

WeightsCache::List* WeightsCache::lowest() {
  for (List& b : buckets_) {
    if (!b.empty()) return &b;
  }
  return nullptr;
}

void WeightsCache::erase(List::iterator it, List& from) {
  stats_.bytes -= it->bytes;
  --stats_.entries;
  index_.erase(it->key);
  from.erase(it);
}

bool WeightsCache::lookup(uint64_t owner, uint64_t item, uint8_t* dst, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const Key key{owner, item};
  tick();
  if (policy_ == CachePolicy::kLfru) sketch_add(key);
  auto found = index_.find(key);
  if (found == index_.end() || found->second->bytes != bytes) {
    ++stats_.misses;
    return false;
  }
  ++stats_.hits;
  List::iterator it = found->second;
  List& from = bucket(it->heat);
  it->last = clock_;
  if (policy_ == CachePolicy::kLfru && it->heat < kMaxHeat) ++it->heat;
  // Most recent first in its (new) bucket; list iterators stay valid across splice.
  bucket(it->heat).splice(bucket(it->heat).begin(), from, it);
  std::memcpy(dst, it->data.get(), bytes);
  return true;
}

bool WeightsCache::offer(uint64_t owner, uint64_t item, const uint8_t* src, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  const Key key{owner, item};
  if (index_.count(key) != 0) return true;  // another thread's read got there first
  if (bytes > capacity_) {
    ++stats_.rejected;
    return false;
  }
  const uint32_t heat = policy_ == CachePolicy::kLfru ? std::max<uint32_t>(sketch_get(key), 1) : 0;
  const uint32_t candidate = policy_ == CachePolicy::kLru ? 255 : heat * 256 + 255;
  // The entries it would evict, lowest score first; it enters only above every one of them.
  uint64_t freed = capacity_ - stats_.bytes;
  std::vector<std::pair<List*, List::iterator>> victims;
  for (List& b : buckets_) {
    if (freed >= bytes) break;
    for (auto it = b.end(); it != b.begin() && freed < bytes;) {
      --it;
      if (policy_ == CachePolicy::kLfru && score_of(*it) >= candidate) {
        ++stats_.rejected;
        return false;
      }
      victims.emplace_back(&b, it);
      freed += it->bytes;
    }
  }
  for (auto& [b, it] : victims) {
    erase(it, *b);
    ++stats_.evictions;
  }
  Entry e;
  e.key = key;
  e.data.reset(new uint8_t[bytes]);
  std::memcpy(e.data.get(), src, bytes);
  e.bytes = bytes;
  e.heat = heat;
  e.last = clock_;
  List& to = bucket(heat);
  to.push_front(std::move(e));
  index_.emplace(key, to.begin());
  stats_.bytes += bytes;
  ++stats_.entries;
  ++stats_.admitted;
  return true;
}

WeightsCacheStats WeightsCache::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  WeightsCacheStats s = stats_;
  s.capacity_bytes = capacity_;
  return s;
}

std::optional<uint32_t> WeightsCache::score(uint64_t owner, uint64_t item) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = index_.find(Key{owner, item});
  if (found == index_.end()) return std::nullopt;
  return score_of(*found->second);
}

std::optional<uint32_t> WeightsCache::heat(uint64_t owner, uint64_t item) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto found = index_.find(Key{owner, item});
  if (found == index_.end()) return std::nullopt;
  return found->second->heat;
}

Result<std::unique_ptr<CachedRows>> CachedRows::open(std::shared_ptr<WeightsCache> cache,
                                                     const std::string& path, uint64_t file_offset,
                                                     uint64_t row_bytes, int64_t n_rows) {
  std::unique_ptr<CachedRows> r(new CachedRows());
  r->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (r->fd_ < 0) {
    return Status(StatusCode::kIo, "cannot open the artifact for cached row reads")
        .with("path", path)
        .with("error", std::strerror(errno));
  }
  r->owner_ = cache->new_owner();
  r->cache_ = std::move(cache);
  r->path_ = path;
  r->file_offset_ = file_offset;
  r->row_bytes_ = row_bytes;
  r->n_rows_ = n_rows;
  return r;
}

CachedRows::~CachedRows() {
  if (cache_ != nullptr) cache_->drop_owner(owner_);
  if (fd_ >= 0) ::close(fd_);
}

Status CachedRows::read(int64_t row, uint8_t* dst) const {
  if (row < 0 || row >= n_rows_) {
    return Status(StatusCode::kOutOfRange, "row beyond the table").with("row", row);
  }
  const auto item = static_cast<uint64_t>(row);
  if (cache_->lookup(owner_, item, dst, row_bytes_)) {
    hits_.fetch_add(1, std::memory_order_relaxed);
    return Status();
  }
  misses_.fetch_add(1, std::memory_order_relaxed);
  POWER_RETURN_IF_ERROR(pread_all(fd_, dst, row_bytes_, file_offset_ + item * row_bytes_, path_));
  read_bytes_.fetch_add(row_bytes_, std::memory_order_relaxed);
  cache_->offer(owner_, item, dst, row_bytes_);
  return Status();
}

CachedRows::Counters CachedRows::counters() const {
  return {hits_.load(std::memory_order_relaxed), misses_.load(std::memory_order_relaxed),
          read_bytes_.load(std::memory_order_relaxed)};
}

}  // namespace power
