// Blobs: content-addressed files blobs/sha256-<hex>, written once and never modified.
//
// A blob enters the store only by commit_blob(): a staging file whose digest the caller has
// verified is made read-only, renamed into blobs/ (same filesystem, so the name appears with
// all its bytes or not at all) and the directory is fsynced. Callers hold the blob's digest
// lock (StoreLayout::digest_lock_path) around check + commit, so two processes never commit
// the same blob twice. Garbage collection holds the store lock exclusively, which every pull
// holds shared, so it never removes a blob a running pull is about to reference.
// Thread-safety: functions are reentrant; cross-process exclusion is by the locks above.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/sha256.h"
#include "base/status.h"
#include "store/layout.h"

namespace power::store {

enum class BlobState { kMissing, kOk, kCorrupt };

struct BlobCheck {
  BlobState state = BlobState::kMissing;
  uint64_t size_bytes = 0;
  std::string problem;  // why kCorrupt
};

// Size is checked when expected_size is given; the SHA-256 of the bytes when verify_hash.
Result<BlobCheck> check_blob(const StoreLayout& layout, const Sha256Digest& digest,
                             std::optional<uint64_t> expected_size, bool verify_hash);

// Moves a verified staging file to blobs/sha256-<hex>, durably.
Status commit_blob(const StoreLayout& layout, const std::string& staging_path,
                   const Sha256Digest& digest);

struct BlobInfo {
  Sha256Digest digest{};
  uint64_t size_bytes = 0;
};
// Every blobs/sha256-<hex> file (other names are ignored), sorted by digest.
Result<std::vector<BlobInfo>> list_blobs(const StoreLayout& layout);

struct GcResult {
  std::vector<BlobInfo> removed;
  uint64_t freed_bytes = 0;
};
// Removes the blobs no manifest references. The caller holds the store lock exclusively.
// Refuses (kept blobs, error) when a manifest cannot be read at all, since its references
// are unknown.
Result<GcResult> collect_garbage_locked(const StoreLayout& layout);

}  // namespace power::store
