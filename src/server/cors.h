// Cross-origin requests (CORS) for browser clients of `power serve`.
//
// Which origins may call the server: `--cors-origin` (repeatable; config key "cors_origin",
// a string or an array). Empty (the default): the local origins only, as Ollama does:
// http(s)://localhost, 127.0.0.1, [::1] and 0.0.0.0 on any port. "*" allows every origin.
// An entry is an exact origin ("https://chat.example.com", "http://127.0.0.1:3000") or, with
// a port of "*", that scheme and host on any port ("http://192.168.1.5:*").
// The server answers a preflight (OPTIONS with Origin and Access-Control-Request-Method)
// before authentication, and puts Access-Control-Allow-Origin on every answer to an allowed
// origin; a disallowed origin's preflight gets 403 and its other requests no CORS headers,
// so the browser withholds the answer from the page.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "power/status.h"

namespace power::server {

// True when `origin` (the Origin header's value) may call the server.
bool cors_origin_allowed(const std::vector<std::string>& allowed, std::string_view origin);
// True for http(s) origins on localhost, 127.0.0.1, [::1] or 0.0.0.0 (any port).
bool is_local_origin(std::string_view origin);
// Checks one --cors-origin entry: "*", or scheme://host[:port|:*] without a path.
Status validate_cors_origin(std::string_view entry);

// What the server sends: the methods and request headers it accepts cross-origin, and the
// response headers a page may read.
inline constexpr const char* kCorsAllowMethods = "GET, POST, DELETE, OPTIONS";
inline constexpr const char* kCorsAllowHeaders =
    "Authorization, Content-Type, X-Request-ID, X-Session-ID, OpenAI-Organization, "
    "OpenAI-Project, OpenAI-Beta";
inline constexpr const char* kCorsExposeHeaders = "X-Request-ID, X-Power-Receipt-SHA256";
inline constexpr const char* kCorsMaxAge = "600";

}  // namespace power::server
