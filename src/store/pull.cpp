#include "store/pull.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>

#include "base/file.h"
#include "base/log.h"
#include "store/blob_store.h"
#include "store/download.h"
#include "store/models.h"
#include "store/source.h"

namespace power::store {
namespace {

struct PartPlan {
  Source source;
  std::string role;
  std::optional<Sha256Digest> pin;
  std::optional<uint64_t> size_bytes;
  std::string recorded_by;  // the model whose manifest supplied the pin (trust on first use)
};

// One place bytes may come from: a mirror candidate or the upstream itself.
struct Origin {
  SourceKind kind = SourceKind::kHttp;
  std::string location;
  bool mirror = false;
  bool send_hf_token = false;
};

std::optional<uint64_t> file_size(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

std::string default_role(size_t index, const std::string& filename, const std::string& first) {
  if (index == 0) return "model";
  std::string lower = filename;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower.find("tok") != std::string::npos) return "tokenizer";
  auto ext = [](const std::string& f) {
    auto dot = f.find_last_of('.');
    return dot == std::string::npos ? std::string() : f.substr(dot);
  };
  if (!ext(first).empty() && ext(filename) == ext(first)) return "model-part";
  return "extra";
}

class Puller {
 public:
  Puller(const StoreLayout& layout, const PullRequest& request, const PullOptions& options)
      : layout_(layout), request_(request), options_(options), config_(options.config) {}

  Result<Manifest> run() {
    Result<Manifest> m = run_inner();
    if (!m.ok()) {
      PullProgress e;
      e.status = "error";
      e.message = m.status().to_string();
      emit(std::move(e));
    }
    return m;
  }

 private:
  Result<Manifest> run_inner();
  Status plan_parts();
  Result<ManifestPart> pull_pinned(const PartPlan& p);
  Result<ManifestPart> pull_unpinned(const PartPlan& p);
  FetchResult fetch_from(const Origin& o, const PartPlan& p, const std::string& staging);

  bool cancelled() const {
    return options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed);
  }
  static Status cancelled_status() { return Status(StatusCode::kCancelled, "pull cancelled"); }

  void emit(PullProgress e) {
    if (!options_.progress) return;
    e.model = name_;
    options_.progress(e);
  }
  void emit_part(std::string status, const PartPlan& p, std::string message = {},
                 uint64_t completed = 0) {
    PullProgress e;
    e.status = std::move(status);
    e.file = p.source.filename;
    if (p.pin) e.digest = digest_string(*p.pin);
    e.source = p.source.original;
    e.message = std::move(message);
    e.completed_bytes = completed;
    e.total_bytes = completed;
    emit(std::move(e));
  }

