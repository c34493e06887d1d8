#include "store/layout.h"

#include <sys/stat.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include <nlohmann/json.hpp>

#include "base/env.h"
#include "base/file.h"

namespace power::store {
namespace {

Status make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) == 0 || errno == EEXIST) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return Status();
    return Status(StatusCode::kIo, "store path exists but is not a directory").with("path", path);
  }
  return Status(StatusCode::kIo, fmt::format("cannot create directory: {}", std::strerror(errno)))
      .with("path", path);
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

bool is_scheme(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '+' && c != '-' && c != '.') {
      return false;
    }
  }
  return true;
}

// True while `entry` is a URL whose authority (host[:port]) is still being read.
bool in_authority(std::string_view entry) {
  auto p = entry.find("://");
  if (p == std::string_view::npos) return false;
  std::string_view rest = entry.substr(p + 3);
  if (rest.find('/') != std::string_view::npos) return false;
  return true;
}

bool open_ipv6_bracket(std::string_view entry) {
  auto open = entry.rfind('[');
  return open != std::string_view::npos && entry.find(']', open) == std::string_view::npos;
}

Result<uint64_t> parse_u64(std::string_view text, std::string_view what) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || text.empty()) {
    return Status(StatusCode::kInvalidArgument, "not a non-negative integer")
        .with("setting", what)
        .with("value", text);
  }
  return v;
}

}  // namespace

std::string StoreLayout::default_home() {
  return power_home();
}

Result<StoreLayout> StoreLayout::open(const std::string& home) {
  if (home.empty()) return Status(StatusCode::kInvalidArgument, "empty store home directory");
  StoreLayout l;
  l.home_ = home;
  while (l.home_.size() > 1 && l.home_.back() == '/') l.home_.pop_back();
  for (const std::string& dir :
       {l.home_, l.blobs_dir(), l.manifests_dir(), l.staging_dir(), l.locks_dir()}) {
    POWER_RETURN_IF_ERROR(make_dir(dir));
  }
  return l;
}

std::string StoreLayout::blob_path(const Sha256Digest& digest) const {
  return blobs_dir() + "/" + blob_file_name(digest);
}

std::string StoreLayout::tensor_manifest_path(const Sha256Digest& digest) const {
  return home_ + "/tensors/" + blob_file_name(digest) + ".json";
}

std::string StoreLayout::manifest_path(std::string_view name) const {
  return fmt::format("{}/{}.json", manifests_dir(), name);
}

std::string StoreLayout::digest_lock_path(const Sha256Digest& digest) const {
  return locks_dir() + "/" + blob_file_name(digest) + ".lock";
}

std::string StoreLayout::source_lock_path(std::string_view source) const {
  return fmt::format("{}/url-{}.lock", locks_dir(), sha256_hex(source));
}

std::string blob_file_name(const Sha256Digest& digest) {
  return "sha256-" + to_hex(digest);
}
std::string digest_string(const Sha256Digest& digest) {
  return "sha256:" + to_hex(digest);
}

Result<Sha256Digest> parse_digest(std::string_view text) {
  if (text.starts_with("sha256:") || text.starts_with("sha256-")) text.remove_prefix(7);
  auto d = parse_sha256_hex(text);
  if (!d.ok()) {
    return Status(StatusCode::kInvalidArgument,
                  "a digest is sha256:<64 hex characters> (or sha256-<hex>, or bare hex)")
        .with("digest", text);
  }
  return d;
}

std::vector<std::string> parse_mirror_list(std::string_view text) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string_view piece = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    std::string cur;
    bool have = false;
    size_t p = 0;
    while (p <= piece.size()) {
      size_t colon = piece.find(':', p);
      std::string_view tok =
          piece.substr(p, colon == std::string_view::npos ? std::string_view::npos : colon - p);
      if (have && ((is_scheme(trim(cur)) && tok.starts_with("//")) || open_ipv6_bracket(cur) ||
                   (in_authority(cur) && !tok.empty() &&
                    std::isdigit(static_cast<unsigned char>(tok[0]))))) {
        cur += ':';
        cur += tok;
      } else {
        if (have && !trim(cur).empty()) out.push_back(trim(cur));
        cur = std::string(tok);
        have = true;
      }
      if (colon == std::string_view::npos) break;
      p = colon + 1;
    }
    if (have && !trim(cur).empty()) out.push_back(trim(cur));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return out;
}

