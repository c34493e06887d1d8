#include "runtime/prefix_cache.h"

#include <algorithm>

namespace power::runtime {

namespace {
constexpr uint64_t kRoot = 0x9e3779b97f4a7c15ull;
}

PrefixCache::~PrefixCache() {
  clear();
}

uint64_t PrefixCache::key_of(uint64_t parent, std::span<const int32_t> block_tokens) const {
  // FNV-1a over the parent key and the token ids.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  mix(parent);
  for (int32_t t : block_tokens) mix(static_cast<uint32_t>(t));
  return h == 0 ? 1 : h;
}

PrefixCache::Match PrefixCache::match(std::span<const int32_t> tokens, int64_t max_blocks) {
  const int bt = cache_->config().block_tokens;
  Match m;
  std::vector<std::list<uint64_t>::iterator> touched;
  size_t usable = 0;  // blocks up to the deepest checkpoint (every block without a state pool)
  uint64_t parent = kRoot;
  for (int64_t b = 0; b < max_blocks && (b + 1) * bt <= static_cast<int64_t>(tokens.size()); ++b) {
    auto span = tokens.subspan(static_cast<size_t>(b * bt), static_cast<size_t>(bt));
    const uint64_t key = key_of(parent, span);
    auto it = map_.find(key);
    if (it == map_.end() || it->second.parent != parent ||
        !std::equal(span.begin(), span.end(), it->second.tokens.begin(), it->second.tokens.end())) {
      break;
    }
    m.blocks.push_back(it->second.block);
    touched.push_back(it->second.lru);
    if (state_ == nullptr) {
      usable = m.blocks.size();
    } else if (it->second.checkpoint >= 0) {
      usable = m.blocks.size();
      m.checkpoint = it->second.checkpoint;
    }
    parent = key;
  }
  m.chain_blocks = static_cast<int64_t>(m.blocks.size());
  m.blocks.resize(usable);
  // Children first, so that parents end up more recent than their children.
  for (auto t = touched.rbegin(); t != touched.rend(); ++t) lru_.splice(lru_.begin(), lru_, *t);
  return m;
}

void PrefixCache::insert(std::span<const int32_t> tokens, int64_t n_written,
                         const std::vector<int>& blocks, std::span<const Checkpoint> checkpoints) {
  const int bt = cache_->config().block_tokens;
  const int64_t full = std::min<int64_t>(n_written / bt, static_cast<int64_t>(blocks.size()));
  std::vector<bool> taken(checkpoints.size(), false);
  pending_ -= static_cast<int>(checkpoints.size());
  uint64_t parent = kRoot;
  for (int64_t b = 0; b < full && (b + 1) * bt <= static_cast<int64_t>(tokens.size()); ++b) {
    auto span = tokens.subspan(static_cast<size_t>(b * bt), static_cast<size_t>(bt));
    const uint64_t key = key_of(parent, span);
    auto it = map_.find(key);
    if (it != map_.end()) {
      if (it->second.parent != parent ||
          !std::equal(span.begin(), span.end(), it->second.tokens.begin(),
                      it->second.tokens.end())) {
        break;  // a collision: leave the existing entry, cache nothing deeper
      }
      lru_.splice(lru_.begin(), lru_, it->second.lru);
    } else {
      if (map_.size() >= max_entries_ && !evict_one()) break;
      Entry e;
      e.parent = parent;
      e.block = blocks[static_cast<size_t>(b)];
      e.tokens.assign(span.begin(), span.end());
      cache_->retain_block(e.block);
      lru_.push_front(key);
      e.lru = lru_.begin();
      it = map_.emplace(key, std::move(e)).first;
    }
    for (size_t c = 0; c < checkpoints.size(); ++c) {
      if (checkpoints[c].block == b && !taken[c] && it->second.checkpoint < 0) {
        it->second.checkpoint = checkpoints[c].slot;
        taken[c] = true;
        ++checkpoints_;
      }
    }
    parent = key;
  }
  for (size_t c = 0; c < checkpoints.size(); ++c) {
    if (!taken[c] && state_ != nullptr) state_->release(checkpoints[c].slot);
  }
}

int PrefixCache::take_checkpoint() {
  if (state_ == nullptr || max_checkpoints_ <= 0) return -1;
  if (checkpoints_ + pending_ < max_checkpoints_) {
    Result<int> slot = state_->allocate();
    if (slot.ok()) {
      ++pending_;
      return *slot;
    }
  }
  for (auto k = lru_.rbegin(); k != lru_.rend(); ++k) {  // the least recently used one's
    Entry& e = map_.find(*k)->second;
    if (e.checkpoint >= 0) {
      const int slot = e.checkpoint;
      e.checkpoint = -1;
      --checkpoints_;
      ++pending_;
      return slot;
    }
  }
  return -1;
}

void PrefixCache::drop_checkpoint(int slot) {
  --pending_;
  if (state_ != nullptr) state_->release(slot);
}

void PrefixCache::erase(std::unordered_map<uint64_t, Entry>::iterator it) {
  cache_->release_block(it->second.block);
  if (it->second.checkpoint >= 0) {
    state_->release(it->second.checkpoint);
    --checkpoints_;
  }
  lru_.erase(it->second.lru);
  map_.erase(it);
}

bool PrefixCache::evict_one() {
  for (auto k = lru_.rbegin(); k != lru_.rend(); ++k) {
    auto it = map_.find(*k);
    if (cache_->block_refs(it->second.block) == 1) {
      erase(it);
      return true;
    }
  }
  return false;
}

int64_t PrefixCache::idle_blocks() const {
  int64_t n = 0;
  for (const auto& [key, e] : map_) n += cache_->block_refs(e.block) == 1 ? 1 : 0;
  return n;
}

void PrefixCache::clear() {
  while (!map_.empty()) erase(map_.begin());
}

}  // namespace power::runtime
