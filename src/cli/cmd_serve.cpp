// `power serve`: the OpenAI-compatible HTTP service. See docs/SERVER.md.
#include <pthread.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include <CLI/CLI.hpp>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "server/cors.h"
#include "server/server.h"

namespace power::cli {
namespace {

struct ServeArgs {
  std::string config;
  server::ServerOptions opts;
  std::vector<std::string> models;
  bool no_ui = false;
  bool no_warmup = false;
  bool print_plan = false;
};

void run_serve(ServeArgs& a, CLI::App* cmd) {
  server::ServerOptions o;
  if (!a.config.empty()) {
    Status st = server::apply_config_file(a.config, &o);
    if (!st.ok()) return report_error(st);
  }
  // Flags given on the command line override the config file.
  auto given = [cmd](const char* name) { return cmd->get_option(name)->count() > 0; };
  if (given("--host")) o.host = a.opts.host;
  if (given("--port")) o.port = a.opts.port;
  if (given("--listen")) {
    if (given("--host") || given("--port")) {
      return report_error(Status(StatusCode::kInvalidArgument,
                                 "--listen replaces --host/--port: write tcp://HOST:PORT instead"));
    }
    o.listen = a.opts.listen;
  }
  for (const auto& m : a.models) o.models.push_back(m);
  for (const auto& l : a.opts.model_libs) o.model_libs.push_back(l);
  if (given("--api-key-file")) o.api_key_file = a.opts.api_key_file;
  for (const auto& origin : a.opts.cors_origins) {
    Status st = server::validate_cors_origin(origin);
    if (!st.ok()) return report_error(st);
  }
  if (given("--cors-origin")) o.cors_origins = a.opts.cors_origins;
  if (given("--tls-cert")) o.tls_cert = a.opts.tls_cert;
  if (given("--tls-key")) o.tls_key = a.opts.tls_key;
  if (given("--ra-tls")) o.ra_tls = a.opts.ra_tls;
  if (given("--ra-tls-vcek")) o.ra_tls_vcek_file = a.opts.ra_tls_vcek_file;
  if (given("--max-body-bytes")) o.max_body_bytes = a.opts.max_body_bytes;
  if (given("--http-threads")) o.http_threads = a.opts.http_threads;
  if (given("--read-timeout")) o.read_timeout_s = a.opts.read_timeout_s;
  if (given("--write-timeout")) o.write_timeout_s = a.opts.write_timeout_s;
  if (given("--keep-alive-timeout")) o.keep_alive_timeout_s = a.opts.keep_alive_timeout_s;
  if (given("--queue-timeout")) o.queue_timeout_s = a.opts.queue_timeout_s;
  if (given("--drain-timeout")) o.drain_timeout_s = a.opts.drain_timeout_s;
  if (a.no_ui) o.ui = false;
  if (a.no_warmup) o.warmup = false;
  if (given("--instance-id")) o.instance_id = a.opts.instance_id;
  if (a.opts.redact_logs) o.redact_logs = true;
  if (given("--model-key-file")) o.load.model_key_file = a.opts.load.model_key_file;
  if (a.opts.load.require_mlock) o.load.require_mlock = true;
  if (a.opts.load.mlock) o.load.mlock = true;
  if (given("--ctx")) o.load.n_ctx = a.opts.load.n_ctx;
  if (given("--max-running")) o.load.max_running = a.opts.load.max_running;
  if (given("--max-waiting")) o.load.max_waiting = a.opts.load.max_waiting;
  if (given("--threads")) o.load.threads = a.opts.load.threads;
  if (given("--replicas")) o.load.replicas = a.opts.load.replicas;
  if (given("--kv-type")) o.load.kv_type = a.opts.load.kv_type;
  if (given("--weights-budget")) o.load.weights_budget = a.opts.load.weights_budget;
  if (given("--prefetch")) o.load.prefetch = a.opts.load.prefetch;
  if (given("--mirror-dir")) o.load.mirror_dir = a.opts.load.mirror_dir;
  if (given("--mirror-bytes")) o.load.mirror_bytes = a.opts.load.mirror_bytes;
  if (given("--weights-cache")) o.weights_cache = a.opts.weights_cache;
  if (given("--weights-cache-policy")) o.weights_cache_policy = a.opts.weights_cache_policy;
  if (given("--state-checkpoints")) o.load.state_checkpoints = a.opts.load.state_checkpoints;
  // ONNX models (docs/SERVER.md "ONNX models").
  const onnx::ServiceOptions& x = a.opts.onnx;
  for (const auto& m : x.vad_models) o.onnx.vad_models.push_back(m);
  for (const auto& m : x.classify_models) o.onnx.classify_models.push_back(m);
  if (given("--ocr-det")) o.onnx.ocr_det = x.ocr_det;
  if (given("--ocr-rec")) o.onnx.ocr_rec = x.ocr_rec;
  if (given("--ocr-keys")) o.onnx.ocr_keys = x.ocr_keys;
  if (given("--ocr-id")) o.onnx.ocr_id = x.ocr_id;
  if (given("--onnx-max-running")) o.onnx.max_running = x.max_running;
  if (given("--onnx-max-waiting")) o.onnx.max_waiting = x.max_waiting;
  if (given("--onnx-budget-bytes")) o.onnx.budget_bytes = x.budget_bytes;
  if (given("--onnx-threads")) o.onnx.threads = x.threads;
  if (given("--onnx-max-batch")) o.onnx.max_batch = x.max_batch;
  if (given("--onnx-ocr-max-batch")) o.onnx.ocr_max_batch = x.ocr_max_batch;
  if (given("--onnx-batch-wait-us")) o.onnx.batch_wait_us = x.batch_wait_us;
  o.resolve_model = [](const std::string& m) { return resolve_model_path(m); };

  if (a.print_plan) {
    auto plan = server::memory_plan(o);
    if (!plan.ok()) return report_error(plan.status());
    std::printf("%s\n", plan->dump(2).c_str());
    return;
  }

  // SIGINT/SIGTERM go to one watcher thread (blocked everywhere else, so every thread the
  // server starts inherits the mask); SIGPIPE from a vanished client is an error return.
  std::signal(SIGPIPE, SIG_IGN);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);

