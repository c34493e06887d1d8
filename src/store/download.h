// Streaming transfers into a staging file: HTTP(S) with libcurl, or a copy of a local file.
//
// The staging file is hashed (SHA-256) while it is written, capped in size, and, for HTTP,
// resumed with a Range request when it already holds a prefix: the prefix is re-hashed first,
// a 206 must start exactly where the prefix ends, a 200 (server ignored Range, or If-Range
// found the resource changed) restarts from byte 0. Redirects are followed up to a bound and
// only to http/https (https only, when the request started on https). The caller verifies the
// digest and decides what to commit; these functions never touch blobs/.
//
// A sidecar "<staging>.meta" (power.staging.v1) remembers the URL and its validator (ETag or
// Last-Modified) so a later process can resume with If-Range.
// Thread-safety: functions are reentrant; each call uses its own curl handle. The process
// should ignore SIGPIPE (libcurl runs with CURLOPT_NOSIGNAL for use from threads).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "base/sha256.h"
#include "base/status.h"
#include "store/layout.h"

namespace power::store {

struct FetchOptions {
  uint64_t cap_bytes = 0;                       // the body may not exceed this (0: no cap)
  std::optional<uint64_t> expected_size_bytes;  // exact size, when declared or pinned
  bool resume = true;                           // continue an existing staging prefix
  bool resume_requires_validator = false;       // unpinned: resume only with If-Range
  StoreConfig config;                           // timeouts, redirect bound
  std::string bearer_token;                     // "Authorization: Bearer" (same host only)
  // Called at most every 100 ms, and once at the end: bytes in the staging file, the total
  // (0 if unknown) and the transfer rate of this attempt.
  std::function<void(uint64_t completed, uint64_t total, double rate_bytes_per_s)> on_progress;
  const std::atomic<bool>* cancel = nullptr;  // set to true to stop: kCancelled, partial kept
  uint64_t fault_write_limit_bytes = 0;  // testing: writes past this fail as if the disk were full
};

struct FetchResult {
  Status status;
  bool retryable = false;           // a network failure after which another attempt may succeed
  bool keep_partial = true;         // false: the staging bytes are useless, delete them
  bool local_failure = false;       // the staging file could not be written: no source can help
  uint64_t size_bytes = 0;          // bytes in the staging file
  Sha256Digest digest{};            // of the whole staging file (status ok only)
  uint64_t resumed_from_bytes = 0;  // prefix carried over from an earlier attempt
  bool restarted = false;           // the server ignored Range: started from byte 0
  long http_status = 0;
};

FetchResult fetch_url(const std::string& url, const std::string& staging_path,
                      const FetchOptions& options);
FetchResult copy_local_file(const std::string& path, const std::string& staging_path,
                            const FetchOptions& options);
// Hashes a file that may be a complete download left behind by an interrupted process.
Result<Sha256Digest> hash_staging_file(const std::string& staging_path);
// Removes a staging file and its sidecar.
void remove_staging(const std::string& staging_path);

// A small GET for control-plane calls (`power ps`). Connection refused is kIo with a
// message saying so.
struct HttpResponse {
  long status = 0;
  std::string body;
};
Result<HttpResponse> http_get(const std::string& url, uint64_t max_body_bytes, int64_t timeout_ms);

}  // namespace power::store
