#include "server/server.h"

#include "power/sdk/registry.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"
#include "server/api_keys.h"
#include "server/connection_watch.h"
#include "server/embed_openai.h"
#include "server/management.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/onnx_http.h"
#include "server/openai_mapping.h"
#include "server/tool_stream.h"

namespace power::server {

using json = nlohmann::json;

namespace {

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string s(n, '0');
  for (auto& c : s) c = kHex[rng() & 15];
  return s;
}

// A client-supplied X-Request-ID is echoed when it is short printable ASCII.
bool acceptable_request_id(const std::string& id) {
  if (id.empty() || id.size() > 128) return false;
  for (unsigned char c : id) {
    if (c < 0x21 || c > 0x7e) return false;
  }
  return true;
}

// Routes as metrics labels: a fixed set, so garbage paths cannot grow the label space.
std::string route_label(const std::string& path) {
  static const std::set<std::string> kRoutes = {"/v1/chat/completions",
                                                "/v1/completions",
                                                "/v1/embeddings",
                                                "/v1/models",
                                                "/health",
                                                "/health/live",
                                                "/health/ready",
                                                "/metrics",
                                                "/api/ps",
                                                "/api/pull",
                                                "/api/load",
                                                "/api/unload",
                                                "/api/delete",
                                                "/v1/audio/vad",
                                                "/v1/ocr",
                                                "/v1/classify"};
  if (kRoutes.count(path) != 0) return path;
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  return "other";
}

std::string reason_for(const ApiError& e) {
  if (e.http_status == 429) return "queue_full";
  if (e.code == "deadline_exceeded") return "deadline";
  if (e.code == "does_not_fit" || e.code == "does_not_fit_now") return "does_not_fit";
  if (e.http_status == 401) return "unauthorized";
  if (e.http_status == 413) return "body_too_large";
  if (e.http_status == 404) return "not_found";
  if (e.code == "draining") return "draining";
  return "invalid_request";
}

// One generation: the runtime's worker thread produces, the HTTP thread waits and writes.
struct StreamState {
  std::mutex mu;
  std::condition_variable cv;
  std::string pending;
  std::vector<TokenLogprobs> pending_logprobs;  // of tokens since the last take
  bool done = false;
  Completion completion;
  std::atomic<bool> client_gone{false};
};

// How often a waiting request checks that its client is still connected (docs/SERVER.md).
constexpr std::chrono::milliseconds kWatchInterval{20};

// A request that ended without ever being admitted (still queued): no queue time, no prefill.
bool never_admitted(const Completion& c) {
  return c.usage.completion_tokens == 0 && c.timings.queue_ms == 0 && c.timings.prefill_ms == 0;
}

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<onnx::Service> onnx;  // null without ONNX models
  std::unique_ptr<httplib::Server> http;
  ApiKeys keys;
  bool auth = false;
  Metrics metrics;
  std::atomic<bool> draining{false};
  int bound_port = 0;

  std::mutex active_mu;
  std::map<uint64_t, RequestHandle> active;  // by runtime request id, for drain cancels
  uint64_t next_key = 1;

  void send_error(httplib::Response& res, const ApiError& e) {
    metrics.count_rejection(reason_for(e));
    res.status = e.http_status;
    res.set_content(to_wire(error_body(e)), "application/json");
  }

  void send_json(httplib::Response& res, const json& j, int status = 200) {
    res.status = status;
    res.set_content(to_wire(j), "application/json");
  }

  uint64_t track(const RequestHandle& h) {
    std::lock_guard<std::mutex> lk(active_mu);
    uint64_t k = next_key++;
    active.emplace(k, h);
    return k;
  }
  void untrack(uint64_t k) {
    std::lock_guard<std::mutex> lk(active_mu);
    active.erase(k);
  }

  // Parses the body as JSON; a parse failure (including invalid UTF-8) is a 400.
  std::optional<json> parse_body(const httplib::Request& req, httplib::Response& res) {
    json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
    if (body.is_discarded()) {
      send_error(res, bad_request("the request body is not valid JSON (or not UTF-8)", {},
                                  "invalid_json"));
      return std::nullopt;
    }
    if (!body.is_object()) {
      send_error(res, bad_request("the request body must be a JSON object"));
      return std::nullopt;
    }
    return body;
  }

