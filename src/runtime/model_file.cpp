#include "runtime/model_file.h"

#include <optional>

#include "base/log.h"
#include "base/sha256.h"
#include "secure/container.h"
#include "secure/model_key.h"

namespace power::runtime {

Result<ModelFile> open_model_file(const std::string& path, const LoadOptions& o) {
  POWER_ASSIGN_OR_RETURN(bool encrypted, secure::is_container_file(path));
  ModelFile mf;
  if (!encrypted) {
    POWER_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));
    mf.file = std::move(file);
    POWER_ASSIGN_OR_RETURN(Sha256Digest digest, sha256_file(path));
    mf.sha256 = to_hex(digest);
    return mf;
  }
  // The key lives only for this call: it is wiped when `key` goes out of scope.
  POWER_ASSIGN_OR_RETURN(std::optional<secure::ModelKey> key,
                         secure::resolve_model_key(o.model_key_file, o.model_key_hex));
  if (!key) {
    return Status(StatusCode::kInvalidArgument,
                  "the model is an encrypted Power container; pass --model-key-file (or "
                  "LoadOptions::model_key_file / model_key_hex, or set POWER_MODEL_KEY)")
        .with("path", path);
  }
  POWER_ASSIGN_OR_RETURN(
      secure::DecryptedContainer dc,
      secure::decrypt_file_to_memory(
          path, *key, o.require_mlock ? MemoryLock::kRequired : MemoryLock::kBestEffort));
  key.reset();
  if (!dc.mapping.is_locked() && dc.info.plaintext_bytes > 0) {
    POWER_LOG_WARN(
        "the decrypted weights of {} ({} bytes) could not be locked in RAM (RLIMIT_MEMLOCK), so "
        "the kernel may swap them out; raise the limit (ulimit -l, systemd LimitMEMLOCK=) or "
        "set require_mlock to refuse instead",
        path, dc.info.plaintext_bytes);
  }
  POWER_ASSIGN_OR_RETURN(auto file, GgufFile::open(std::move(dc.mapping)));
  mf.file = std::move(file);
  mf.sha256 = to_hex(dc.info.plaintext_sha256);
  mf.encrypted = true;
  return mf;
}

}  // namespace power::runtime
