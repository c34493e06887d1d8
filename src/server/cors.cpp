#include "server/cors.h"

#include <cctype>

#include <fmt/format.h>

namespace power::server {

namespace {

struct Origin {
  std::string_view scheme, host, port;  // port empty when absent
};

// Splits "scheme://host[:port]" (host may be a bracketed IPv6 literal); false for anything
// else (a path, userinfo, an empty host).
bool split_origin(std::string_view s, Origin* o) {
  const size_t sep = s.find("://");
  if (sep == std::string_view::npos || sep == 0) return false;
  o->scheme = s.substr(0, sep);
  std::string_view rest = s.substr(sep + 3);
  if (rest.empty() || rest.find_first_of("/?#@") != std::string_view::npos) return false;
  if (rest.front() == '[') {
    const size_t close = rest.find(']');
    if (close == std::string_view::npos) return false;
    o->host = rest.substr(0, close + 1);
    rest.remove_prefix(close + 1);
    if (rest.empty()) {
      o->port = {};
      return true;
    }
    if (rest.front() != ':') return false;
    o->port = rest.substr(1);
  } else {
    const size_t colon = rest.find(':');
    o->host = rest.substr(0, colon);
    o->port = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
    if (colon != std::string_view::npos && o->port.empty()) return false;
  }
  if (o->host.empty()) return false;
  for (char c : o->port) {
    if (!std::isdigit(static_cast<unsigned char>(c)) && o->port != "*") return false;
  }
  return true;
}

bool iequal(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool is_local_origin(std::string_view origin) {
  Origin o;
  if (!split_origin(origin, &o) || o.port == "*") return false;
  if (!iequal(o.scheme, "http") && !iequal(o.scheme, "https")) return false;
  return iequal(o.host, "localhost") || o.host == "127.0.0.1" || o.host == "[::1]" ||
         o.host == "0.0.0.0";
}

bool cors_origin_allowed(const std::vector<std::string>& allowed, std::string_view origin) {
  if (origin.empty()) return false;
  if (allowed.empty()) return is_local_origin(origin);
  Origin o;
  const bool parsed = split_origin(origin, &o) && o.port != "*";
  for (const std::string& entry : allowed) {
    if (entry == "*") return true;
    if (!parsed) continue;
    Origin a;
    if (!split_origin(entry, &a)) continue;
    if (!iequal(a.scheme, o.scheme) || !iequal(a.host, o.host)) continue;
    if (a.port == "*" || a.port == o.port) return true;
  }
  return false;
}

Status validate_cors_origin(std::string_view entry) {
  if (entry == "*") return Status();
  Origin o;
  if (!split_origin(entry, &o)) {
    return Status(
        StatusCode::kInvalidArgument,
        fmt::format("--cors-origin '{}' is not '*' or scheme://host[:port] (no path)", entry));
  }
  return Status();
}

}  // namespace power::server
