// Sources: where an artifact comes from, and where mirrors may hold a copy of it.
//
// A source is an http(s) URL, a local file path (or file:// URL), or
// hf://owner/repo[@revision]/path/in/repo, which maps to
// {hf_endpoint}/owner/repo/resolve/{revision or main}/path/in/repo.
// Mirrors are base URLs or directories; a pinned artifact is looked up on each as
// sha256-<hex>, then by its path inside the repository (hf:// only), then by its base name.
// Thread-safety: values and pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/sha256.h"
#include "base/status.h"
#include "store/layout.h"

namespace power::store {

enum class SourceKind { kHttp, kFile };

struct Source {
  SourceKind kind = SourceKind::kHttp;
  std::string location;       // the URL to fetch, or an absolute file path
  std::string original;       // as written by the user; recorded in the manifest
  std::string filename;       // base name ("model.gguf")
  std::string relative_path;  // hf:// only: the path inside the repository
};

Result<Source> parse_source(std::string_view text, const StoreConfig& config);
// hf://owner/repo[@rev]/path -> https resolve URL; errors name what is malformed.
Result<std::string> hf_resolve_url(std::string_view hf_url, std::string_view endpoint);

struct MirrorCandidate {
  SourceKind kind = SourceKind::kFile;
  std::string location;  // URL or file path on the mirror
  std::string mirror;    // the mirror entry it came from
};
std::vector<MirrorCandidate> mirror_candidates(const std::vector<std::string>& mirrors,
                                               const Source& source, const Sha256Digest& digest);

// Percent-encodes everything but unreserved characters and '/'.
std::string url_encode_path(std::string_view path);

}  // namespace power::store
