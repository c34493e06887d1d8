#include "store/blob_store.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "base/file.h"
#include "base/log.h"
#include "store/manifest.h"

namespace power::store {

Result<BlobCheck> check_blob(const StoreLayout& layout, const Sha256Digest& digest,
                             std::optional<uint64_t> expected_size, bool verify_hash) {
  const std::string path = layout.blob_path(digest);
  BlobCheck check;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return check;
    return Status(StatusCode::kIo, fmt::format("cannot stat blob: {}", std::strerror(errno)))
        .with("path", path);
  }
  check.size_bytes = static_cast<uint64_t>(st.st_size);
  check.state = BlobState::kOk;
  if (!S_ISREG(st.st_mode)) {
    check.state = BlobState::kCorrupt;
    check.problem = "not a regular file";
  } else if (expected_size && check.size_bytes != *expected_size) {
    check.state = BlobState::kCorrupt;
    check.problem = fmt::format("size is {} bytes, expected {}", check.size_bytes, *expected_size);
  } else if (verify_hash) {
    POWER_ASSIGN_OR_RETURN(Sha256Digest actual, sha256_file(path));
    if (actual != digest) {
      check.state = BlobState::kCorrupt;
      check.problem = fmt::format("content hashes to sha256:{}", to_hex(actual));
    }
  }
  return check;
}

Status commit_blob(const StoreLayout& layout, const std::string& staging_path,
                   const Sha256Digest& digest) {
  if (::chmod(staging_path.c_str(), 0444) != 0) {
    return Status(StatusCode::kIo, fmt::format("chmod failed: {}", std::strerror(errno)))
        .with("path", staging_path);
  }
  return rename_durable(staging_path, layout.blob_path(digest));
}

Result<std::vector<BlobInfo>> list_blobs(const StoreLayout& layout) {
  std::vector<BlobInfo> out;
  DIR* dir = ::opendir(layout.blobs_dir().c_str());
  if (dir == nullptr) {
    return Status(StatusCode::kIo, fmt::format("cannot list blobs: {}", std::strerror(errno)))
        .with("path", layout.blobs_dir());
  }
  while (dirent* e = ::readdir(dir)) {
    std::string_view name(e->d_name);
    if (!name.starts_with("sha256-") || name.size() != 7 + 64) continue;
    auto d = parse_sha256_hex(name.substr(7));
    if (!d.ok()) continue;
    struct stat st {};
    std::string path = layout.blobs_dir() + "/" + std::string(name);
    if (::stat(path.c_str(), &st) != 0) continue;
    out.push_back({*d, static_cast<uint64_t>(st.st_size)});
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end(),
            [](const BlobInfo& a, const BlobInfo& b) { return a.digest < b.digest; });
  return out;
}

Result<GcResult> collect_garbage_locked(const StoreLayout& layout) {
  POWER_ASSIGN_OR_RETURN(auto entries, list_manifests(layout));
  for (const auto& e : entries) {
    if (!e.manifest && e.raw_text.empty()) {
      return Status(StatusCode::kIo,
                    "cannot read a manifest, so the blobs it references are unknown; no blob "
                    "was removed")
          .with("model", e.name)
          .with("error", e.error.to_string());
    }
  }
  const auto kept = referenced_digests(entries);
  const std::set<Sha256Digest> keep(kept.begin(), kept.end());
  POWER_ASSIGN_OR_RETURN(auto blobs, list_blobs(layout));
  GcResult result;
  for (const auto& b : blobs) {
    if (keep.count(b.digest) != 0) continue;
    const std::string path = layout.blob_path(b.digest);
    if (::unlink(path.c_str()) != 0) {
      return Status(StatusCode::kIo, fmt::format("cannot remove blob: {}", std::strerror(errno)))
          .with("path", path);
    }
    // No pull runs while the store lock is held exclusively: its lock file can go too.
    ::unlink(layout.digest_lock_path(b.digest).c_str());
    ::unlink(layout.tensor_manifest_path(b.digest).c_str());  // a cache of the blob's tensors
    result.removed.push_back(b);
    result.freed_bytes += b.size_bytes;
  }
  // Per-source lock files of finished pulls (none runs now) would otherwise accumulate.
  if (DIR* locks = ::opendir(layout.locks_dir().c_str())) {
    while (dirent* e = ::readdir(locks)) {
      std::string_view n(e->d_name);
      if (n.starts_with("url-") && n.ends_with(".lock")) {
        ::unlink((layout.locks_dir() + "/" + std::string(n)).c_str());
      }
    }
    ::closedir(locks);
  }
  // Sidecars whose partial download is gone (a process died between commit and cleanup).
  if (DIR* staging = ::opendir(layout.staging_dir().c_str())) {
    while (dirent* e = ::readdir(staging)) {
      std::string_view n(e->d_name);
      if (!n.ends_with(".partial.meta")) continue;
      const std::string meta = layout.staging_dir() + "/" + std::string(n);
      struct stat st {};
      if (::stat(meta.substr(0, meta.size() - 5).c_str(), &st) != 0 && errno == ENOENT) {
        ::unlink(meta.c_str());
      }
    }
    ::closedir(staging);
  }
  if (!result.removed.empty()) POWER_RETURN_IF_ERROR(fsync_directory(layout.blobs_dir()));
  return result;
}

}  // namespace power::store