Result<StoreConfig> parse_store_config(std::string_view json_text) {
  nlohmann::json j = nlohmann::json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return Status(StatusCode::kCorrupt, "config is not a JSON object");
  }
  StoreConfig c;
  auto int_setting = [&](const std::string& key, const nlohmann::json& v, int64_t* out) -> Status {
    if (!v.is_number_integer() || v.get<int64_t>() < 0) {
      return Status(StatusCode::kInvalidArgument, "must be a non-negative integer")
          .with("key", key);
    }
    *out = v.get<int64_t>();
    return Status();
  };
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const nlohmann::json& v = it.value();
    if (key == "schema") {
      if (!v.is_string() || v.get<std::string>() != "power.config.v1") {
        return Status(StatusCode::kUnsupported,
                      "unknown config schema (this build reads power.config.v1)")
            .with("schema", v.dump());
      }
    } else if (key == "mirrors") {
      if (v.is_string()) {
        c.mirrors = parse_mirror_list(v.get<std::string>());
      } else if (v.is_array()) {
        for (const auto& m : v) {
          if (!m.is_string()) {
            return Status(StatusCode::kInvalidArgument, "mirrors must be strings");
          }
          std::string s = trim(m.get<std::string>());
          if (!s.empty()) c.mirrors.push_back(s);
        }
      } else {
        return Status(StatusCode::kInvalidArgument, "mirrors must be a list of strings");
      }
    } else if (key == "max_download_bytes") {
      int64_t n = 0;
      POWER_RETURN_IF_ERROR(int_setting(key, v, &n));
      c.max_download_bytes = static_cast<uint64_t>(n);
    } else if (key == "connect_timeout_s") {
      POWER_RETURN_IF_ERROR(int_setting(key, v, &c.connect_timeout_s));
    } else if (key == "low_speed_time_s") {
      POWER_RETURN_IF_ERROR(int_setting(key, v, &c.low_speed_time_s));
    } else if (key == "low_speed_limit_bytes_per_s") {
      POWER_RETURN_IF_ERROR(int_setting(key, v, &c.low_speed_limit_bytes_per_s));
    } else if (key == "max_redirects") {
      POWER_RETURN_IF_ERROR(int_setting(key, v, &c.max_redirects));
    } else if (key == "attempts_per_source") {
      POWER_RETURN_IF_ERROR(int_setting(key, v, &c.attempts_per_source));
      if (c.attempts_per_source == 0) c.attempts_per_source = 1;
    } else if (key == "retry_delay_ms") {
      POWER_RETURN_IF_ERROR(int_setting(key, v, &c.retry_delay_ms));
    } else if (key == "hf_endpoint") {
      if (!v.is_string()) return Status(StatusCode::kInvalidArgument, "hf_endpoint: string");
      c.hf_endpoint = v.get<std::string>();
    } else {
      return Status(StatusCode::kInvalidArgument, "unknown config key").with("key", key);
    }
  }
  return c;
}

Result<StoreConfig> load_store_config(const StoreLayout& layout) {
  StoreConfig c;
  struct stat st {};
  if (::stat(layout.config_path().c_str(), &st) == 0) {
    auto text = read_file_text(layout.config_path());
    if (!text.ok()) return std::move(text).take_status();
    auto parsed = parse_store_config(*text);
    if (!parsed.ok()) return std::move(parsed).take_status().with("path", layout.config_path());
    c = std::move(parsed).value();
  }
  if (const char* env = std::getenv("POWER_MIRRORS"); env != nullptr) {
    c.mirrors = parse_mirror_list(env);  // set (even empty): replaces the config list
  }
  if (const char* env = std::getenv("POWER_MAX_DOWNLOAD_BYTES"); env != nullptr && *env) {
    POWER_ASSIGN_OR_RETURN(c.max_download_bytes, parse_u64(env, "POWER_MAX_DOWNLOAD_BYTES"));
  }
  if (const char* env = std::getenv("HF_ENDPOINT"); env != nullptr && *env) c.hf_endpoint = env;
  while (!c.hf_endpoint.empty() && c.hf_endpoint.back() == '/') c.hf_endpoint.pop_back();
  if (const char* env = std::getenv("HF_TOKEN"); env != nullptr && *env) {
    c.hf_token = env;
  } else if (const char* legacy = std::getenv("HUGGING_FACE_HUB_TOKEN");
             legacy != nullptr && *legacy) {
    c.hf_token = legacy;
  }
  return c;
}

}  // namespace power::store
