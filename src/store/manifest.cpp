#include "store/manifest.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>

#include "base/file.h"

namespace power::store {
namespace {

constexpr size_t kMaxNameBytes = 200;
constexpr size_t kMaxComponentBytes = 100;
constexpr int kMaxComponents = 4;

bool name_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-' ||
         c == ':';
}

Status manifest_error(std::string_view what) {
  return Status(StatusCode::kCorrupt, fmt::format("invalid manifest: {}", what));
}

Result<std::string> string_field(const nlohmann::json& j, const char* key, bool required) {
  auto it = j.find(key);
  if (it == j.end()) {
    if (required) return manifest_error(fmt::format("missing \"{}\"", key));
    return std::string();
  }
  if (!it->is_string()) return manifest_error(fmt::format("\"{}\" must be a string", key));
  return it->get<std::string>();
}

Result<uint64_t> size_field(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) {
    return manifest_error(fmt::format("\"{}\" must be a non-negative integer", key));
  }
  return it->get<uint64_t>();
}

}  // namespace

uint64_t Manifest::size_bytes() const {
  uint64_t total = 0;
  for (const auto& p : parts) total += p.size_bytes;
  return total;
}

std::vector<std::string> Manifest::sources() const {
  std::vector<std::string> out;
  for (const auto& p : parts) {
    if (!p.source.empty() && std::find(out.begin(), out.end(), p.source) == out.end()) {
      out.push_back(p.source);
    }
  }
  return out;
}

const ManifestPart* Manifest::part_with_role(std::string_view role) const {
  for (const auto& p : parts) {
    if (p.role == role) return &p;
  }
  return nullptr;
}

Status validate_model_name(std::string_view name) {
  auto bad = [&](std::string_view why) {
    return Status(StatusCode::kInvalidArgument, fmt::format("invalid model name: {}", why))
        .with("name", name);
  };
  if (name.empty()) return bad("empty");
  if (name.size() > kMaxNameBytes) return bad("longer than 200 bytes");
  int components = 0;
  size_t start = 0;
  while (true) {
    size_t slash = name.find('/', start);
    std::string_view c =
        name.substr(start, slash == std::string_view::npos ? name.npos : slash - start);
    ++components;
    if (c.empty()) return bad("empty path component (leading, trailing or double '/')");
    if (c.size() > kMaxComponentBytes) return bad("a component is longer than 100 bytes");
    if (!std::isalnum(static_cast<unsigned char>(c[0]))) {
      return bad("each component must start with a letter or digit");
    }
    for (char ch : c) {
      if (!name_char(ch)) return bad("allowed characters are A-Z a-z 0-9 . _ - : and '/'");
    }
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  if (components > kMaxComponents) return bad("more than 4 components");
  return Status();
}

std::string model_name_from_filename(std::string_view filename) {
  auto slash = filename.find_last_of('/');
  if (slash != std::string_view::npos) filename.remove_prefix(slash + 1);
  auto dot = filename.find_last_of('.');
  if (dot != std::string_view::npos && dot > 0) filename = filename.substr(0, dot);
  std::string out;
  for (char c : filename.substr(0, kMaxComponentBytes)) out += name_char(c) ? c : '-';
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out[0]))) out.erase(0, 1);
  return out.empty() ? "model" : out;
}

std::string now_rfc3339() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string manifest_to_json(const Manifest& m) {
  nlohmann::ordered_json j;
  j["schema"] = kManifestSchema;
  j["name"] = m.name;
  j["format"] = m.format;
  j["size_bytes"] = m.size_bytes();
  nlohmann::ordered_json parts = nlohmann::ordered_json::array();
  for (const auto& p : m.parts) {
    nlohmann::ordered_json pj;
    pj["role"] = p.role;
    pj["filename"] = p.filename;
    pj["digest"] = digest_string(p.digest);
    pj["size_bytes"] = p.size_bytes;
    pj["source"] = p.source;
    parts.push_back(std::move(pj));
  }
  j["parts"] = std::move(parts);
  j["sources"] = m.sources();
  j["license"] = m.license;
  j["parameters"] = m.parameters.is_object() ? m.parameters : nlohmann::json::object();
  j["created"] = m.created;
  return j.dump(2) + "\n";
}

