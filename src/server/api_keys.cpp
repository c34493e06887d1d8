#include "server/api_keys.h"

#include <cctype>

#include "base/file.h"
#include "base/sha256.h"

namespace power::server {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) {
    s.remove_prefix(1);
  }
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) {
    s.remove_suffix(1);
  }
  return s;
}

bool equal_constant_time(const Sha256Digest& a, const Sha256Digest& b) {
  volatile uint8_t diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = diff | (a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

Result<ApiKeys> ApiKeys::parse(std::string_view text) {
  ApiKeys keys;
  size_t line_no = 0;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty() || line.front() == '#') continue;
    if (line.starts_with("sha256:")) {
      auto d = parse_sha256_hex(line.substr(7));
      if (!d.ok()) {
        return Status(StatusCode::kInvalidArgument, "bad sha256: line in the API key file")
            .with("line", line_no);
      }
      keys.hashes_.push_back(*d);
    } else {
      keys.hashes_.push_back(sha256(line.data(), line.size()));
    }
  }
  if (keys.hashes_.empty()) {
    return Status(StatusCode::kInvalidArgument, "the API key file holds no keys");
  }
  return keys;
}

Result<ApiKeys> ApiKeys::load_file(const std::string& path) {
  auto text = read_file_text(path);
  if (!text.ok()) return text.status();
  return parse(*text);
}

bool ApiKeys::check_key(std::string_view key) const {
  if (key.empty()) return false;
  Sha256Digest h = sha256(key.data(), key.size());
  bool ok = false;
  for (const auto& stored : hashes_) ok = equal_constant_time(h, stored) || ok;
  return ok;
}

bool ApiKeys::check_header(std::string_view authorization) const {
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size()) return false;
  for (size_t i = 0; i < kBearer.size(); ++i) {
    char c = authorization[i];
    if (std::tolower(static_cast<unsigned char>(c)) !=
        std::tolower(static_cast<unsigned char>(kBearer[i]))) {
      return false;
    }
  }
  return check_key(trim(authorization.substr(kBearer.size())));
}

}  // namespace power::server
