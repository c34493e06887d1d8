// Manifests: a model name bound to the blobs that make it up.
//
// A manifest is a JSON document whose first key is "schema": "power.manifest.v1". It names
// one or more parts (a GGUF file; a llama2.c checkpoint plus its tokenizer; the shards of a
// split GGUF), each with the SHA-256 digest and size of a blob in blobs/, a role and the
// file name it had upstream. Readers reject any other schema with a clear error, never guess.
// Model names are relative paths of 1-4 components of [A-Za-z0-9._:-], each starting with a
// letter or digit, so a name can never leave manifests/. Thread-safety: values; the file
// functions rely on atomic renames, so concurrent readers see whole manifests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/sha256.h"
#include "base/status.h"
#include "store/layout.h"

namespace power::store {

inline constexpr std::string_view kManifestSchema = "power.manifest.v1";

struct ManifestPart {
  std::string role;      // "model", "tokenizer", "model-part" (a shard), "extra"
  std::string filename;  // upstream base name; loaders look parts up by role or filename
  Sha256Digest digest{};
  uint64_t size_bytes = 0;
  std::string source;  // the upstream source it was pulled from (never a mirror)
};

struct Manifest {
  std::string name;
  std::string format;  // "gguf", "llama2c", "onnx", "safetensors" or "unknown"
  std::vector<ManifestPart> parts;
  std::string license;
  nlohmann::json parameters = nlohmann::json::object();  // default generation parameters
  std::string created;                                   // RFC 3339, UTC

  uint64_t size_bytes() const;
  std::vector<std::string> sources() const;
  // The first part with this role, or nullptr.
  const ManifestPart* part_with_role(std::string_view role) const;
};

Status validate_model_name(std::string_view name);
// A model name derived from a file name: the base name without its last extension, with
// characters a name may not hold replaced by '-'.
std::string model_name_from_filename(std::string_view filename);
std::string now_rfc3339();

std::string manifest_to_json(const Manifest& manifest);
Result<Manifest> parse_manifest(std::string_view json_text);

Result<Manifest> read_manifest(const StoreLayout& layout, std::string_view name);
// Atomic and durable (temporary file, fsync, rename, directory fsync).
Status write_manifest(const StoreLayout& layout, const Manifest& manifest);
Status remove_manifest(const StoreLayout& layout, std::string_view name);

struct ManifestEntry {
  std::string name;
  std::optional<Manifest> manifest;  // empty when the file could not be read or parsed
  Status error;
  std::string raw_text;  // kept for unreadable manifests (see referenced_digests)
};
// Every manifests/**/*.json, sorted by name; unreadable ones are listed with their error.
Result<std::vector<ManifestEntry>> list_manifests(const StoreLayout& layout);
// Digests referenced by any manifest. An unreadable manifest (e.g. a newer schema) keeps
// every 64-hex-digit string in its text, so garbage collection never drops its blobs.
std::vector<Sha256Digest> referenced_digests(const std::vector<ManifestEntry>& entries);

}  // namespace power::store