Result<Manifest> parse_manifest(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return manifest_error("not valid JSON");
  if (!j.is_object()) return manifest_error("not a JSON object");
  auto schema = j.find("schema");
  if (schema == j.end() || !schema->is_string()) {
    return manifest_error("no \"schema\" (expected \"power.manifest.v1\")");
  }
  const std::string s = schema->get<std::string>();
  if (s != kManifestSchema) {
    if (s.starts_with("power.manifest.")) {
      return Status(StatusCode::kUnsupported,
                    fmt::format("unsupported manifest version \"{}\": this build of Power reads "
                                "\"{}\" only (a newer Power wrote it?)",
                                s, kManifestSchema));
    }
    return manifest_error(fmt::format("schema is \"{}\", not \"{}\"", s, kManifestSchema));
  }
  Manifest m;
  POWER_ASSIGN_OR_RETURN(m.name, string_field(j, "name", true));
  POWER_RETURN_IF_ERROR(validate_model_name(m.name));
  POWER_ASSIGN_OR_RETURN(m.format, string_field(j, "format", true));
  POWER_ASSIGN_OR_RETURN(m.license, string_field(j, "license", false));
  POWER_ASSIGN_OR_RETURN(m.created, string_field(j, "created", false));
  if (auto p = j.find("parameters"); p != j.end()) {
    if (!p->is_object()) return manifest_error("\"parameters\" must be an object");
    m.parameters = *p;
  }
  auto parts = j.find("parts");
  if (parts == j.end() || !parts->is_array() || parts->empty()) {
    return manifest_error("\"parts\" must be a non-empty list");
  }
  std::set<std::string> filenames;
  for (const auto& pj : *parts) {
    if (!pj.is_object()) return manifest_error("a part is not an object");
    ManifestPart part;
    POWER_ASSIGN_OR_RETURN(part.role, string_field(pj, "role", true));
    POWER_ASSIGN_OR_RETURN(part.filename, string_field(pj, "filename", true));
    POWER_ASSIGN_OR_RETURN(part.source, string_field(pj, "source", false));
    POWER_ASSIGN_OR_RETURN(std::string digest, string_field(pj, "digest", true));
    auto d = parse_digest(digest);
    if (!d.ok()) return manifest_error("bad part digest").with("digest", digest);
    part.digest = *d;
    POWER_ASSIGN_OR_RETURN(part.size_bytes, size_field(pj, "size_bytes"));
    if (part.filename.empty() || part.filename.find('/') != std::string::npos ||
        part.filename == "." || part.filename == "..") {
      return manifest_error("a part's filename must be a plain file name")
          .with("filename", part.filename);
    }
    if (!filenames.insert(part.filename).second) {
      return manifest_error("two parts share a filename").with("filename", part.filename);
    }
    m.parts.push_back(std::move(part));
  }
  if (j.contains("size_bytes")) {
    POWER_ASSIGN_OR_RETURN(uint64_t total, size_field(j, "size_bytes"));
    if (total != m.size_bytes()) {
      return manifest_error("\"size_bytes\" is not the sum of the parts' sizes")
          .with("declared", total)
          .with("sum", m.size_bytes());
    }
  }
  return m;
}

Result<Manifest> read_manifest(const StoreLayout& layout, std::string_view name) {
  POWER_RETURN_IF_ERROR(validate_model_name(name));
  const std::string path = layout.manifest_path(name);
  auto text = read_file_text(path);
  if (!text.ok()) {
    if (text.status().code() == StatusCode::kNotFound) {
      return Status(
          StatusCode::kNotFound,
          fmt::format("model '{}' not found in {} (`power ls` lists models)", name, layout.home()));
    }
    return std::move(text).take_status();
  }
  auto m = parse_manifest(*text);
  if (!m.ok()) return std::move(m).take_status().with("path", path);
  if (m->name != name) {
    return manifest_error("the name inside does not match the file name")
        .with("path", path)
        .with("inside", m->name);
  }
  return m;
}