  const StoreLayout& layout_;
  const PullRequest& request_;
  const PullOptions& options_;
  const StoreConfig& config_;
  std::string name_;
  std::vector<PartPlan> plans_;
};

Status Puller::plan_parts() {
  if (request_.parts.empty()) return Status(StatusCode::kInvalidArgument, "nothing to pull");
  std::set<std::string> filenames;
  for (size_t i = 0; i < request_.parts.size(); ++i) {
    const PartRequest& r = request_.parts[i];
    PartPlan p;
    POWER_ASSIGN_OR_RETURN(p.source, parse_source(r.source, config_));
    if (!filenames.insert(p.source.filename).second) {
      return Status(StatusCode::kInvalidArgument, "two parts have the same file name")
          .with("file", p.source.filename);
    }
    p.pin = r.sha256;
    p.size_bytes = r.size_bytes;
    p.role = !r.role.empty()
                 ? r.role
                 : default_role(i, p.source.filename,
                                plans_.empty() ? p.source.filename : plans_[0].source.filename);
    plans_.push_back(std::move(p));
  }
  name_ =
      request_.name.empty() ? model_name_from_filename(plans_[0].source.filename) : request_.name;
  return validate_model_name(name_);
}

FetchResult Puller::fetch_from(const Origin& o, const PartPlan& p, const std::string& staging) {
  FetchOptions fo;
  fo.expected_size_bytes = p.size_bytes;
  fo.cap_bytes = p.size_bytes ? *p.size_bytes : config_.max_download_bytes;
  fo.resume = true;
  fo.resume_requires_validator = !p.pin;
  fo.config = config_;
  if (o.send_hf_token) fo.bearer_token = config_.hf_token;
  fo.fault_write_limit_bytes = options_.fault_write_limit_bytes;
  fo.cancel = options_.cancel;
  fo.on_progress = [&](uint64_t completed, uint64_t total, double rate) {
    PullProgress e;
    e.status = "downloading";
    e.file = p.source.filename;
    if (p.pin) e.digest = digest_string(*p.pin);
    e.source = o.location;
    e.completed_bytes = completed;
    e.total_bytes = total != 0 ? total : p.size_bytes.value_or(0);
    e.rate_bytes_per_s = rate;
    emit(std::move(e));
  };
  bool restarted_after_mismatch = false;
  bool restarted_after_416 = false;
  for (int64_t attempt = 1;; ++attempt) {
    if (cancelled()) {
      FetchResult c;
      c.status = cancelled_status();
      return c;
    }
    FetchResult r = o.kind == SourceKind::kFile ? copy_local_file(o.location, staging, fo)
                                                : fetch_url(o.location, staging, fo);
    if (r.status.ok()) {
      if (!p.pin || r.digest == *p.pin) return r;
      const bool resumed = r.resumed_from_bytes > 0 && !r.restarted;
      remove_staging(staging);
      r.status = Status(StatusCode::kIntegrity, "SHA-256 mismatch")
                     .with("expected", digest_string(*p.pin))
                     .with("actual", digest_string(r.digest))
                     .with("source", o.location);
      r.keep_partial = false;
      if (resumed && !restarted_after_mismatch) {
        // The prefix came from an earlier attempt (maybe another source): start clean once.
        restarted_after_mismatch = true;
        emit_part("retrying", p, "digest mismatch after resuming; downloading again from 0");
        continue;
      }
      return r;
    }
    if (!r.keep_partial || r.size_bytes == 0) remove_staging(staging);
    if (r.status.code() == StatusCode::kOutOfRange && !restarted_after_416) {
      restarted_after_416 = true;  // 416: the partial does not fit the resource; start over
      --attempt;
      continue;
    }
    if (r.local_failure || !r.retryable || attempt >= config_.attempts_per_source) return r;
    emit_part("retrying", p, r.status.to_string());
    const auto wake = std::chrono::steady_clock::now() +
                      std::chrono::milliseconds(config_.retry_delay_ms * attempt);
    while (std::chrono::steady_clock::now() < wake && !cancelled()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
}

Result<ManifestPart> Puller::pull_pinned(const PartPlan& p) {
  const Sha256Digest digest = *p.pin;
  POWER_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(layout_.digest_lock_path(digest)));
  ManifestPart part{p.role, p.source.filename, digest, 0, p.source.original};
  POWER_ASSIGN_OR_RETURN(BlobCheck check,
                         check_blob(layout_, digest, p.size_bytes, request_.verify_existing));
  if (check.state == BlobState::kOk) {
    part.size_bytes = check.size_bytes;
    emit_part("exists", p, {}, check.size_bytes);
    return part;
  }
  const std::string blob = layout_.blob_path(digest);
  if (check.state == BlobState::kCorrupt && p.size_bytes && check.size_bytes != *p.size_bytes) {
    // Before deleting anything: is the blob wrong, or the expected size?
    POWER_ASSIGN_OR_RETURN(Sha256Digest actual, sha256_file(blob));
    if (actual == digest) {
      return Status(StatusCode::kIntegrity,
                    "the declared size does not match the stored artifact with this digest")
          .with("declared_bytes", *p.size_bytes)
          .with("stored_bytes", check.size_bytes)
          .with("digest", digest_string(digest));
    }
  }
  if (check.state == BlobState::kCorrupt) {
    POWER_LOG_WARN("blob {} is corrupt ({}); fetching it again", blob, check.problem);
    emit_part("rejected", p,
              fmt::format("existing blob is corrupt ({}); fetching it again", check.problem));
    if (::unlink(blob.c_str()) != 0) {
      return Status(StatusCode::kIo, "cannot remove a corrupt blob").with("path", blob);
    }
  }
  const std::string staging = layout_.staging_dir() + "/" + blob_file_name(digest) + ".partial";
  // A complete download left behind by a process that died before its commit.
  if (auto size = file_size(staging); size && *size > 0) {
    if (!p.size_bytes || *size == *p.size_bytes) {
      POWER_ASSIGN_OR_RETURN(Sha256Digest d, hash_staging_file(staging));
      if (d == digest) {
        POWER_RETURN_IF_ERROR(commit_blob(layout_, staging, digest));
        remove_staging(staging);
        part.size_bytes = *size;
        emit_part("committed", p, {}, *size);
        return part;
      }
      if (p.size_bytes) remove_staging(staging);
    } else if (*size > *p.size_bytes) {
      remove_staging(staging);
    }
  }

  std::vector<Origin> origins;
  if (p.source.kind == SourceKind::kHttp) {
    for (const auto& c : mirror_candidates(config_.mirrors, p.source, digest)) {
      origins.push_back({c.kind, c.location, true, false});
    }
  }
  const bool hf = p.source.original.starts_with("hf://");
  origins.push_back({p.source.kind, p.source.location, false, hf});

  std::vector<std::string> failures;
  Status last;
  for (const Origin& o : origins) {
    if (o.mirror && o.kind == SourceKind::kFile && !file_size(o.location)) continue;
    FetchResult r = fetch_from(o, p, staging);
    if (r.status.ok()) {
      POWER_RETURN_IF_ERROR(commit_blob(layout_, staging, digest));
      remove_staging(staging);
      part.size_bytes = r.size_bytes;
      emit_part("committed", p, {}, r.size_bytes);
      return part;
    }
    if (r.local_failure || r.status.code() == StatusCode::kCancelled) {
      return std::move(r.status);
    }
    if (o.mirror && r.status.code() == StatusCode::kNotFound) continue;  // not on this mirror
    PullProgress e;
    e.status = "rejected";
    e.file = p.source.filename;
    e.digest = digest_string(digest);
    e.source = o.location;
    e.message = r.status.to_string();
    emit(std::move(e));
    failures.push_back(fmt::format("{}: {}", o.location, r.status.to_string()));
    last = std::move(r.status);
  }
  if (last.ok()) return Status(StatusCode::kInternal, "no source was tried");
  if (!p.recorded_by.empty() && last.code() == StatusCode::kIntegrity) {
    return Status(StatusCode::kIntegrity,
                  fmt::format("the source no longer serves the bytes recorded when it was first "
                              "pulled (model '{}'); pass --sha256 to accept new bytes",
                              p.recorded_by))
        .with("source", p.source.original)
        .with("recorded", digest_string(digest));
  }
  if (failures.size() > 1) {
    std::string all;
    for (const auto& f : failures) all += (all.empty() ? "" : "; ") + f;
    return Status(last.code(), fmt::format("every source failed: {}", all));
  }
  return last;
}

Result<ManifestPart> Puller::pull_unpinned(const PartPlan& p) {
  const std::string staging =
      fmt::format("{}/url-{}.partial", layout_.staging_dir(), sha256_hex(p.source.original));
  Origin o{p.source.kind, p.source.location, false, p.source.original.starts_with("hf://")};
  FetchResult r = fetch_from(o, p, staging);
  if (!r.status.ok()) return std::move(r.status);
  const Sha256Digest digest = r.digest;
  POWER_ASSIGN_OR_RETURN(FileLock lock, FileLock::acquire(layout_.digest_lock_path(digest)));
  POWER_ASSIGN_OR_RETURN(BlobCheck check, check_blob(layout_, digest, r.size_bytes, false));
  PartPlan pinned = p;
  pinned.pin = digest;
  if (check.state == BlobState::kOk) {
    remove_staging(staging);
    emit_part("exists", pinned, {}, r.size_bytes);
  } else {
    if (check.state == BlobState::kCorrupt) ::unlink(layout_.blob_path(digest).c_str());
    POWER_RETURN_IF_ERROR(commit_blob(layout_, staging, digest));
    remove_staging(staging);
    emit_part("committed", pinned, "digest recorded on first use", r.size_bytes);
  }
  return ManifestPart{p.role, p.source.filename, digest, r.size_bytes, p.source.original};
}

Result<Manifest> Puller::run_inner() {
  POWER_RETURN_IF_ERROR(plan_parts());
  // Local files without a pin: hash them first, then they are pinned like any other.
  for (auto& p : plans_) {
    if (p.pin || p.source.kind != SourceKind::kFile) continue;
    emit_part("verifying", p);
    POWER_ASSIGN_OR_RETURN(p.pin, sha256_file(p.source.location));
  }
  POWER_ASSIGN_OR_RETURN(FileLock store_lock,
                         FileLock::acquire(layout_.store_lock_path(), FileLock::Mode::kShared));
  // Unpinned remote sources: one lock per source, taken in a fixed order (no deadlock).
  std::set<std::string> unpinned;
  for (const auto& p : plans_) {
    if (!p.pin) unpinned.insert(p.source.original);
  }
  std::vector<FileLock> source_locks;
  for (const auto& s : unpinned) {
    POWER_ASSIGN_OR_RETURN(FileLock l, FileLock::acquire(layout_.source_lock_path(s)));
    source_locks.push_back(std::move(l));
  }
  // Read after the source locks: a pull that held them before us has written its manifest.
  std::vector<ManifestEntry> entries;
  if (auto listed = list_manifests(layout_); listed.ok()) entries = std::move(listed).value();
  std::stable_partition(entries.begin(), entries.end(),
                        [&](const ManifestEntry& e) { return e.name == name_; });
  for (auto& p : plans_) {
    for (const auto& e : entries) {
      if (!e.manifest) continue;
      for (const auto& mp : e.manifest->parts) {
        if (!p.pin && mp.source == p.source.original) {
          p.pin = mp.digest;
          p.recorded_by = e.name;
        }
        if (p.pin && *p.pin == mp.digest && !p.size_bytes) p.size_bytes = mp.size_bytes;
      }
    }
  }

  Manifest m;
  m.name = name_;
  for (const auto& p : plans_) {
    if (cancelled()) return cancelled_status();
    emit_part("resolving", p);
    Result<ManifestPart> part = p.pin ? pull_pinned(p) : pull_unpinned(p);
    if (!part.ok()) {
      return std::move(part).take_status().with("model", name_).with("file", p.source.filename);
    }
    m.parts.push_back(std::move(part).value());
  }
  m.format = !request_.format.empty()
                 ? request_.format
                 : detect_format(layout_.blob_path(m.parts[0].digest), m.parts[0].filename);
  m.license = request_.license;
  m.parameters = request_.parameters.is_object() ? request_.parameters : nlohmann::json::object();
  m.created = now_rfc3339();
  PullProgress writing;
  writing.status = "writing manifest";
  emit(std::move(writing));
  POWER_RETURN_IF_ERROR(write_manifest(layout_, m));
  PullProgress done;
  done.status = "success";
  done.completed_bytes = m.size_bytes();
  done.total_bytes = m.size_bytes();
  emit(std::move(done));
  return m;
}

}  // namespace

Result<Manifest> pull(const StoreLayout& layout, const PullRequest& request,
                      const PullOptions& options) {
  Puller puller(layout, request, options);
  return puller.run();
}

}  // namespace power::store
