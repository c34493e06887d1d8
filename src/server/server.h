// `power serve`: the OpenAI-compatible HTTP service over the runtime.
//
// Layers: transport (cpp-httplib, HTTP/1.1 with keep-alive, optional TLS) -> this file's
// handlers (auth, request ids, limits, SSE framing, metrics) -> openai_mapping (the only
// OpenAI <-> runtime translation) -> power::Runtime (queueing, batching, memory).
// Routes: POST /v1/chat/completions, /v1/completions, /v1/embeddings; GET /v1/models,
// /v1/models/{id}; GET /health, /health/live, /health/ready, /metrics; GET /api/ps;
// POST /api/pull (SSE progress), /api/load, /api/unload; DELETE /api/delete.
// See docs/SERVER.md for the contract.
// Readiness (/health, /health/ready) is false until the models are loaded and warmed up and
// again from the moment shutdown() begins (status "draining"), so a balancer stops sending.
// Thread-safety: start() once, then wait() on one thread; shutdown() from any thread
// (a signal-watching thread): it stops accepting, lets running requests finish (up to
// drain_timeout_s, then cancels them) and makes wait() return.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "onnx/service.h"
#include "power/runtime.h"
#include "power/status.h"

namespace power::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: any free port (port() tells which)
  // --listen addresses (server/listeners.h: tcp://HOST:PORT, unix:///path.sock,
  // vsock://PORT); empty: tcp on host:port. Every listener serves the same routes with the
  // same limits, authentication, TLS and drain.
  std::vector<std::string> listen;
  std::vector<std::string> models;  // files or store names loaded at start
  // The runtime's weights cache (RuntimeOptions::weights_cache, weights_cache_policy).
  std::string weights_cache;
  std::string weights_cache_policy = "lfru";
  // Model plugins (power/sdk/plugin.h) loaded before the models: their architectures can be
  // served like the built-in ones.
  std::vector<std::string> model_libs;
  std::string api_key_file;  // one key per line (or sha256:<hex>); empty: no auth
  // Origins browsers may call from (server/cors.h); empty: the local origins; "*": any.
  std::vector<std::string> cors_origins;
  std::string tls_cert, tls_key;  // both set: HTTPS
  // --ra-tls auto|sev-snp|tdx|development (attest/ra_tls.h): HTTPS with a fresh key whose
  // certificate carries TEE evidence binding it; GET /v1/attestation?nonce= answers fresh
  // evidence. Empty: off. Exclusive with tls_cert/tls_key. docs/CONFIDENTIAL.md.
  std::string ra_tls;
  std::string ra_tls_vcek_file;  // a VCEK for SEV-SNP hosts whose certificate table lacks one
  uint64_t max_body_bytes = 16ull << 20;
  int http_threads = 256;  // connections served at once (each stream holds one)
  int read_timeout_s = 30;
  int write_timeout_s = 30;
  int keep_alive_timeout_s = 5;
  int queue_timeout_s = 0;  // > 0: a request still waiting after this long gets 503
  int drain_timeout_s = 30;
  // Runtime load options for every model this server loads.
  LoadOptions load;
  std::string store_home;  // empty: $POWER_HOME / default (for /api/pull and /api/delete)
  // What "-m" / "model" in /api/load names -> a file path (the CLI resolves store names).
  std::function<Result<std::string>(const std::string&)> resolve_model;
  bool log_requests = true;
  // --redact-logs (server/redact.h): no request or response text in log lines (sizes instead)
  // and none of the request's own text echoed in error messages.
  bool redact_logs = false;
  // This process's name in a fleet: the X-Power-Instance header on every answer and /health's
  // "instance" (docs/DEPLOY.md); empty: hostname:port.
  std::string instance_id;
  // Before readiness: one short generation per loaded language model, so the first user
  // request does not pay first-touch costs (page-in of mapped weights, thread start-up).
  bool warmup = true;
  bool ui = true;  // the web console at / (server/console.h); --no-ui turns it off
  // ONNX models for /v1/audio/vad, /v1/ocr, /v1/classify (server/onnx_http.h).
  onnx::ServiceOptions onnx;
};

// Applies a JSON config file's keys (the long flag names, '-' or '_') onto `options`;
// unknown keys and wrong types are errors.
Status apply_config_json(const nlohmann::json& config, ServerOptions* options);
Status apply_config_file(const std::string& path, ServerOptions* options);

// The memory plan of `options`' models without serving: each is loaded as `power serve` would
// load it (no socket, no warm-up) and reported with /api/ps's split (weights_bytes,
// kv_cache_bytes, state_bytes, scratch_bytes, size_bytes), with total_bytes over the models
// and, for one model, the Helm chart's `memoryPlan` values (docs/DEPLOY.md "Sizing"). The KV
// pool is sized against this machine's free memory, as at serve time.
Result<nlohmann::json> memory_plan(const ServerOptions& options);

class Server {
 public:
  static Result<std::unique_ptr<Server>> create(ServerOptions options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the socket and starts serving (/health says "loading", other routes 503), then
  // loads the configured models and warms them up; returns once the server is ready.
  Status start();
  // The first tcp listener's port (0 when every listener is a unix or vsock socket).
  int port() const;
  // Every listener's address as bound (port 0 resolved), in --listen order.
  std::vector<std::string> listening() const;
  bool tls() const;
  // Serves until shutdown(); returns once running requests are drained.
  Status wait();
  void shutdown();

  struct Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace power::server