  std::shared_ptr<LoadedModel> find_model(const std::string& id, httplib::Response& res) {
    auto m = registry->find(id);
    if (!m) {
      ApiError e;
      e.http_status = 404;
      e.message = fmt::format("the model '{}' does not exist or is not loaded", id);
      e.param = "model";
      e.code = "model_not_found";
      send_error(res, e);
    }
    return m;
  }

  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void stream_generation(Endpoint endpoint, const MappedRequest& mapped, ResponseMeta meta,
                         std::shared_ptr<LoadedModel> model, GenerateRequest request,
                         ConnectionWatch watch, httplib::Response& res);
  void register_routes();
};

void Server::Impl::handle_generate(Endpoint endpoint, const httplib::Request& req,
                                   httplib::Response& res) {
  auto body = parse_body(req, res);
  if (!body) return;
  std::string model_id;
  if (auto e = request_model_name(*body, &model_id)) return send_error(res, *e);
  auto model = find_model(model_id, res);
  if (!model) return;
  if (model->embedding) {
    return send_error(res, bad_request(fmt::format("model {} is an embedding model: use "
                                                   "/v1/embeddings",
                                                   model_id),
                                       "model", "model_not_generative"));
  }
  MapResult mapped = map_request(endpoint, *body, model->handle.info());
  if (mapped.error) return send_error(res, *mapped.error);
  if (opts.log_requests && !mapped.mapped.user.empty()) {
    POWER_LOG_INFO("request {} user={}", res.get_header_value("X-Request-ID"), mapped.mapped.user);
  }

  ResponseMeta meta;
  meta.id = (endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") + random_hex(24);
  meta.created = unix_now();
  meta.model = model->id;
  GenerateRequest request = std::move(mapped.mapped.request);
  if (opts.queue_timeout_s > 0) {
    request.deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(opts.queue_timeout_s);
  }
  ConnectionWatch watch(bound_port, req.remote_addr, req.remote_port);
  if (mapped.mapped.stream) {
    return stream_generation(endpoint, mapped.mapped, std::move(meta), model, std::move(request),
                             std::move(watch), res);
  }
  auto state = std::make_shared<StreamState>();
  request.on_done = [state](const Completion&) {
    {
      std::lock_guard<std::mutex> lk(state->mu);
      state->done = true;
    }
    state->cv.notify_all();
  };
  auto handle = runtime->submit(model->handle, std::move(request));
  if (!handle.ok()) return send_error(res, error_from_status(handle.status()));
  uint64_t key = track(*handle);
  {
    // While it waits (queued or running) the client's connection is watched: a client that
    // went away cancels the request at the next scheduler step.
    std::unique_lock<std::mutex> lk(state->mu);
    while (!state->cv.wait_for(lk, kWatchInterval, [&] { return state->done; })) {
      if (state->client_gone) continue;
      lk.unlock();
      const bool gone = watch.peer_gone();
      lk.lock();
      if (gone) {
        state->client_gone = true;
        handle->cancel();
      }
    }
  }
  Completion c = handle->wait();
  untrack(key);
  if (!c.status.ok()) {
    if (c.usage.completion_tokens > 0 || c.status.code() == StatusCode::kCancelled) {
      metrics.count_generation(c.usage, c.timings.time_to_first_token_ms, state->client_gone.load(),
                               never_admitted(c));
    }
    return send_error(res, error_from_status(c.status));
  }
  metrics.count_generation(c.usage, c.timings.time_to_first_token_ms, false);
  json answer = endpoint == Endpoint::kChatCompletions ? chat_response(meta, c)
                                                       : completion_response(meta, c);
  if (!c.receipt.empty()) {  // the exact signed bytes, and their digest (docs/RECEIPTS.md)
    answer["power_receipt"] = c.receipt;
    res.set_header("X-Power-Receipt-SHA256", sha256_hex(c.receipt));
  }
  send_json(res, answer);
}

void Server::Impl::stream_generation(Endpoint endpoint, const MappedRequest& mapped,
                                     ResponseMeta meta, std::shared_ptr<LoadedModel> model,
                                     GenerateRequest request, ConnectionWatch watch,
                                     httplib::Response& res) {
  auto state = std::make_shared<StreamState>();
  request.on_stream = [state](const StreamEvent& e) {
    if (!e.text.empty() || e.logprobs != nullptr) {
      std::lock_guard<std::mutex> lk(state->mu);
      state->pending.append(e.text);
      if (e.logprobs != nullptr) state->pending_logprobs.push_back(*e.logprobs);
    }
    state->cv.notify_all();
    return !state->client_gone.load();
  };
  request.on_done = [state](const Completion& c) {
    {
      std::lock_guard<std::mutex> lk(state->mu);
      state->completion = c;
      state->done = true;
    }
    state->cv.notify_all();
  };
  const bool want_logprobs = request.top_logprobs >= 0;
  // Immediate rejections (queue full, does not fit, bad token ids) are plain HTTP errors.
  auto submitted = runtime->submit(model->handle, std::move(request));
  if (!submitted.ok()) return send_error(res, error_from_status(submitted.status()));
  RequestHandle handle = *submitted;
  uint64_t key = track(handle);
  const bool include_usage = mapped.include_usage;
  const bool tools_active = mapped.tools_active && endpoint == Endpoint::kChatCompletions;
  const bool tool_call_forced = mapped.tool_call_forced;

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, state, handle, meta, endpoint, include_usage, model, want_logprobs, tools_active,
       tool_call_forced, watch](size_t, httplib::DataSink& sink) mutable -> bool {
        const bool chat = endpoint == Endpoint::kChatCompletions;
        auto send = [&](const std::string& payload) {
          std::string frame = "data: " + payload + "\n\n";
          if (!sink.write(frame.data(), frame.size())) {
            state->client_gone = true;
            handle.cancel();
            return false;
          }
          return true;
        };
        // Logprobs of tokens whose text has not gone out yet; they ride on the next chunk.
        std::vector<TokenLogprobs> carry;
        size_t text_offset = 0;  // completions: text_offset numbers on across chunks
        auto take_logprobs = [&]() -> std::optional<json> {
          if (!want_logprobs || carry.empty()) return std::nullopt;
          json j = chat ? logprobs_json(carry) : completion_logprobs_json(carry, &text_offset);
          carry.clear();
          return j;
        };
        auto send_content = [&](const std::string& text) {
          std::optional<json> lp = take_logprobs();
          const json* lpp = lp ? &*lp : nullptr;
          json chunk = chat ? chat_chunk(meta, nullptr, &text, nullptr, include_usage, lpp)
                            : completion_chunk(meta, text, nullptr, include_usage, lpp);
          return send(to_wire(chunk));
        };
        const std::string role = "assistant";
        const std::string empty;
        if (chat && !send(to_wire(chat_chunk(meta, &role, &empty, nullptr, include_usage)))) {
          return false;
        }
        ToolStreamFilter filter(tool_call_forced);
        auto next_check = std::chrono::steady_clock::now() + kWatchInterval;
        while (true) {
          std::string text;
          bool done = false;
          {
            std::unique_lock<std::mutex> lk(state->mu);
            state->cv.wait_until(lk, next_check,
                                 [&] { return state->done || !state->pending.empty(); });
            text.swap(state->pending);
            for (TokenLogprobs& lp : state->pending_logprobs) carry.push_back(std::move(lp));
            state->pending_logprobs.clear();
            done = state->done;
          }
          if (tools_active) text = filter.push(text);
          if (!text.empty()) {
            if (!send_content(text)) return false;
            next_check = std::chrono::steady_clock::now() + kWatchInterval;
          }
          if (done) break;
          // Nothing written for a while (queued, prefilling, or text held back): a write
          // cannot tell whether the client is still there, the socket can.
          if (std::chrono::steady_clock::now() >= next_check) {
            if (watch.peer_gone()) {
              state->client_gone = true;
              handle.cancel();
              return false;
            }
            next_check = std::chrono::steady_clock::now() + kWatchInterval;
          }
        }
        const Completion& c = state->completion;
        if (!c.status.ok()) {
          // Headers are gone already: the error travels as an event, as OpenAI does.
          ApiError e = error_from_status(c.status);
          metrics.count_rejection(reason_for(e));
          if (!send(to_wire(error_body(e)))) return false;
        } else {
          if (tools_active) {
            const std::string rest = filter.finish(c);
            if (!rest.empty() && !send_content(rest)) return false;
            if (!c.tool_calls.empty()) {
              std::optional<json> lp = take_logprobs();
              for (const json& chunk :
                   tool_call_chunks(meta, c.tool_calls, include_usage, lp ? &*lp : nullptr)) {
                if (!send(to_wire(chunk))) return false;
              }
            }
          }
          // Tokens whose text never went out (a matched stop string): their logprobs still do.
          if (want_logprobs && !carry.empty() && !send_content("")) return false;
          std::string finish = finish_reason(c);
          json chunk = chat ? chat_chunk(meta, nullptr, nullptr, &finish, include_usage)
                            : completion_chunk(meta, "", &finish, include_usage);
          if (!send(to_wire(chunk))) return false;
          if (include_usage && !send(to_wire(usage_chunk(endpoint, meta, c.usage)))) {
            return false;
          }
          if (!c.receipt.empty() && !send(to_wire(json{{"object", "power.receipt"},
                                                       {"id", meta.id},
                                                       {"sha256", sha256_hex(c.receipt)},
                                                       {"receipt", c.receipt}}))) {
            return false;
          }
        }
        if (!send("[DONE]")) return false;
        sink.done();
        return true;
      },
      [this, state, handle, key](bool success) mutable {
        // Runs when the response ends for any reason: a client that went away before the
        // stream finished cancels the generation.
        if (!success) {
          state->client_gone = true;
          handle.cancel();
        }
        Completion c = handle.wait();
        untrack(key);
        metrics.count_generation(c.usage, c.timings.time_to_first_token_ms,
                                 state->client_gone.load(), never_admitted(c));
      });
}

