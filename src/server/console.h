// The web console of `power serve` (docs/CONSOLE.md): GET / answers the page and GET /ui/<file>
// its scripts and style, all compiled into the binary (server/ui_assets.h), with an ETag (the
// file's SHA-256), `Cache-Control: no-cache` and a Content-Security-Policy that lets the page
// load nothing from elsewhere. The page then calls the server's own API (chat, /api/ps,
// /metrics, ...) with the key the user typed. These routes need no API key: they hold nothing
// secret, and a browser cannot add an Authorization header to a navigation.
// Off with `--no-ui` (config key "ui": false): / and /ui/ are then 404 like any unknown path.
// Thread-safety: handlers read immutable data.
#pragma once

#include <httplib.h>

namespace power::server {

void register_console_routes(httplib::Server& s);

// True for the paths register_console_routes() answers (open to callers without a key).
bool is_console_path(const std::string& path);

}  // namespace power::server
