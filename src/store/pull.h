// Provisioning: `power pull` as a library call.
//
// pull() fetches every part of a model into blobs/, verifies it and only then writes the
// manifest. Per part:
//   * pinned digest (--sha256, or recorded by an earlier pull of the same source):
//     under locks/sha256-<hex>.lock, reuse the blob if it is there (size always checked, the
//     hash with verify_existing), else try each mirror, then the upstream; every source's bytes
//     are verified against the pin and a mismatch moves on to the next source.
//   * no pin (trust on first use): under locks/url-<sha256(source)>.lock, fetch from the
//     upstream only (mirrors are never used without a pin, since nothing could check them),
//     record the digest in the manifest; later pulls of the same source are pinned to it.
//   * a local file without a pin is hashed first and then handled as pinned.
// Downloads stream into staging/ (same filesystem), resume with Range after an interruption
// (in-process retries and across processes), and are committed by rename + directory fsync.
// Every pull holds locks/store.lock shared so garbage collection cannot race it.
// Thread-safety: reentrant; concurrent pulls in threads or processes coordinate by the locks.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "base/status.h"
#include "store/layout.h"
#include "store/manifest.h"
#include "store/progress.h"

namespace power::store {

struct PartRequest {
  std::string source;                  // URL, file path or hf://owner/repo[@rev]/path
  std::optional<Sha256Digest> sha256;  // the pin
  std::optional<uint64_t> size_bytes;  // declared size: the exact length, and the byte cap
  std::string role;                    // empty: "model" for the first part, else guessed
};

struct PullRequest {
  std::vector<PartRequest> parts;
  std::string name;    // empty: from the first part's file name
  std::string format;  // empty: detected from the first part
  std::string license;
  nlohmann::json parameters = nlohmann::json::object();
  bool verify_existing = false;  // hash an existing blob before reusing it
};

struct PullOptions {
  StoreConfig config;
  ProgressCallback progress;             // may be empty
  uint64_t fault_write_limit_bytes = 0;  // testing: simulate a full disk after this many bytes
  // Checked while transferring (also while stalled) and between steps: a pull whose client
  // went away stops with kCancelled; its partial download stays for the next pull.
  const std::atomic<bool>* cancel = nullptr;
};

Result<Manifest> pull(const StoreLayout& layout, const PullRequest& request,
                      const PullOptions& options);

}  // namespace power::store
