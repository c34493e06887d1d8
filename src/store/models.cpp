#include "store/models.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "base/file.h"

namespace power::store {
namespace {

Result<FileLock> lock_store_exclusive(const StoreLayout& layout,
                                      const std::function<void()>& on_wait) {
  auto lock = FileLock::try_acquire(layout.store_lock_path(), FileLock::Mode::kExclusive);
  if (lock.ok()) return lock;
  if (lock.status().code() != StatusCode::kResourceExhausted) return lock;
  if (on_wait) on_wait();
  return FileLock::acquire(layout.store_lock_path(), FileLock::Mode::kExclusive);
}

Status check_part(const StoreLayout& layout, const std::string& model, const ManifestPart& part,
                  bool verify_hash) {
  POWER_ASSIGN_OR_RETURN(BlobCheck check,
                         check_blob(layout, part.digest, part.size_bytes, verify_hash));
  if (check.state == BlobState::kMissing) {
    return Status(StatusCode::kNotFound,
                  fmt::format("blob of model '{}' is missing (pull the model again)", model))
        .with("file", part.filename)
        .with("blob", layout.blob_path(part.digest));
  }
  if (check.state == BlobState::kCorrupt) {
    return Status(StatusCode::kIntegrity,
                  fmt::format("blob of model '{}' is corrupt: {} (remove it and pull again)", model,
                              check.problem))
        .with("file", part.filename)
        .with("blob", layout.blob_path(part.digest));
  }
  return Status();
}

}  // namespace

const ResolvedPart* ResolvedModel::part_with_role(std::string_view role) const {
  for (const auto& p : parts) {
    if (p.part.role == role) return &p;
  }
  return nullptr;
}

Result<ResolvedModel> resolve_model(const StoreLayout& layout, std::string_view name,
                                    bool verify_hash) {
  ResolvedModel r;
  if (name.starts_with("sha256:") || name.starts_with("sha256-")) {
    POWER_ASSIGN_OR_RETURN(Sha256Digest digest, parse_digest(name));
    POWER_ASSIGN_OR_RETURN(BlobCheck check, check_blob(layout, digest, std::nullopt, verify_hash));
    if (check.state != BlobState::kOk) {
      return Status(check.state == BlobState::kMissing ? StatusCode::kNotFound
                                                       : StatusCode::kIntegrity,
                    check.state == BlobState::kMissing ? "no such blob" : check.problem)
          .with("digest", name);
    }
    ManifestPart part{"model", blob_file_name(digest), digest, check.size_bytes, ""};
    r.manifest.name = blob_file_name(digest);
    r.manifest.format = detect_format(layout.blob_path(digest), "");
    r.manifest.parts.push_back(part);
  } else {
    POWER_ASSIGN_OR_RETURN(r.manifest, read_manifest(layout, name));
  }
  for (const auto& part : r.manifest.parts) {
    POWER_RETURN_IF_ERROR(check_part(layout, r.manifest.name, part, verify_hash));
    r.parts.push_back({part, layout.blob_path(part.digest)});
  }
  return r;
}

Result<GcResult> collect_garbage(const StoreLayout& layout, const std::function<void()>& on_wait) {
  POWER_ASSIGN_OR_RETURN(FileLock lock, lock_store_exclusive(layout, on_wait));
  return collect_garbage_locked(layout);
}

Result<RemoveResult> remove_models(const StoreLayout& layout, const std::vector<std::string>& names,
                                   const std::function<void()>& on_wait) {
  for (const auto& n : names) POWER_RETURN_IF_ERROR(validate_model_name(n));
  POWER_ASSIGN_OR_RETURN(FileLock lock, lock_store_exclusive(layout, on_wait));
  for (const auto& n : names) {
    struct stat st {};
    if (::stat(layout.manifest_path(n).c_str(), &st) != 0) {
      return Status(StatusCode::kNotFound,
                    fmt::format("model '{}' not found (`power ls` lists models)", n));
    }
  }
  RemoveResult r;
  for (const auto& n : names) {
    POWER_RETURN_IF_ERROR(remove_manifest(layout, n));
    r.removed_models.push_back(n);
  }
  POWER_ASSIGN_OR_RETURN(r.garbage, collect_garbage_locked(layout));
  return r;
}

std::string detect_format(const std::string& blob_path, std::string_view filename) {
  uint8_t header[28] = {0};
  ssize_t n = 0;
  {
    UniqueFd fd(::open(blob_path.c_str(), O_RDONLY | O_CLOEXEC));
    if (fd.valid()) n = ::pread(fd.get(), header, sizeof(header), 0);
  }
  if (n >= 4 && std::memcmp(header, "GGUF", 4) == 0) return "gguf";
  auto ends_with = [&](std::string_view ext) {
    return filename.size() >= ext.size() &&
           strncasecmp(filename.data() + filename.size() - ext.size(), ext.data(), ext.size()) == 0;
  };
  if (ends_with(".onnx")) return "onnx";
  if (ends_with(".safetensors")) return "safetensors";
  if (ends_with(".bin") && n == 28) {
    // llama2.c: int32 dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size (negative
    // when the classifier is unshared), seq_len.
    int32_t v[7];
    std::memcpy(v, header, sizeof(v));
    const int32_t vocab = v[5] < 0 ? -v[5] : v[5];
    const bool plausible = v[0] > 0 && v[0] <= 65536 && v[1] > 0 && v[1] <= 1 << 20 && v[2] > 0 &&
                           v[2] <= 1024 && v[3] > 0 && v[3] <= 1024 && v[4] > 0 && v[4] <= v[3] &&
                           v[0] % v[3] == 0 && vocab > 0 && vocab <= 1 << 22 && v[6] > 0 &&
                           v[6] <= 1 << 24;
    if (plausible) return "llama2c";
  }
  return "unknown";
}

}  // namespace power::store
