#include "server/management.h"

#include <atomic>

#include <fmt/format.h>

#if POWER_WITH_STORE
#include "store/layout.h"
#include "store/models.h"
#include "store/progress.h"
#include "store/pull.h"
#endif

namespace power::server {

using json = nlohmann::json;

namespace {

// The body of a management call: a JSON object whose keys are all in `allowed`.
std::optional<ApiError> parse_management_body(const httplib::Request& req,
                                              std::initializer_list<const char*> allowed,
                                              json* out) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    return bad_request("the request body must be a JSON object", {}, "invalid_json");
  }
  for (const auto& [key, value] : body.items()) {
    bool known = false;
    for (const char* a : allowed) known = known || key == a;
    if (!known) {
      return bad_request(fmt::format("unsupported field '{}'", key), key, "unsupported_field");
    }
  }
  *out = std::move(body);
  return std::nullopt;
}

std::optional<ApiError> required_string(const json& body, const char* key, std::string* out) {
  auto it = body.find(key);
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty()) {
    return bad_request(fmt::format("'{}' must be a non-empty string", key), key);
  }
  *out = it->get<std::string>();
  return std::nullopt;
}

json loaded_json(const LoadedModel& m) {
  if (m.embedding) {
    const EmbeddingModelInfo& ei = m.embedding->info();
    return json{{"id", m.id},
                {"source", m.source},
                {"kind", ei.kind},
                {"arch", ei.arch},
                {"n_ctx", ei.n_ctx},
                {"weights_bytes", ei.weights_bytes},
                {"workspace_bytes", ei.workspace_bytes}};
  }
  const ModelInfo& info = m.handle.info();
  return json{{"id", m.id},
              {"source", m.source},
              {"digest", "sha256:" + info.sha256},
              {"arch", info.arch},
              {"n_ctx", info.n_ctx},
              {"weights_bytes", info.weights_bytes},
              {"kv_cache_bytes", info.kv_cache_bytes}};
}

#if POWER_WITH_STORE
Result<store::StoreLayout> open_store(const ServerOptions& opts) {
  return opts.store_home.empty() ? store::StoreLayout::open_default()
                                 : store::StoreLayout::open(opts.store_home);
}
#endif

}  // namespace

void register_management_routes(httplib::Server& s, ManagementContext ctx) {
  s.Post("/api/load", [ctx](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = parse_management_body(req, {"model", "name"}, &body)) {
      return ctx.send_error(res, *e);
    }
    std::string model;
    // Ollama's clients send {"name"} (older) or {"model"}.
    if (auto e = required_string(body, body.contains("model") ? "model" : "name", &model)) {
      return ctx.send_error(res, *e);
    }
    auto loaded = ctx.registry.load(model);
    if (!loaded.ok()) return ctx.send_error(res, error_from_status(loaded.status()));
    res.set_content(to_wire(loaded_json(**loaded)), "application/json");
  });

  s.Post("/api/unload", [ctx](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = parse_management_body(req, {"model"}, &body)) return ctx.send_error(res, *e);
    std::string model;
    if (auto e = required_string(body, "model", &model)) return ctx.send_error(res, *e);
    Status st = ctx.registry.unload(model);
    if (!st.ok()) return ctx.send_error(res, error_from_status(st));
    res.set_content(to_wire(json{{"status", "unloaded"}, {"model", model}}), "application/json");
  });

