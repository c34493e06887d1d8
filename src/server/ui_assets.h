// The web console's files (src/server/ui), compiled into the binary by
// cmake/embed_assets.cmake so that `power serve` needs nothing beside itself to serve them.
// Thread-safety: immutable data.
#pragma once

#include <span>
#include <string_view>

namespace power::server {

struct UiAsset {
  std::string_view path;          // "/index.html", "/app.js", ...
  std::string_view content_type;  // "text/javascript; charset=utf-8", ...
  std::string_view body;
  std::string_view sha256;  // of body, lowercase hex (the ETag)
};

std::span<const UiAsset> ui_assets();

}  // namespace power::server