  const bool ui = o.ui;
  auto created = server::Server::create(std::move(o));
  if (!created.ok()) return report_error(created.status());
  server::Server& srv = **created;
  // The watcher runs from before start(): SIGTERM while the models load (nothing is admitted
  // yet, /health says "loading") exits at once; once serving, it drains.
  enum Phase { kLoading, kServing, kDone };
  std::atomic<int> phase{kLoading};
  std::thread watcher([&srv, &phase, set] {
    int sig = 0;
    sigwait(&set, &sig);
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (phase == kDone) return;  // woken by this thread's owner: nothing to do
    if (phase == kLoading) {
      std::fprintf(stderr, "power serve: %s while loading, exiting\n", name);
      std::fflush(stderr);
      std::_Exit(0);
    }
    std::fprintf(stderr, "power serve: %s, draining\n", name);
    srv.shutdown();
  });
  auto stop_watcher = [&watcher, &phase] {
    phase = kDone;
    pthread_kill(watcher.native_handle(), SIGTERM);
    watcher.join();
  };
  Status st = srv.start();
  if (!st.ok()) {
    stop_watcher();
    return report_error(st);
  }
  phase = kServing;
  // One line per listener; the first tcp one keeps the line scripts read the URL from.
  bool web_line = false;
  for (const std::string& uri : srv.listening()) {
    std::string url = uri;
    if (uri.rfind("tcp://", 0) == 0) {
      url = fmt::format("{}://{}", srv.tls() ? "https" : "http", uri.substr(6));
      std::printf("power serve: listening on %s (OpenAI API at %s/v1)\n", url.c_str(), url.c_str());
      if (ui && !web_line) std::printf("power serve: web console at %s/\n", url.c_str());
      web_line = true;
    } else {
      std::printf("power serve: listening on %s%s\n", url.c_str(), srv.tls() ? " (TLS)" : "");
    }
  }
  std::fflush(stdout);

