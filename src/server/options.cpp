// `power serve --config FILE`: the JSON form of the command-line flags.
#include <fmt/format.h>

#include "server/cors.h"
#include "server/server.h"

namespace power::server {

using json = nlohmann::json;

namespace {

Status type_error(const std::string& key, const char* want) {
  return Status(StatusCode::kInvalidArgument, fmt::format("config key '{}' must be {}", key, want));
}

Status read_int(const json& v, const std::string& key, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number_integer()) return type_error(key, "an integer");
  int64_t x = v.get<int64_t>();
  if (x < lo || x > hi) {
    return Status(StatusCode::kInvalidArgument,
                  fmt::format("config key '{}' must be between {} and {}", key, lo, hi));
  }
  *out = x;
  return Status();
}

}  // namespace

Status apply_config_json(const json& config, ServerOptions* o) {
  if (!config.is_object()) return Status(StatusCode::kInvalidArgument, "config must be an object");
  for (const auto& [raw_key, v] : config.items()) {
    std::string key = raw_key;
    for (auto& c : key) {
      if (c == '-') c = '_';
    }
    auto str = [&](std::string* out) -> Status {
      if (!v.is_string()) return type_error(raw_key, "a string");
      *out = v.get<std::string>();
      return Status();
    };
    auto integer = [&](auto* out, int64_t lo, int64_t hi) -> Status {
      int64_t x = 0;
      POWER_RETURN_IF_ERROR(read_int(v, raw_key, lo, hi, &x));
      *out = static_cast<std::remove_pointer_t<decltype(out)>>(x);
      return Status();
    };
    if (key == "host") {
      POWER_RETURN_IF_ERROR(str(&o->host));
    } else if (key == "port") {
      POWER_RETURN_IF_ERROR(integer(&o->port, 0, 65535));
    } else if (key == "listen") {
      if (v.is_string()) {
        o->listen.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const auto& m : v) {
          if (!m.is_string()) return type_error(raw_key, "a string or an array of strings");
          o->listen.push_back(m.get<std::string>());
        }
      } else {
        return type_error(raw_key, "a string or an array of strings");
      }
    } else if (key == "model" || key == "models" || key == "m") {
      if (v.is_string()) {
        o->models.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const auto& m : v) {
          if (!m.is_string()) return type_error(raw_key, "a string or an array of strings");
          o->models.push_back(m.get<std::string>());
        }
      } else {
        return type_error(raw_key, "a string or an array of strings");
      }
    } else if (key == "model_lib" || key == "model_libs") {
      if (v.is_string()) {
        o->model_libs.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const auto& m : v) {
          if (!m.is_string()) return type_error(raw_key, "a string or an array of strings");
          o->model_libs.push_back(m.get<std::string>());
        }
      } else {
        return type_error(raw_key, "a string or an array of strings");
      }
    } else if (key == "cors_origin" || key == "cors_origins") {
      std::vector<std::string> list;
      if (v.is_string()) {
        list.push_back(v.get<std::string>());
      } else if (v.is_array()) {
        for (const auto& x : v) {
          if (!x.is_string()) return type_error(raw_key, "a string or an array of strings");
          list.push_back(x.get<std::string>());
        }
      } else {
        return type_error(raw_key, "a string or an array of strings");
      }
      for (const auto& origin : list) POWER_RETURN_IF_ERROR(validate_cors_origin(origin));
      o->cors_origins.insert(o->cors_origins.end(), list.begin(), list.end());
    } else if (key == "api_key_file") {
      POWER_RETURN_IF_ERROR(str(&o->api_key_file));
    } else if (key == "tls_cert") {
      POWER_RETURN_IF_ERROR(str(&o->tls_cert));
    } else if (key == "tls_key") {
      POWER_RETURN_IF_ERROR(str(&o->tls_key));
    } else if (key == "max_body_bytes") {
      POWER_RETURN_IF_ERROR(integer(&o->max_body_bytes, 1024, int64_t{1} << 34));
    } else if (key == "http_threads") {
      POWER_RETURN_IF_ERROR(integer(&o->http_threads, 4, 65536));
    } else if (key == "read_timeout") {
      POWER_RETURN_IF_ERROR(integer(&o->read_timeout_s, 1, 86400));
    } else if (key == "write_timeout") {
      POWER_RETURN_IF_ERROR(integer(&o->write_timeout_s, 1, 86400));
    } else if (key == "keep_alive_timeout") {
      POWER_RETURN_IF_ERROR(integer(&o->keep_alive_timeout_s, 1, 86400));
    } else if (key == "queue_timeout") {
      POWER_RETURN_IF_ERROR(integer(&o->queue_timeout_s, 0, 86400));
    } else if (key == "ui" || key == "no_ui") {
      // "ui": false, or the flag's own name "no_ui": true, turns the web console off.
      if (!v.is_boolean()) return type_error(raw_key, "true or false");
      o->ui = key == "ui" ? v.get<bool>() : !v.get<bool>();
    } else if (key == "warmup" || key == "no_warmup") {
      if (!v.is_boolean()) return type_error(raw_key, "true or false");
      o->warmup = key == "warmup" ? v.get<bool>() : !v.get<bool>();
    } else if (key == "ra_tls") {
      POWER_RETURN_IF_ERROR(str(&o->ra_tls));
    } else if (key == "ra_tls_vcek_file") {
      POWER_RETURN_IF_ERROR(str(&o->ra_tls_vcek_file));
    } else if (key == "redact_logs") {
      if (!v.is_boolean()) return type_error(raw_key, "true or false");
      o->redact_logs = v.get<bool>();
    } else if (key == "model_key_file") {
      POWER_RETURN_IF_ERROR(str(&o->load.model_key_file));
    } else if (key == "mlock") {
      if (!v.is_boolean()) return type_error(raw_key, "true or false");
      o->load.mlock = v.get<bool>();
    } else if (key == "require_mlock") {
      if (!v.is_boolean()) return type_error(raw_key, "true or false");
      o->load.require_mlock = v.get<bool>();
    } else if (key == "instance_id") {
      POWER_RETURN_IF_ERROR(str(&o->instance_id));
    } else if (key == "drain_timeout") {
      POWER_RETURN_IF_ERROR(integer(&o->drain_timeout_s, 0, 86400));
    } else if (key == "ctx") {
      POWER_RETURN_IF_ERROR(integer(&o->load.n_ctx, 0, int64_t{1} << 24));
    } else if (key == "max_running") {
      POWER_RETURN_IF_ERROR(integer(&o->load.max_running, 1, 4096));
    } else if (key == "max_waiting") {
      POWER_RETURN_IF_ERROR(integer(&o->load.max_waiting, 0, 1 << 20));
    } else if (key == "threads") {
      POWER_RETURN_IF_ERROR(integer(&o->load.threads, 0, 4096));
    } else if (key == "replicas") {
      POWER_RETURN_IF_ERROR(integer(&o->load.replicas, 1, 256));
    } else if (key == "state_checkpoints") {
      POWER_RETURN_IF_ERROR(integer(&o->load.state_checkpoints, 0, 4096));
    } else if (key == "kv_type") {
      POWER_RETURN_IF_ERROR(str(&o->load.kv_type));
    } else if (key == "weights_budget") {
      POWER_RETURN_IF_ERROR(str(&o->load.weights_budget));
    } else if (key == "prefetch") {
      POWER_RETURN_IF_ERROR(integer(&o->load.prefetch, 0, 4));
    } else if (key == "mirror_dir") {
      POWER_RETURN_IF_ERROR(str(&o->load.mirror_dir));
    } else if (key == "weights_cache") {
      POWER_RETURN_IF_ERROR(str(&o->weights_cache));
    } else if (key == "weights_cache_policy") {
      POWER_RETURN_IF_ERROR(str(&o->weights_cache_policy));
    } else if (key == "mirror_bytes") {
      POWER_RETURN_IF_ERROR(str(&o->load.mirror_bytes));
    } else if (key == "store_home") {
      POWER_RETURN_IF_ERROR(str(&o->store_home));
    } else {
      bool onnx_key = false;  // vad_model, ocr_det, ... (onnx/service.h)
      POWER_RETURN_IF_ERROR(onnx::apply_config_key(key, v, &o->onnx, &onnx_key));
      if (!onnx_key) {
        return Status(StatusCode::kInvalidArgument,
                      fmt::format("unknown config key '{}'", raw_key));
      }
    }
  }
  return Status();
}

}  // namespace power::server
