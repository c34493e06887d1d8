// Where the artifact store lives and how it is configured.
//
// Layout under $POWER_HOME (default ~/.power):
//   blobs/sha256-<hex>        content-addressed artifacts, read-only once committed
//   manifests/<name>.json     power.manifest.v1 documents (see manifest.h)
//   staging/                  partial downloads (same filesystem as blobs/, so commit = rename)
//   locks/                    flock(2) files: store.lock, sha256-<hex>.lock, url-<hex>.lock
//   tensors/sha256-<hex>.json per-tensor hash manifests of GGUF artifacts
//                             (format/tensor_manifest.h), removed with their blob
//   config.json               optional StoreConfig (see below)
// StoreLayout is a value holding paths; open() creates the directories. StoreConfig is read
// from config.json and then overridden by environment variables. Thread-safety: values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/sha256.h"
#include "base/status.h"

namespace power::store {

class StoreLayout {
 public:
  // $POWER_HOME, else $HOME/.power.
  static std::string default_home();
  // Creates home and its subdirectories if missing.
  static Result<StoreLayout> open(const std::string& home);
  static Result<StoreLayout> open_default() { return open(default_home()); }

  const std::string& home() const { return home_; }
  std::string blobs_dir() const { return home_ + "/blobs"; }
  std::string manifests_dir() const { return home_ + "/manifests"; }
  std::string staging_dir() const { return home_ + "/staging"; }
  std::string locks_dir() const { return home_ + "/locks"; }
  std::string config_path() const { return home_ + "/config.json"; }

  std::string blob_path(const Sha256Digest& digest) const;
  std::string tensor_manifest_path(const Sha256Digest& digest) const;
  // The manifest of a validated model name (see validate_model_name in manifest.h).
  std::string manifest_path(std::string_view name) const;
  // Held shared by every pull, exclusively by garbage collection.
  std::string store_lock_path() const { return locks_dir() + "/store.lock"; }
  std::string digest_lock_path(const Sha256Digest& digest) const;
  // For pulls without a pinned digest: keyed by SHA-256 of the source string.
  std::string source_lock_path(std::string_view source) const;

 private:
  std::string home_;
};

// "sha256-<hex>": the blob file name, also the name looked up on mirrors.
std::string blob_file_name(const Sha256Digest& digest);
// "sha256:<hex>": how manifests and users write a digest.
std::string digest_string(const Sha256Digest& digest);
// Accepts "sha256:<hex>", "sha256-<hex>" or bare hex.
Result<Sha256Digest> parse_digest(std::string_view text);

struct StoreConfig {
  // Ordered base URLs (http/https) or directories, tried before the upstream source.
  std::vector<std::string> mirrors;
  // Byte cap for a download without a declared size.
  uint64_t max_download_bytes = uint64_t{1} << 40;  // 1 TiB
  int64_t connect_timeout_s = 30;
  // A transfer slower than low_speed_limit_bytes_per_s for low_speed_time_s is aborted.
  int64_t low_speed_time_s = 60;
  int64_t low_speed_limit_bytes_per_s = 1024;
  int64_t max_redirects = 10;
  // Tries per source; after a dropped connection the next try resumes with Range.
  int64_t attempts_per_source = 3;
  int64_t retry_delay_ms = 500;
  // Base URL for hf:// sources ($HF_ENDPOINT), and the token sent to it ($HF_TOKEN).
  std::string hf_endpoint = "https://huggingface.co";
  std::string hf_token;
};

// Reads config.json (absent: defaults), then applies POWER_MIRRORS, POWER_MAX_DOWNLOAD_BYTES,
// HF_ENDPOINT and HF_TOKEN. Unknown keys are rejected so that typos do not pass silently.
Result<StoreConfig> load_store_config(const StoreLayout& layout);
Result<StoreConfig> parse_store_config(std::string_view json_text);
// Splits a POWER_MIRRORS value on ',' and ':', keeping URLs ("http://host:8080/x") whole.
std::vector<std::string> parse_mirror_list(std::string_view text);

}  // namespace power::store