#if POWER_WITH_STORE
  s.Delete("/api/delete", [ctx](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = parse_management_body(req, {"model"}, &body)) return ctx.send_error(res, *e);
    std::string model;
    if (auto e = required_string(body, "model", &model)) return ctx.send_error(res, *e);
    auto layout = open_store(ctx.opts);
    if (!layout.ok()) return ctx.send_error(res, error_from_status(layout.status()));
    auto removed = store::remove_models(*layout, {model});
    if (!removed.ok()) return ctx.send_error(res, error_from_status(removed.status()));
    res.set_content(to_wire(json{{"status", "deleted"},
                                 {"models", removed->removed_models},
                                 {"freed_bytes", removed->garbage.freed_bytes}}),
                    "application/json");
  });

  s.Post("/api/pull", [ctx](const httplib::Request& req, httplib::Response& res) {
    json body;
    if (auto e = parse_management_body(
            req, {"source", "name", "model", "sha256", "size_bytes", "stream", "insecure"},
            &body)) {
      return ctx.send_error(res, *e);
    }
    store::PullRequest pr;
    store::PartRequest part;
    // Ollama's shape: {"model" | "name", "insecure", "stream"}, the name being what to pull
    // (a source: URL, hf://, path); progress as NDJSON lines in Ollama's form.
    const bool ollama = !body.contains("source");
    if (ollama) {
      if (auto it = body.find("insecure"); it != body.end() && !it->is_null()) {
        if (!it->is_boolean() || it->get<bool>()) {
          return ctx.send_error(res, bad_request("'insecure' can only be false: every pull is "
                                                 "verified by its SHA-256",
                                                 "insecure", "unsupported_value"));
        }
      }
      if (auto e = required_string(body, body.contains("model") ? "model" : "name", &part.source)) {
        return ctx.send_error(res, *e);
      }
      body.erase("name");
      body.erase("model");
    } else {
      if (body.contains("model") || body.contains("insecure")) {
        return ctx.send_error(res, bad_request("'source' pulls take 'name' for the store name, "
                                               "not 'model' or 'insecure'",
                                               body.contains("model") ? "model" : "insecure"));
      }
      if (auto e = required_string(body, "source", &part.source)) return ctx.send_error(res, *e);
    }
    if (auto it = body.find("sha256"); it != body.end() && !it->is_null()) {
      auto d = it->is_string() ? store::parse_digest(it->get<std::string>())
                               : Result<Sha256Digest>(Status(StatusCode::kInvalidArgument, ""));
      if (!d.ok()) return ctx.send_error(res, bad_request("'sha256' must be a digest", "sha256"));
      part.sha256 = *d;
    }
    if (auto it = body.find("size_bytes"); it != body.end() && !it->is_null()) {
      if (!it->is_number_unsigned()) {
        return ctx.send_error(res,
                              bad_request("'size_bytes' must be a positive integer", "size_bytes"));
      }
      part.size_bytes = it->get<uint64_t>();
    }
    if (auto it = body.find("name"); it != body.end() && !it->is_null()) {
      if (!it->is_string())
        return ctx.send_error(res, bad_request("'name' must be a string", "name"));
      pr.name = it->get<std::string>();
    }
    bool stream = true;
    if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
      if (!it->is_boolean()) {
        return ctx.send_error(res, bad_request("'stream' must be a boolean", "stream"));
      }
      stream = it->get<bool>();
    }
    pr.parts.push_back(std::move(part));
    auto layout = open_store(ctx.opts);
    if (!layout.ok()) return ctx.send_error(res, error_from_status(layout.status()));
    auto config = store::load_store_config(*layout);
    if (!config.ok()) return ctx.send_error(res, error_from_status(config.status()));

    auto final_json = [](const Result<store::Manifest>& m) {
      if (!m.ok()) {
        ApiError e = error_from_status(m.status());
        return json{{"status", "error"}, {"error", error_body(e)["error"]}};
      }
      return json{{"status", "success"},
                  {"model", m->name},
                  {"digest", store::digest_string(m->parts.at(0).digest)}};
    };
    if (!stream) {
      store::PullOptions po;
      po.config = *config;
      auto m = store::pull(*layout, pr, po);
      if (!m.ok()) {
        if (ollama) {
          res.status = m.status().code() == StatusCode::kNotFound ? 404 : 400;
          res.set_content(to_wire(json{{"error", error_from_status(m.status()).message}}),
                          "application/json");
          return;
        }
        return ctx.send_error(res, error_from_status(m.status()));
      }
      res.set_content(to_wire(ollama ? json{{"status", "success"}} : final_json(m)),
                      "application/json");
      return;
    }
    if (ollama) {
      auto layout_copy = std::make_shared<store::StoreLayout>(*layout);
      auto cfg = std::make_shared<store::StoreConfig>(*config);
      auto request = std::make_shared<store::PullRequest>(std::move(pr));
      res.set_header("Cache-Control", "no-cache");
      res.set_chunked_content_provider(
          "application/x-ndjson", [layout_copy, cfg, request](size_t, httplib::DataSink& sink) {
            std::atomic<bool> cancel{false};
            auto send = [&](const json& j) {
              const std::string line = to_wire(j) + "\n";
              if (!cancel && !sink.write(line.data(), line.size())) cancel = true;
              return !cancel;
            };
            store::PullOptions po;
            po.config = *cfg;
            po.cancel = &cancel;
            // Ollama's progress lines: "pulling <digest>" with total/completed while bytes
            // move, then the step names.
            po.progress = [&](const store::PullProgress& p) {
              json j;
              if (p.status == "downloading" || p.status == "exists") {
                const std::string d = p.digest.empty() ? p.file : p.digest;
                j = {{"status", "pulling " + d}, {"digest", d}};
                if (p.total_bytes > 0) j["total"] = p.total_bytes;
                j["completed"] = p.status == "exists" ? p.total_bytes : p.completed_bytes;
              } else if (p.status == "verifying") {
                j = {{"status", "verifying sha256 digest"}};
              } else if (p.status == "writing manifest") {
                j = {{"status", "writing manifest"}};
              } else if (p.status == "resolving") {
                j = {{"status", "pulling manifest"}};
              } else {
                return;  // success / error: the final line below
              }
              send(j);
            };
            auto m = store::pull(*layout_copy, *request, po);
            json last = m.ok() ? json{{"status", "success"}}
                               : json{{"error", error_from_status(m.status()).message}};
            if (!send(last)) return false;
            sink.done();
            return true;
          });
      return;
    }
    auto layout_copy = std::make_shared<store::StoreLayout>(*layout);
    auto cfg = std::make_shared<store::StoreConfig>(*config);
    auto request = std::make_shared<store::PullRequest>(std::move(pr));
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [layout_copy, cfg, request, final_json](
                                                              size_t, httplib::DataSink& sink) {
      std::atomic<bool> cancel{false};
      auto send = [&](const std::string& payload) {
        std::string frame = "data: " + payload + "\n\n";
        if (!cancel && !sink.write(frame.data(), frame.size())) cancel = true;
        return !cancel;
      };
      store::PullOptions po;
      po.config = *cfg;
      po.cancel = &cancel;
      po.progress = [&](const store::PullProgress& p) { send(store::progress_to_json(p)); };
      auto m = store::pull(*layout_copy, *request, po);
      if (!send(to_wire(final_json(m))) || !send("[DONE]")) return false;
      sink.done();
      return true;
    });
  });
#endif
}

}  // namespace power::server
