#include "server/console.h"

#include <string>

#include "server/ui_assets.h"

namespace power::server {
namespace {

const UiAsset* find_asset(std::string_view path) {
  for (const UiAsset& a : ui_assets()) {
    if (a.path == path) return &a;
  }
  return nullptr;
}

// The page talks to its own server by default; a user may point it at another Power server
// (docs/CONSOLE.md), so connect-src allows any http(s) origin. Nothing else leaves 'self'.
constexpr const char* kCsp =
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self' http: https:; base-uri 'none'; form-action 'none'; "
    "frame-ancestors 'none'";

void send_asset(const httplib::Request& req, httplib::Response& res, const UiAsset& a) {
  const std::string etag = "\"" + std::string(a.sha256) + "\"";
  res.set_header("ETag", etag);
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Content-Type-Options", "nosniff");
  res.set_header("Content-Security-Policy", kCsp);
  res.set_header("Referrer-Policy", "no-referrer");
  if (req.get_header_value("If-None-Match") == etag) {
    res.status = 304;
    return;
  }
  res.set_content(std::string(a.body), std::string(a.content_type));
}

}  // namespace

bool is_console_path(const std::string& path) {
  return path == "/" || path == "/index.html" || path.starts_with("/ui/");
}

void register_console_routes(httplib::Server& s) {
  auto index = [](const httplib::Request& req, httplib::Response& res) {
    const UiAsset* a = find_asset("/index.html");
    if (a != nullptr) send_asset(req, res, *a);
  };
  s.Get("/", index);
  s.Get("/index.html", index);
  // A miss falls through to the server's 404 handler (OpenAI's error shape).
  s.Get(R"(/ui/([A-Za-z0-9._-]+))", [](const httplib::Request& req, httplib::Response& res) {
    const UiAsset* a = find_asset("/" + req.matches[1].str());
    if (a == nullptr) {
      res.status = 404;
      return;
    }
    send_asset(req, res, *a);
  });
}

}  // namespace power::server
