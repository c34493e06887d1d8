// Model management routes of `power serve` (Ollama-like paths under /api):
//   POST   /api/pull   {"source", "name"?, "sha256"?, "size_bytes"?, "stream"?=true}
//          streams the store's progress events as SSE (data: <progress json>), ending with
//          {"status":"success",...} or {"status":"error",...} and data: [DONE]; a client that
//          goes away cancels the pull (its partial download stays for the next one).
//   POST   /api/load   {"model": file or store name} -> the loaded model
//   POST   /api/unload {"model": id} -> frees its memory (its running requests are cancelled)
//   DELETE /api/delete {"model": store name} -> removes it from the store
// Thread-safety: handlers run on the HTTP threads; the registry and the store synchronize.
#pragma once

#include <functional>

#include <httplib.h>

#include "server/model_registry.h"
#include "server/openai_mapping.h"
#include "server/server.h"

namespace power::server {

struct ManagementContext {
  const ServerOptions& opts;
  ModelRegistry& registry;
  std::function<void(httplib::Response&, const ApiError&)> send_error;
};

void register_management_routes(httplib::Server& s, ManagementContext ctx);

}  // namespace power::server