Status write_manifest(const StoreLayout& layout, const Manifest& manifest) {
  POWER_RETURN_IF_ERROR(validate_model_name(manifest.name));
  if (manifest.parts.empty()) return Status(StatusCode::kInvalidArgument, "manifest has no parts");
  const std::string path = layout.manifest_path(manifest.name);
  std::error_code ec;
  std::filesystem::create_directories(parent_directory(path), ec);
  if (ec) {
    return Status(StatusCode::kIo, fmt::format("cannot create directory: {}", ec.message()))
        .with("path", parent_directory(path));
  }
  return write_file_atomic(path, manifest_to_json(manifest));
}

Status remove_manifest(const StoreLayout& layout, std::string_view name) {
  POWER_RETURN_IF_ERROR(validate_model_name(name));
  const std::string path = layout.manifest_path(name);
  if (::unlink(path.c_str()) != 0) {
    if (errno == ENOENT) {
      return Status(StatusCode::kNotFound, fmt::format("model '{}' not found", name));
    }
    return Status(StatusCode::kIo, fmt::format("cannot remove manifest: {}", std::strerror(errno)))
        .with("path", path);
  }
  std::string dir = parent_directory(path);
  Status synced = fsync_directory(dir);
  // Drop now-empty namespace directories, best effort.
  while (dir.size() > layout.manifests_dir().size() && ::rmdir(dir.c_str()) == 0) {
    dir = parent_directory(dir);
  }
  return synced;
}

Result<std::vector<ManifestEntry>> list_manifests(const StoreLayout& layout) {
  namespace fs = std::filesystem;
  std::vector<ManifestEntry> out;
  std::error_code ec;
  const fs::path root(layout.manifests_dir());
  fs::recursive_directory_iterator it(root, ec), end;
  if (ec) {
    return Status(StatusCode::kIo, fmt::format("cannot list manifests: {}", ec.message()))
        .with("path", root.string());
  }
  for (; it != end; it.increment(ec)) {
    if (ec) break;
    if (!it->is_regular_file(ec)) continue;
    const std::string rel = fs::relative(it->path(), root, ec).string();
    if (ec || !rel.ends_with(".json")) continue;
    ManifestEntry e;
    e.name = rel.substr(0, rel.size() - 5);
    auto text = read_file_text(it->path().string());
    if (!text.ok()) {
      e.error = std::move(text).take_status();
    } else {
      auto m = parse_manifest(*text);
      if (m.ok() && m->name == e.name) {
        e.manifest = std::move(m).value();
      } else {
        e.error = m.ok() ? manifest_error("the name inside does not match the file name")
                         : std::move(m).take_status();
        e.raw_text = std::move(text).value();
      }
    }
    out.push_back(std::move(e));
  }
  if (ec) {
    return Status(StatusCode::kIo, fmt::format("cannot list manifests: {}", ec.message()))
        .with("path", root.string());
  }
  std::sort(out.begin(), out.end(),
            [](const ManifestEntry& a, const ManifestEntry& b) { return a.name < b.name; });
  return out;
}

std::vector<Sha256Digest> referenced_digests(const std::vector<ManifestEntry>& entries) {
  std::set<Sha256Digest> seen;
  for (const auto& e : entries) {
    if (e.manifest) {
      for (const auto& p : e.manifest->parts) seen.insert(p.digest);
      continue;
    }
    const std::string& t = e.raw_text;
    size_t run = 0;
    for (size_t i = 0; i <= t.size(); ++i) {
      if (i < t.size() && std::isxdigit(static_cast<unsigned char>(t[i]))) {
        ++run;
        continue;
      }
      if (run == 64) {
        auto d = parse_sha256_hex(std::string_view(t).substr(i - 64, 64));
        if (d.ok()) seen.insert(*d);
      }
      run = 0;
    }
  }
  return {seen.begin(), seen.end()};
}

}  // namespace power::store