void Server::Impl::register_routes() {
  httplib::Server& s = *http;

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    std::string rid = req.get_header_value("X-Request-ID");
    if (!acceptable_request_id(rid)) rid = random_hex(32);
    res.set_header("X-Request-ID", rid);
    const bool open_path = req.path == "/health" || req.path.starts_with("/health/");
    if (auth && !open_path && !keys.check_header(req.get_header_value("Authorization"))) {
      ApiError e;
      e.http_status = 401;
      e.message = "missing or incorrect API key (send Authorization: Bearer <key>)";
      e.code = "invalid_api_key";
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    if (draining && !open_path) {
      ApiError e;
      e.http_status = 503;
      e.type = "server_error";
      e.message = "the server is shutting down";
      e.code = "draining";
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  // Errors httplib produces itself (unknown route, 413, malformed HTTP) get OpenAI's shape.
  s.set_error_handler(httplib::Server::HandlerWithResponse(
      [this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        ApiError e;
        e.http_status = res.status;
        switch (res.status) {
          case 404:
            e.message = fmt::format("no route for {} {}", req.method, req.path);
            e.code = "not_found";
            break;
          case 405:
            e.message = fmt::format("method {} not allowed on {}", req.method, req.path);
            break;
          case 413:
            e.message = fmt::format("the request body exceeds {} bytes", opts.max_body_bytes);
            e.code = "body_too_large";
            break;
          default:
            e.message = fmt::format("HTTP {}", res.status);
            if (res.status >= 500) e.type = "server_error";
            break;
        }
        metrics.count_rejection(reason_for(e));
        res.set_content(to_wire(error_body(e)), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));

  s.set_exception_handler(
      [this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& ex) {
          what = ex.what();
        } catch (...) {
        }
        ApiError e;
        e.http_status = 500;
        e.type = "server_error";
        e.message = what;
        e.code = "internal_error";
        res.status = 500;
        res.set_content(to_wire(error_body(e)), "application/json");
      });

  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.count_request(route_label(req.path), res.status);
  });

  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kChatCompletions, req, res);
  });
  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    handle_generate(Endpoint::kCompletions, req, res);
  });
  s.Post("/v1/embeddings", [this](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    std::string model_id;
    if (auto e = request_model_name(*body, &model_id)) return send_error(res, *e);
    auto model = find_model(model_id, res);
    if (!model) return;
    auto to_api = [](const OpenAiError& o) {
      ApiError e;
      e.http_status = o.http_status;
      e.message = o.message;
      e.type = o.type;
      e.param = o.param;
      e.code = o.code;
      return e;
    };
    if (!model->embedding) return send_error(res, to_api(not_an_embedding_model(model_id)));
    auto out = run_openai_embeddings(*body, *model->embedding, model_id);
    if (auto* err = std::get_if<OpenAiError>(&out)) return send_error(res, to_api(*err));
    send_json(res, std::get<json>(out));
  });

  auto model_json = [](const LoadedModel& m) {
    return json{{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", "power"}};
  };
  auto onnx_model_json = [](const onnx::ServiceModelInfo& m) {
    return json{{"id", m.id}, {"object", "model"}, {"created", 0}, {"owned_by", "power"}};
  };
  s.Get("/v1/models",
        [this, model_json, onnx_model_json](const httplib::Request&, httplib::Response& res) {
          json data = json::array();
          for (const auto& m : registry->list()) data.push_back(model_json(*m));
          for (const auto& m : onnx ? onnx->models() : std::vector<onnx::ServiceModelInfo>{}) {
            data.push_back(onnx_model_json(m));
          }
          send_json(res, json{{"object", "list"}, {"data", data}});
        });
  s.Get(R"(/v1/models/(.+))",
        [this, model_json, onnx_model_json](const httplib::Request& req, httplib::Response& res) {
          const std::string id = req.matches[1].str();
          if (onnx && !registry->find(id)) {
            for (const auto& m : onnx->models()) {
              if (m.id == id) return send_json(res, onnx_model_json(m));
            }
          }
          auto m = find_model(id, res);
          if (m) send_json(res, model_json(*m));
        });

  auto ready = [this] { return !draining && (!registry->list().empty() || onnx); };
  s.Get("/health/live", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, json{{"status", "ok"}});
  });
  s.Get("/health/ready", [this, ready](const httplib::Request&, httplib::Response& res) {
    bool ok = ready();
    send_json(res, json{{"status", ok ? "ok" : (draining ? "draining" : "no_models")}},
              ok ? 200 : 503);
  });
  s.Get("/health", [this, ready](const httplib::Request&, httplib::Response& res) {
    bool ok = ready();
    send_json(res,
              json{{"status", ok ? "ok" : (draining ? "draining" : "no_models")},
                   {"live", true},
                   {"ready", ok},
                   {"models", registry->list().size()}},
              ok ? 200 : 503);
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::vector<Metrics::ModelGauges> gauges;
    std::vector<Metrics::EmbedGauges> embedders;
    for (const auto& m : registry->list()) {
      if (m->embedding) {
        embedders.push_back({m->id, m->embedding->stats()});
      } else {
        gauges.push_back({m->id, m->handle.stats()});
      }
    }
    int active_generations = 0;
    {
      std::lock_guard<std::mutex> lk(active_mu);
      active_generations = static_cast<int>(active.size());
    }
    res.set_content(metrics.render(gauges, embedders, active_generations) +
                        (onnx ? onnx_metrics_text(*onnx) : std::string()),
                    "text/plain; version=0.0.4");
  });
  s.Get("/api/ps", [this](const httplib::Request&, httplib::Response& res) {
    json models = json::array();
    for (const auto& m : registry->list()) {
      if (m->embedding) {
        const EmbeddingModelInfo& ei = m->embedding->info();
        models.push_back(json{{"name", m->id},
                              {"model", m->source},
                              {"kind", ei.kind},
                              {"arch", ei.arch},
                              {"n_ctx", ei.n_ctx},
                              {"weights_bytes", ei.weights_bytes},
                              {"workspace_bytes", ei.workspace_bytes}});
        continue;
      }
      const ModelInfo& info = m->handle.info();
      models.push_back(
          json{{"name", m->id},
               {"model", m->source},
               {"digest", "sha256:" + info.sha256},
               {"size_bytes", info.weights_bytes + info.kv_cache_bytes * info.replicas +
                                  info.scratch_bytes * info.replicas},
               {"expires_at", "never"}});
    }
    send_json(res, json{{"models", models}});
  });
  register_onnx_routes(s, OnnxHttpContext{onnx.get(), opts.queue_timeout_s,
                                          [this](httplib::Response& res, const ApiError& e) {
                                            send_error(res, e);
                                          }});
  register_management_routes(
      s, ManagementContext{opts, *registry, [this](httplib::Response& res, const ApiError& e) {
                             send_error(res, e);
                           }});
}

