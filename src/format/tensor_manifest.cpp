#include "format/tensor_manifest.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/env.h"
#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"
#include "format/ggml_types.h"

namespace power {
namespace {

constexpr uint64_t kReadChunk = 4ull << 20;

using json = nlohmann::json;

bool is_lower_hex64(const std::string& s) {
  return s.size() == 64 && std::all_of(s.begin(), s.end(), [](char c) {
           return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
         });
}

}  // namespace

Result<TensorManifest> hash_tensors(const GgufFile& file, const std::string& path,
                                    const std::string& artifact_sha256) {
  TensorManifest m;
  m.artifact_sha256 = artifact_sha256;
  UniqueFd fd;
  std::vector<uint8_t> buf;
  if (!path.empty()) {
    fd = UniqueFd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid()) {
      return Status(StatusCode::kIo, fmt::format("cannot open the model: {}", std::strerror(errno)))
          .with("path", path);
    }
    buf.resize(kReadChunk);
  }
  for (const GgufTensor& t : file.tensors()) {
    Sha256 h;
    if (fd.valid()) {
      for (uint64_t off = 0; off < t.n_bytes; off += kReadChunk) {
        const uint64_t n = std::min(kReadChunk, t.n_bytes - off);
        POWER_RETURN_IF_ERROR(pread_all(fd.get(), buf.data(), n, t.file_offset + off, path));
        h.update(buf.data(), n);
        // Clean pages nobody maps leave the page cache; mapped ones stay.
        ::posix_fadvise(fd.get(), static_cast<off_t>(t.file_offset + off), static_cast<off_t>(n),
                        POSIX_FADV_DONTNEED);
      }
    } else {
      h.update(t.data, t.n_bytes);
    }
    TensorDigest d;
    d.name = t.name;
    d.type = t.type;
    d.ne = t.ne;
    d.offset = t.file_offset;
    d.length = t.n_bytes;
    d.sha256 = to_hex(h.finish());
    m.tensors.push_back(std::move(d));
  }
  return m;
}

json tensor_digests_json(const std::vector<TensorDigest>& tensors) {
  json a = json::array();
  for (const TensorDigest& t : tensors) {
    a.push_back({{"name", t.name},
                 {"type", std::string(ggml_type_name(t.type))},
                 {"shape", t.ne},
                 {"offset", t.offset},
                 {"length", t.length},
                 {"sha256", t.sha256}});
  }
  return a;
}

Result<TensorDigest> tensor_digest_from_json(const json& j) {
  TensorDigest d;
  try {
    d.name = j.at("name").get<std::string>();
    auto type = ggml_type_from_name(j.at("type").get<std::string>());
    if (!type) return Status(StatusCode::kCorrupt, "unknown tensor type").with("tensor", d.name);
    d.type = *type;
    d.ne = j.at("shape").get<std::vector<uint64_t>>();
    d.offset = j.at("offset").get<uint64_t>();
    d.length = j.at("length").get<uint64_t>();
    d.sha256 = j.at("sha256").get<std::string>();
  } catch (const std::exception& e) {
    return Status(StatusCode::kCorrupt, "a tensor digest has a missing or mistyped member")
        .with("error", e.what());
  }
  if (!is_lower_hex64(d.sha256)) {
    return Status(StatusCode::kCorrupt, "a tensor's sha256 is not 64 hex digits")
        .with("tensor", d.name);
  }
  return d;
}

std::string tensor_manifest_path(const std::string& dir, std::string_view artifact_sha256) {
  return fmt::format("{}/sha256-{}.json", dir, artifact_sha256);
}

std::string default_tensor_manifest_dir() {
  return power_home() + "/tensors";
}

std::string tensor_manifest_json(const TensorManifest& m) {
  const json tensors = tensor_digests_json(m.tensors);
  json j = {{"schema", std::string(TensorManifest::kSchema)},
            {"artifact_sha256", m.artifact_sha256},
            {"tensors", tensors},
            {"tensors_digest", sha256_hex(tensors.dump())}};
  return j.dump(1) + "\n";
}

Result<TensorManifest> parse_tensor_manifest(std::string_view text, const GgufFile& file,
                                             const std::string& artifact_sha256) {
  auto bad = [](std::string why) {
    return Status(StatusCode::kCorrupt, "the tensor manifest does not describe this model")
        .with("reason", std::move(why));
  };
  const json j = json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  TensorManifest m;
  try {
    if (j.at("schema").get<std::string>() != TensorManifest::kSchema) return bad("schema");
    m.artifact_sha256 = j.at("artifact_sha256").get<std::string>();
    if (m.artifact_sha256 != artifact_sha256) return bad("another artifact's digest");
    const json& ts = j.at("tensors");
    if (sha256_hex(ts.dump()) != j.at("tensors_digest").get<std::string>()) {
      return bad("tensors_digest does not match the tensor list");
    }
    const auto& ft = file.tensors();
    if (!ts.is_array() || ts.size() != ft.size()) return bad("tensor count");
    for (size_t i = 0; i < ft.size(); ++i) {
      auto parsed = tensor_digest_from_json(ts[i]);
      if (!parsed.ok()) return bad(parsed.status().to_string());
      TensorDigest d = std::move(*parsed);
      const GgufTensor& t = ft[i];
      if (d.name != t.name || d.type != t.type || d.ne != t.ne || d.offset != t.file_offset ||
          d.length != t.n_bytes) {
        return bad("tensor " + std::to_string(i) + " (" + t.name + ") differs from the file's");
      }
      m.tensors.push_back(std::move(d));
    }
  } catch (const std::exception& e) {
    return bad(std::string("missing or mistyped member: ") + e.what());
  }
  return m;
}

Result<TensorManifest> load_or_hash_tensors(const GgufFile& file, const std::string& path,
                                            const std::string& artifact_sha256,
                                            const std::string& cache_dir,
                                            TensorManifestSource* source) {
  TensorManifestSource src;
  const std::string cache =
      cache_dir.empty() ? std::string() : tensor_manifest_path(cache_dir, artifact_sha256);
  if (!cache.empty()) {
    auto text = read_file_text(cache);
    if (text.ok()) {
      auto m = parse_tensor_manifest(*text, file, artifact_sha256);
      if (m.ok()) {
        src.from_cache = true;
        if (source) *source = src;
        return m;
      }
      POWER_LOG_WARN("tensor manifest {} not used, hashing the model again: {}", cache,
                     m.status().to_string());
    } else if (text.status().code() != StatusCode::kNotFound) {
      POWER_LOG_WARN("tensor manifest {} not readable, hashing the model: {}", cache,
                     text.status().to_string());
    }
  }
  POWER_ASSIGN_OR_RETURN(TensorManifest m, hash_tensors(file, path, artifact_sha256));
  if (!cache.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(cache_dir, ec);
    Status st = ec ? Status(StatusCode::kIo, ec.message())
                   : write_file_atomic(cache, tensor_manifest_json(m));
    if (st.ok()) {
      src.written = true;
    } else {
      POWER_LOG_INFO("tensor manifest not cached in {}: {}", cache_dir, st.to_string());
    }
  }
  if (source) *source = src;
  return m;
}

}  // namespace power
