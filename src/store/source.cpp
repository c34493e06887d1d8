#include "store/source.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

namespace power::store {
namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool repo_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string url_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && hex_value(s[i + 1]) >= 0 && hex_value(s[i + 2]) >= 0) {
      out += static_cast<char>(hex_value(s[i + 1]) * 16 + hex_value(s[i + 2]));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

// The last path segment of a URL, without query or fragment, percent-decoded.
std::string url_filename(std::string_view url) {
  auto scheme_end = url.find("://");
  std::string_view rest = scheme_end == std::string_view::npos ? url : url.substr(scheme_end + 3);
  rest = rest.substr(0, rest.find_first_of("?#"));
  auto slash = rest.find('/');
  if (slash == std::string_view::npos) return "";
  std::string_view path = rest.substr(slash);
  std::string name = url_decode(path.substr(path.find_last_of('/') + 1));
  if (name == "." || name == ".." || name.find('/') != std::string::npos) return "";
  return name;
}

Status bad_hf(std::string_view url, std::string_view why) {
  return Status(StatusCode::kInvalidArgument,
                fmt::format("bad hf:// source: {} (expected hf://owner/repo[@revision]/path)", why))
      .with("source", url);
}

}  // namespace

std::string url_encode_path(std::string_view path) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char c : path) {
    unsigned char u = static_cast<unsigned char>(c);
    if (std::isalnum(u) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      out += c;
    } else {
      out += '%';
      out += kHex[u >> 4];
      out += kHex[u & 15];
    }
  }
  return out;
}

Result<std::string> hf_resolve_url(std::string_view hf_url, std::string_view endpoint) {
  std::string_view rest = hf_url;
  if (!rest.starts_with("hf://")) return bad_hf(hf_url, "missing hf:// prefix");
  rest.remove_prefix(5);
  auto s1 = rest.find('/');
  if (s1 == std::string_view::npos) return bad_hf(hf_url, "no repository");
  std::string_view owner = rest.substr(0, s1);
  rest.remove_prefix(s1 + 1);
  auto s2 = rest.find('/');
  if (s2 == std::string_view::npos) return bad_hf(hf_url, "no path inside the repository");
  std::string_view repo = rest.substr(0, s2);
  std::string_view path = rest.substr(s2 + 1);
  std::string revision = "main";
  if (auto at = repo.find('@'); at != std::string_view::npos) {
    revision = url_decode(repo.substr(at + 1));
    repo = repo.substr(0, at);
    if (revision.empty()) return bad_hf(hf_url, "empty revision after '@'");
  }
  if (owner.empty() || repo.empty() || !std::all_of(owner.begin(), owner.end(), repo_char) ||
      !std::all_of(repo.begin(), repo.end(), repo_char) || owner.starts_with('.') ||
      repo.starts_with('.')) {
    return bad_hf(hf_url, "owner and repo are [A-Za-z0-9._-]");
  }
  if (path.empty()) return bad_hf(hf_url, "empty path");
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    std::string_view c =
        path.substr(start, slash == std::string_view::npos ? path.npos : slash - start);
    if (c.empty() || c == "." || c == "..") return bad_hf(hf_url, "bad path component");
    if (slash == std::string_view::npos) break;
    start = slash + 1;
  }
  std::string rev_encoded;
  for (char c : url_encode_path(revision)) {
    if (c == '/') {
      rev_encoded += "%2F";
    } else {
      rev_encoded += c;
    }
  }
  return fmt::format("{}/{}/{}/resolve/{}/{}", endpoint, owner, repo, rev_encoded,
                     url_encode_path(path));
}

Result<Source> parse_source(std::string_view text, const StoreConfig& config) {
  if (text.empty()) return Status(StatusCode::kInvalidArgument, "empty source");
  Source s;
  s.original = std::string(text);
  auto scheme_end = text.find("://");
  const std::string scheme =
      scheme_end == std::string_view::npos ? "" : lower(text.substr(0, scheme_end));
  if (scheme == "hf") {
    POWER_ASSIGN_OR_RETURN(s.location, hf_resolve_url(text, config.hf_endpoint));
    std::string_view rest = text.substr(5);
    rest.remove_prefix(rest.find('/') + 1);
    s.relative_path = std::string(rest.substr(rest.find('/') + 1));
    s.filename = s.relative_path.substr(s.relative_path.find_last_of('/') + 1);
    s.kind = SourceKind::kHttp;
    return s;
  }
  if (scheme == "http" || scheme == "https") {
    s.kind = SourceKind::kHttp;
    s.location = std::string(text);
    s.filename = url_filename(text);
    if (s.filename.empty()) {
      return Status(StatusCode::kInvalidArgument, "the URL does not end in a file name")
          .with("source", text);
    }
    return s;
  }
  std::string path;
  if (scheme == "file") {
    path = url_decode(text.substr(7));
    if (!path.starts_with('/')) {
      return Status(StatusCode::kInvalidArgument, "file:// URLs must hold an absolute path")
          .with("source", text);
    }
  } else if (!scheme.empty() && scheme.find_first_of("/\\") == std::string::npos) {
    return Status(StatusCode::kUnsupported,
                  fmt::format("unsupported source scheme '{}://' (use http, https, hf or a path)",
                              scheme))
        .with("source", text);
  } else {
    path = std::string(text);
  }
  std::error_code ec;
  s.kind = SourceKind::kFile;
  s.location = std::filesystem::absolute(path, ec).lexically_normal().string();
  if (ec) s.location = path;
  s.filename = std::filesystem::path(s.location).filename().string();
  if (s.filename.empty()) {
    return Status(StatusCode::kInvalidArgument, "the path does not name a file")
        .with("source", text);
  }
  s.original = s.location;
  return s;
}

std::vector<MirrorCandidate> mirror_candidates(const std::vector<std::string>& mirrors,
                                               const Source& source, const Sha256Digest& digest) {
  std::vector<std::string> keys = {blob_file_name(digest)};
  if (!source.relative_path.empty() && source.relative_path != source.filename) {
    keys.push_back(source.relative_path);
  }
  if (!source.filename.empty()) keys.push_back(source.filename);
  std::vector<MirrorCandidate> out;
  for (const std::string& m : mirrors) {
    std::string base = m;
    while (base.size() > 1 && base.back() == '/') base.pop_back();
    const std::string scheme = lower(base.substr(0, base.find("://")));
    bool is_url = base.find("://") != std::string::npos;
    if (is_url && scheme == "file") {
      base = url_decode(base.substr(7));
      is_url = false;
    } else if (is_url && scheme != "http" && scheme != "https") {
      continue;  // not a scheme Power fetches from; pull reports mirrors it skipped
    }
    for (const std::string& key : keys) {
      MirrorCandidate c;
      c.mirror = m;
      c.kind = is_url ? SourceKind::kHttp : SourceKind::kFile;
      c.location = is_url ? base + "/" + url_encode_path(key) : base + "/" + key;
      out.push_back(std::move(c));
    }
  }
  return out;
}

}  // namespace power::store