Status apply_config_file(const std::string& path, ServerOptions* options) {
  auto text = read_file_text(path);
  if (!text.ok()) return text.status();
  json j = json::parse(*text, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return Status(StatusCode::kInvalidArgument, "the config file is not a JSON object")
        .with("path", path);
  }
  Status st = apply_config_json(j, options);
  if (!st.ok()) return std::move(st).with("path", path);
  return st;
}

Result<std::unique_ptr<Server>> Server::create(ServerOptions options) {
  auto impl = std::make_unique<Impl>();
  impl->opts = std::move(options);
  const ServerOptions& o = impl->opts;
  if (!o.api_key_file.empty()) {
    POWER_ASSIGN_OR_RETURN(impl->keys, ApiKeys::load_file(o.api_key_file));
    impl->auth = true;
  }
  if (o.tls_cert.empty() != o.tls_key.empty()) {
    return Status(StatusCode::kInvalidArgument, "--tls-cert and --tls-key go together");
  }
  if (!o.tls_cert.empty()) {
    auto ssl = std::make_unique<httplib::SSLServer>(o.tls_cert.c_str(), o.tls_key.c_str());
    if (!ssl->is_valid()) {
      return Status(StatusCode::kInvalidArgument, "cannot load the TLS certificate and key")
          .with("cert", o.tls_cert)
          .with("key", o.tls_key);
    }
    impl->http = std::move(ssl);
  } else {
    impl->http = std::make_unique<httplib::Server>();
  }
  POWER_ASSIGN_OR_RETURN(impl->runtime, Runtime::create({}));
  impl->registry = std::make_unique<ModelRegistry>(impl->runtime.get(), o.load, o.resolve_model);
  if (o.onnx.any()) {
    POWER_ASSIGN_OR_RETURN(impl->onnx, onnx::Service::create(o.onnx, o.resolve_model));
  }
  httplib::Server& s = *impl->http;
  const int threads = std::max(4, o.http_threads);
  s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  s.set_payload_max_length(o.max_body_bytes);
  s.set_read_timeout(o.read_timeout_s, 0);
  s.set_write_timeout(o.write_timeout_s, 0);
  s.set_keep_alive_timeout(o.keep_alive_timeout_s);
  s.set_keep_alive_max_count(100000);
  s.set_tcp_nodelay(true);
  impl->register_routes();
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

Status Server::start() {
  for (const auto& lib : impl_->opts.model_libs) {
    POWER_RETURN_IF_ERROR(sdk::load_model_library(lib));
  }
  for (const auto& m : impl_->opts.models) {
    auto loaded = impl_->registry->load(m);
    if (!loaded.ok()) {
      Status st = loaded.status();
      return std::move(st).with("model", m);
    }
  }
  const ServerOptions& o = impl_->opts;
  int port = 0;
  if (o.port == 0) {
    port = impl_->http->bind_to_any_port(o.host);
  } else {
    port = impl_->http->bind_to_port(o.host, o.port) ? o.port : -1;
  }
  if (port <= 0) {
    return Status(StatusCode::kIo, "cannot listen on the address")
        .with("host", o.host)
        .with("port", o.port);
  }
  impl_->bound_port = port;
  return Status();
}

int Server::port() const {
  return impl_->bound_port;
}
bool Server::tls() const {
  return !impl_->opts.tls_cert.empty();
}

Status Server::wait() {
  if (!impl_->http->listen_after_bind() && !impl_->draining) {
    return Status(StatusCode::kIo, "the HTTP server stopped unexpectedly");
  }
  return Status();
}

void Server::shutdown() {
  Impl& im = *impl_;
  if (im.draining.exchange(true)) return;
  // Let running generations finish, up to the drain timeout; then cancel what is left.
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(im.opts.drain_timeout_s);
  while (std::chrono::steady_clock::now() < until) {
    {
      std::lock_guard<std::mutex> lk(im.active_mu);
      if (im.active.empty()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  {
    std::lock_guard<std::mutex> lk(im.active_mu);
    for (auto& [k, h] : im.active) h.cancel();
  }
  im.http->stop();
}

}  // namespace power::server