  st = srv.wait();
  // wait() returns only after shutdown() (or a listener failure): wake the watcher if needed.
  if (!st.ok()) {
    stop_watcher();
    return report_error(st);
  }
  watcher.join();
  std::fprintf(stderr, "power serve: stopped\n");
}

}  // namespace

void add_serve_commands(CLI::App& app) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* cmd = app.add_subcommand("serve", "Serve models over an OpenAI-compatible HTTP API");
  server::ServerOptions& o = a->opts;
  cmd->add_option("--host", o.host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o.port, "Port (0: any free port)")->capture_default_str();
  cmd->add_option("--listen", o.listen,
                  "Listen address, repeatable: tcp://HOST:PORT, unix:///path.sock, vsock://PORT "
                  "(replaces --host/--port; docs/CONFIDENTIAL.md)");
  cmd->add_option("-m,--model", a->models, "Model file or store name to load (repeatable)");
  cmd->add_option("--config", a->config, "JSON file with the same keys as these flags");
  cmd->add_option("--model-lib", o.model_libs,
                  "Model plugin (.so) whose architectures to serve (repeatable; docs/SDK.md)");
  cmd->add_option("--api-key-file", o.api_key_file,
                  "Bearer keys, one per line (or sha256:<hex>); /health stays open");
  cmd->add_option("--cors-origin", o.cors_origins,
                  "Origin browsers may call from (repeat; '*': any; default: localhost origins)");
  cmd->add_flag("--no-ui", a->no_ui, "No web console at / (docs/CONSOLE.md)");
  cmd->add_flag("--no-warmup", a->no_warmup,
                "Ready as soon as the models load, without a warm-up generation each");
  cmd->add_flag("--print-plan", a->print_plan,
                "Load the models, print their memory plan as JSON (weights, KV, state, scratch; "
                "Helm memoryPlan values) and exit without serving");
  cmd->add_option("--instance-id", o.instance_id,
                  "This replica's name: X-Power-Instance header, /health (default host:port)");
  cmd->add_flag("--redact-logs", o.redact_logs,
                "Keep prompts, outputs, tool arguments and inputs out of logs and error "
                "messages (docs/CONFIDENTIAL.md)");
  cmd->add_option("--model-key-file", o.load.model_key_file,
                  "Key of encrypted model containers (power encrypt; 32 bytes or 64 hex "
                  "digits; also POWER_MODEL_KEY)");
  cmd->add_flag("--mlock", o.load.mlock,
                "Lock the weights in RAM so that memory pressure cannot page them out");
  cmd->add_flag("--require-mlock", o.load.require_mlock,
                "Refuse weights that cannot be locked in RAM (RLIMIT_MEMLOCK): decrypted ones, "
                "or any with --mlock");
  cmd->add_option("--tls-cert", o.tls_cert, "PEM certificate: serve HTTPS");
  cmd->add_option("--tls-key", o.tls_key, "PEM private key for --tls-cert");
  cmd->add_option("--ra-tls", o.ra_tls,
                  "Attested TLS: auto|sev-snp|tdx|development (a fresh key whose certificate "
                  "carries TEE evidence; development: unattested; docs/CONFIDENTIAL.md)");
  cmd->add_option("--ra-tls-vcek", o.ra_tls_vcek_file,
                  "SEV-SNP: the VCEK (PEM/DER) when the host's certificate table has none");
  cmd->add_option("--max-body-bytes", o.max_body_bytes, "Largest request body (413 beyond)")
      ->capture_default_str();
  cmd->add_option("--http-threads", o.http_threads, "Connections served at once")
      ->capture_default_str();
  cmd->add_option("--read-timeout", o.read_timeout_s, "Seconds to read a request")
      ->capture_default_str();
  cmd->add_option("--write-timeout", o.write_timeout_s, "Seconds for a blocked write")
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", o.keep_alive_timeout_s, "Idle keep-alive seconds")
      ->capture_default_str();
  cmd->add_option("--queue-timeout", o.queue_timeout_s,
                  "Seconds a request may wait for memory or a slot (503 after; 0: no limit)")
      ->capture_default_str();
  cmd->add_option("--drain-timeout", o.drain_timeout_s,
                  "On SIGTERM/SIGINT: seconds running requests may finish before cancellation")
      ->capture_default_str();
  cmd->add_option("--ctx", o.load.n_ctx, "Context positions per request (0: the model's)");
  cmd->add_option("--max-running", o.load.max_running, "Sequences in one batch")
      ->capture_default_str();
  cmd->add_option("--max-waiting", o.load.max_waiting, "Queued requests before 429")
      ->capture_default_str();
  cmd->add_option("--threads", o.load.threads, "Compute threads (0: all cores)");
  cmd->add_option("--replicas", o.load.replicas, "Session replicas per model")
      ->capture_default_str();
  cmd->add_option("--kv-type", o.load.kv_type, "KV cache type: f16 or f32")->capture_default_str();
  cmd->add_option("--weights-budget", o.load.weights_budget,
                  "Bytes of weights kept in memory (800M, 1.5GiB, 50%); the rest is streamed "
                  "from the file (default auto: all when they fit; docs/RESIDENCY.md)");
  cmd->add_option("--prefetch", o.load.prefetch,
                  "Streamed weight groups read ahead, 0-4 (default 2)");
  add_mirror_options(cmd, &o.load.mirror_dir, &o.load.mirror_bytes);
  add_weights_cache_options(cmd, &o.weights_cache, &o.weights_cache_policy);
  cmd->add_option("--state-checkpoints", o.load.state_checkpoints,
                  "Recurrent models: state checkpoints the prefix cache keeps per replica (0: "
                  "recompute every prompt)")
      ->capture_default_str()
      ->check(CLI::Range(0, 4096));
  onnx::ServiceOptions& x = o.onnx;
  cmd->add_option("--vad-model", x.vad_models,
                  "[ID=]Silero VAD ONNX file or store name for POST /v1/audio/vad (repeatable)");
  cmd->add_option("--classify-model", x.classify_models,
                  "[ID=]MNIST-style ONNX classifier for POST /v1/classify (repeatable)");
  cmd->add_option("--ocr-det", x.ocr_det, "PaddleOCR detection ONNX for POST /v1/ocr");
  cmd->add_option("--ocr-rec", x.ocr_rec, "PaddleOCR recognition ONNX for POST /v1/ocr");
  cmd->add_option("--ocr-keys", x.ocr_keys, "PaddleOCR character list (ppocr_keys_v1.txt)");
  cmd->add_option("--ocr-id", x.ocr_id, "Model id of the OCR pipeline")->capture_default_str();
  cmd->add_option("--onnx-max-running", x.max_running, "ONNX executions at once")
      ->capture_default_str();
  cmd->add_option("--onnx-max-waiting", x.max_waiting,
                  "ONNX executions waiting for memory or a slot before 429")
      ->capture_default_str();
  cmd->add_option("--onnx-budget-bytes", x.budget_bytes,
                  "Memory for ONNX executions (0: device budget less weights)");
  cmd->add_option("--onnx-threads", x.threads, "Compute threads per ONNX execution")
      ->capture_default_str();
  cmd->add_option(
         "--onnx-max-batch", x.max_batch,
         "VAD windows or classify images of concurrent requests stacked into one execution "
         "(1: off)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--onnx-ocr-max-batch", x.ocr_max_batch,
                  "OCR lines of concurrent requests stacked into one recognizer run (1: off; "
                  "at most 4 x 320 px of lines per run)")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--onnx-batch-wait-us", x.batch_wait_us,
                  "Microseconds a batch short of --onnx-max-batch waits for more requests")
      ->check(CLI::Range(0, 1000000))
      ->capture_default_str();
  cmd->callback([a, cmd] { run_serve(*a, cmd); });
}

}  // namespace power::cli
