// Ollama's native API on the same port as the OpenAI one (docs/SERVER.md "Ollama API"):
//   POST /api/chat, /api/generate   NDJSON stream by default ("stream": false: one object)
//   GET  /api/tags, /api/version;  POST /api/show, /api/embed, /api/embeddings
// and the Ollama request shapes of the management routes (/api/ps, /api/pull {"model"|"name"},
// /api/delete {"model"|"name"}), which server/management.cpp serves for both shapes.
// Fields are as strict as the OpenAI side: every field and option Ollama defines is honoured
// or refused with its reason; unknown ones are errors. Errors are Ollama's {"error": "..."}.
// Thread-safety: handlers run on the HTTP threads.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <httplib.h>

#include "server/generation.h"
#include "server/model_registry.h"
#include "server/server.h"

namespace power::server {

struct OllamaContext {
  const ServerOptions& opts;
  ModelRegistry& registry;
  std::function<std::shared_ptr<Generation>(std::shared_ptr<LoadedModel>,
                                            std::vector<GenerateRequest>, std::vector<int>)>
      make_generation;
  std::function<void(const std::string& reason, const std::string& message, int http_status)>
      count_rejection;
};

void register_ollama_routes(httplib::Server& s, OllamaContext ctx);

// The Ollama API level these routes implement (GET /api/version).
inline constexpr const char* kOllamaApiVersion = "0.12.0";

}  // namespace power::server
