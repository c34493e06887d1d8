// Per-tensor hash manifests: the identity of every tensor of a GGUF artifact (name, type, shape,
// absolute offset, length, SHA-256 of its bytes), in file order, bound to the artifact's
// SHA-256 (docs/RESIDENCY.md, "Tensor identity").
//
// Hashing every tensor reads the whole artifact, so the manifest is cached, keyed by the
// artifact digest, in DIR/sha256-<digest>.json (default DIR: $POWER_HOME/tensors, beside the
// store's blobs/; the store's garbage collection removes it with its blob). A cached manifest
// is used only when its schema, artifact digest and tensor table (names, types, shapes,
// offsets, lengths, in order) equal the file's, and its own digest of the tensor list checks;
// anything else is hashed again and rewritten. Receipts (model.tensors_sha256) and weight
// mirrors take their tensor digests from here.
// Thread-safety: free functions; concurrent writers of one cache file each write the same bytes
// atomically (temp + rename).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "format/gguf.h"

namespace power {

struct TensorDigest {
  std::string name;
  GgmlType type = GgmlType::F32;
  std::vector<uint64_t> ne;  // ne[0] contiguous, as in GGUF
  uint64_t offset = 0;       // absolute, in the artifact
  uint64_t length = 0;
  std::string sha256;  // lowercase hex of the bytes
};

struct TensorManifest {
  static constexpr std::string_view kSchema = "power.tensor-manifest/1";
  std::string artifact_sha256;
  std::vector<TensorDigest> tensors;  // file order
};

// Hashes every tensor of `file`. With a non-empty `path` (the plain file `file` was opened
// from) the bytes are read with pread and dropped from the page cache behind the reads (pages
// a mapping holds stay), so hashing does not fill the memory a weights budget keeps free;
// with an empty path they are read through the mapping (a decrypted container).
Result<TensorManifest> hash_tensors(const GgufFile& file, const std::string& path,
                                    const std::string& artifact_sha256);

// Digests as the JSON array manifests and mirror indexes hold ({name, type, shape, offset,
// length, sha256} each), and one element back (kCorrupt naming what is missing or wrong).
nlohmann::json tensor_digests_json(const std::vector<TensorDigest>& tensors);
Result<TensorDigest> tensor_digest_from_json(const nlohmann::json& j);

// DIR/sha256-<digest>.json.
std::string tensor_manifest_path(const std::string& dir, std::string_view artifact_sha256);
// $POWER_HOME/tensors, else ~/.power/tensors.
std::string default_tensor_manifest_dir();

// The manifest's JSON text (schema, artifact_sha256, tensors, tensors_digest) and its parser,
// which checks it against `file` and `artifact_sha256` (kCorrupt with the reason otherwise).
std::string tensor_manifest_json(const TensorManifest& m);
Result<TensorManifest> parse_tensor_manifest(std::string_view text, const GgufFile& file,
                                             const std::string& artifact_sha256);

struct TensorManifestSource {
  bool from_cache = false;  // read from the cache file, nothing hashed
  bool written = false;     // hashed and written to the cache file
};

// The manifest of `file`: from the cache in `cache_dir` when it describes this file, else
// hashed (as hash_tensors) and written there. A cache that cannot be read or written is
// logged and hashing goes on; an empty `cache_dir` neither reads nor writes a cache.
Result<TensorManifest> load_or_hash_tensors(const GgufFile& file, const std::string& path,
                                            const std::string& artifact_sha256,
                                            const std::string& cache_dir,
                                            TensorManifestSource* source = nullptr);

}  // namespace power
