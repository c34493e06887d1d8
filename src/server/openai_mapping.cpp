#include "server/openai_mapping.h"

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <unordered_map>

#include <fmt/format.h>

namespace power::server {

using json = nlohmann::json;

json error_body(const ApiError& e) {
  json err = {{"message", e.message}, {"type", e.type}};
  err["param"] = e.param.empty() ? json(nullptr) : json(e.param);
  err["code"] = e.code.empty() ? json(nullptr) : json(e.code);
  return json{{"error", err}};
}

ApiError bad_request(std::string message, std::string param, std::string code) {
  ApiError e;
  e.http_status = 400;
  e.message = std::move(message);
  e.param = std::move(param);
  e.code = std::move(code);
  return e;
}

std::string status_sentence(const Status& status) {
  return status.context().empty() ? status.message()
                                  : fmt::format("{} ({})", status.message(), status.context());
}

int64_t status_context_number(const Status& status, std::string_view key) {
  const std::string& context = status.context();
  size_t at = 0;
  while ((at = context.find(key, at)) != std::string::npos) {
    const bool starts = at == 0 || context[at - 1] == ' ';
    if (starts && at + key.size() < context.size() && context[at + key.size()] == '=') {
      return std::strtoll(context.c_str() + at + key.size() + 1, nullptr, 10);
    }
    at += key.size();
  }
  return -1;
}

ApiError error_from_status(const Status& status) {
  ApiError e;
  e.message = status_sentence(status);
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      e.http_status = 400;
      break;
    case StatusCode::kDoesNotFit:
      // The runtime says "can never fit" (context or device budget): retrying cannot help.
      e.http_status = 400;
      e.code = "does_not_fit";
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      e.code = "not_found";
      break;
    case StatusCode::kQueueFull:
      e.http_status = 429;
      e.type = "rate_limit_error";
      e.code = "queue_full";
      break;
    case StatusCode::kDeadlineExceeded:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "deadline_exceeded";
      break;
    case StatusCode::kResourceExhausted:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "does_not_fit_now";
      break;
    case StatusCode::kCancelled:
      e.http_status = 503;
      e.type = "server_error";
      e.code = "cancelled";
      break;
    case StatusCode::kUnsupported:
      e.http_status = 400;
      e.code = "unsupported";
      break;
    case StatusCode::kPolicyRefused:
      // The caller's power_policy is not met by the model or configuration (docs/RECEIPTS.md).
      e.http_status = 409;
      e.param = "power_policy";
      e.code = "policy_refused";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      e.code = "internal_error";
      break;
  }
  return e;
}

namespace {

// ---- typed field readers: each returns the error naming the field ----

std::optional<ApiError> read_number(const json& v, const std::string& name, double lo, double hi,
                                    double* out) {
  if (!v.is_number()) return bad_request(fmt::format("'{}' must be a number", name), name);
  double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    return bad_request(fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
  }
  *out = d;
  return std::nullopt;
}

std::optional<ApiError> read_integer(const json& v, const std::string& name, int64_t lo, int64_t hi,
                                     int64_t* out) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return bad_request(fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
    }
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float() && std::isfinite(v.get<double>()) &&
             std::floor(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 9e15) {
    x = static_cast<int64_t>(v.get<double>());
  } else {
    return bad_request(fmt::format("'{}' must be an integer", name), name);
  }
  if (x < lo || x > hi) {
    return bad_request(fmt::format("'{}' must be between {} and {}", name, lo, hi), name);
  }
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> read_bool(const json& v, const std::string& name, bool* out) {
  if (!v.is_boolean()) return bad_request(fmt::format("'{}' must be a boolean", name), name);
  *out = v.get<bool>();
  return std::nullopt;
}

std::optional<ApiError> unsupported(const std::string& name) {
  return bad_request(fmt::format("unknown field '{}'", name), name, "unknown_field");
}

// A field OpenAI defines that Power cannot honour, with the reason (docs/SERVER.md lists them).
std::optional<ApiError> refused(const std::string& name, std::string_view reason) {
  return bad_request(fmt::format("'{}' is not supported: {}", name, reason), name,
                     "unsupported_field");
}

// Checks that `v` is an object whose keys are all in `known` (a nested unknown key is refused
// like a top-level one).
std::optional<ApiError> known_keys(const json& v, const std::string& name,
                                   std::initializer_list<std::string_view> known) {
  if (!v.is_object()) return bad_request(fmt::format("'{}' must be an object", name), name);
  for (const auto& [key, value] : v.items()) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || k == key;
    if (!ok) return unsupported(name + "." + key);
  }
  return std::nullopt;
}

std::optional<ApiError> read_string(const json& v, const std::string& name, std::string* out) {
  if (!v.is_string()) return bad_request(fmt::format("'{}' must be a string", name), name);
  *out = v.get<std::string>();
  return std::nullopt;
}

std::optional<ApiError> read_enum(const json& v, const std::string& name,
                                  std::initializer_list<std::string_view> values,
                                  std::string* out) {
  if (auto e = read_string(v, name, out)) return e;
  for (std::string_view x : values) {
    if (x == *out) return std::nullopt;
  }
  std::string list;
  for (std::string_view x : values) list += (list.empty() ? "" : ", ") + std::string(x);
  return bad_request(fmt::format("'{}' must be one of {}", name, list), name);
}

struct MapContext {
  Endpoint endpoint;
  const ModelInfo& info;
  MappedRequest& out;
  bool seed_given = false;
  bool max_tokens_given = false;
  bool stream_options_given = false;
  bool input_given = false;
  std::string functions_json, function_call_json;  // the deprecated function calling
  bool best_of_given = false;
  int64_t best_of = 1;
  int top_logprobs = -1;  // top_logprobs as given (applied after the loop: needs logprobs)
};

using FieldHandler = std::function<std::optional<ApiError>(const json& value, MapContext& ctx)>;
using FieldTable = std::unordered_map<std::string, FieldHandler>;

// ---- field group: identity and bookkeeping ----

void add_identity_fields(FieldTable& t) {
  t["model"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_string()) return bad_request("'model' must be a string", "model");
    c.out.model = v.get<std::string>();
    return std::nullopt;
  };
  t["user"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    // Recorded for the access log; it does not change generation.
    if (!v.is_string()) return bad_request("'user' must be a string", "user");
    c.out.user = v.get<std::string>();
    return std::nullopt;
  };
  t["n"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    int64_t n = 0;
    if (auto e = read_integer(v, "n", 1, 128, &n)) return e;
    c.out.n = static_cast<int>(n);
    return std::nullopt;
  };
  // Bookkeeping OpenAI stores with a request; Power keeps nothing (docs/SERVER.md), so these
  // are checked for shape and otherwise have no effect.
  t["metadata"] = [](const json& v, MapContext&) -> std::optional<ApiError> {
    if (!v.is_object()) return bad_request("'metadata' must be an object", "metadata");
    if (v.size() > 16) return bad_request("'metadata' takes at most 16 keys", "metadata");
    for (const auto& [key, value] : v.items()) {
      if (key.size() > 64 || !value.is_string() || value.get<std::string>().size() > 512) {
        return bad_request(
            "'metadata' maps keys of at most 64 characters to strings of at most "
            "512",
            "metadata." + key);
      }
    }
    return std::nullopt;
  };
  t["store"] = [](const json& v, MapContext&) -> std::optional<ApiError> {
    bool b = false;
    return read_bool(v, "store", &b);  // Power stores no completions either way
  };
  t["safety_identifier"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    // Like user: recorded in the access log.
    std::string id;
    if (auto e = read_string(v, "safety_identifier", &id)) return e;
    if (c.out.user.empty()) c.out.user = id;
    return std::nullopt;
  };
  // service_tier maps onto the scheduler's priorities: priority -> high, flex -> low,
  // auto / default -> normal. "scale" (reserved capacity) has no meaning on one server.
  t["service_tier"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    std::string tier;
    if (auto e =
            read_enum(v, "service_tier", {"auto", "default", "flex", "priority", "scale"}, &tier)) {
      return e;
    }
    if (tier == "scale") {
      return refused("service_tier",
                     "'scale' buys reserved capacity at OpenAI; use auto, "
                     "default, flex (low priority) or priority");
    }
    c.out.request.priority = tier == "priority" ? Priority::kHigh
                             : tier == "flex"   ? Priority::kLow
                                                : Priority::kNormal;
    c.out.service_tier = tier == "auto" ? "default" : tier;
    return std::nullopt;
  };
  // Prompt caching is automatic (the prefix cache, in memory); a key is a routing hint for a
  // balancer in front of several servers and changes nothing here.
  t["prompt_cache_key"] = [](const json& v, MapContext&) -> std::optional<ApiError> {
    std::string key;
    return read_string(v, "prompt_cache_key", &key);
  };
  t["prompt_cache_retention"] = [](const json& v, MapContext&) -> std::optional<ApiError> {
    std::string r;
    if (auto e = read_enum(v, "prompt_cache_retention", {"in_memory", "24h"}, &r)) return e;
    if (r == "24h") {
      return refused("prompt_cache_retention",
                     "the prefix cache lives in memory only ('in_memory'), nothing is kept "
                     "on disk for 24h");
    }
    return std::nullopt;
  };
  t["prompt_cache_options"] = [](const json& v, MapContext&) -> std::optional<ApiError> {
    // Power's prefix cache is the implicit kind: every full KV block of a prompt, evicted
    // least recently used. Explicit breakpoints and a guaranteed lifetime it cannot give.
    if (auto e = known_keys(v, "prompt_cache_options", {"mode", "ttl"})) return e;
    if (v.contains("ttl") && !v["ttl"].is_null()) {
      return refused("prompt_cache_options",
                     "the prefix cache evicts least recently used "
                     "blocks when memory is needed and cannot promise "
                     "a lifetime ('ttl')");
    }
    std::string mode = "implicit";
    if (v.contains("mode") && !v["mode"].is_null()) {
      if (auto e =
              read_enum(v["mode"], "prompt_cache_options.mode", {"implicit", "explicit"}, &mode)) {
        return e;
      }
    }
    if (mode == "explicit") {
      return refused("prompt_cache_options",
                     "the prefix cache places no explicit breakpoints; "
                     "every full KV block of a prompt is cached "
                     "automatically ('implicit')");
    }
    return std::nullopt;
  };
}

// ---- field group: input (messages for chat, prompt for completions) ----

std::optional<ApiError> read_message_content(const json& v, const std::string& name,
                                             std::string* out) {
  if (v.is_string()) {
    *out = v.get<std::string>();
    return std::nullopt;
  }
  if (!v.is_array()) {
    return bad_request(fmt::format("'{}' must be a string or an array of text parts", name), name);
  }
  for (size_t j = 0; j < v.size(); ++j) {
    const json& part = v[j];
    std::string pname = fmt::format("{}[{}]", name, j);
    if (!part.is_object()) return bad_request(fmt::format("'{}' must be an object", pname), pname);
    auto type = part.find("type");
    if (type == part.end() || !type->is_string()) {
      return bad_request(fmt::format("'{}.type' must be a string", pname), pname + ".type");
    }
    const std::string t = type->get<std::string>();
    if (t == "image_url" || t == "input_audio" || t == "file") {
      return bad_request(fmt::format("content part type '{}' is not supported: the language "
                                     "models Power serves take text (images and audio go to "
                                     "/v1/ocr, /v1/classify and /v1/audio/vad)",
                                     t),
                         pname + ".type", "unsupported_value");
    }
    if (t != "text" && t != "refusal") {
      return bad_request(fmt::format("'{}.type' must be text (or refusal), not '{}'", pname, t),
                         pname + ".type");
    }
    const char* field = t == "text" ? "text" : "refusal";
    for (const auto& [key, value] : part.items()) {
      if (key != "type" && key != field) return unsupported(pname + "." + key);
    }
    auto text = part.find(field);
    if (text == part.end() || !text->is_string()) {
      return bad_request(fmt::format("'{}.{}' must be a string", pname, field),
                         pname + "." + field);
    }
    *out += text->get<std::string>();
  }
  return std::nullopt;
}

void add_chat_input_fields(FieldTable& t) {
  t["messages"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_array() || v.empty()) {
      return bad_request("'messages' must be a non-empty array", "messages");
    }
    for (size_t i = 0; i < v.size(); ++i) {
      const json& m = v[i];
      std::string name = fmt::format("messages[{}]", i);
      if (!m.is_object()) return bad_request(fmt::format("'{}' must be an object", name), name);
      ChatMessage msg;
      bool has_content = false;
      for (const auto& [key, value] : m.items()) {
        if (key == "role") {
          if (!value.is_string()) {
            return bad_request(fmt::format("'{}.role' must be a string", name), name + ".role");
          }
          msg.role = value.get<std::string>();
          // OpenAI's newer name for system instructions.
          if (msg.role == "developer") msg.role = "system";
          // The deprecated function-calling result turn: a tool turn named by the function.
          if (msg.role == "function") msg.role = "tool";
          if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
              msg.role != "tool") {
            return bad_request(fmt::format("'{}.role' must be system, developer, user, "
                                           "assistant, tool or function, not '{}'",
                                           name, value.get<std::string>()),
                               name + ".role");
          }
        } else if (key == "content") {
          if (value.is_null()) continue;
          if (auto e = read_message_content(value, name + ".content", &msg.content)) return e;
          has_content = true;
        } else if (key == "tool_calls") {  // grammar group: an assistant turn's calls
          if (!value.is_array()) {
            return bad_request(fmt::format("'{}.tool_calls' must be an array", name),
                               name + ".tool_calls");
          }
          msg.tool_calls_json = value.dump();
          has_content = true;           // content may be null when the turn is only calls
        } else if (key == "refusal") {  // an earlier assistant turn that refused
          if (value.is_null()) continue;
          std::string refusal;
          if (auto e = read_string(value, name + ".refusal", &refusal)) return e;
          if (msg.content.empty()) msg.content = refusal;
          has_content = true;
        } else if (key == "audio") {
          return refused(name + ".audio",
                         "Power generates no audio, so no earlier audio reply "
                         "can be referenced");
        } else if (key == "function_call") {  // the deprecated form of one tool call
          if (auto e = known_keys(value, name + ".function_call", {"name", "arguments"})) {
            return e;
          }
          if (!value.contains("name") || !value["name"].is_string()) {
            return bad_request(fmt::format("'{}.function_call.name' must be a string", name),
                               name + ".function_call.name");
          }
          const json args = value.value("arguments", json("{}"));
          msg.tool_calls_json =
              json::array({{{"id", "call_0"},
                            {"type", "function"},
                            {"function",
                             {{"name", value["name"]},
                              {"arguments", args.is_string() ? args : json(args.dump())}}}}})
                  .dump();
          has_content = true;
        } else if (key == "tool_call_id" || key == "name") {
          if (!value.is_string()) {
            return bad_request(fmt::format("'{}.{}' must be a string", name, key),
                               name + "." + key);
          }
          (key == "name" ? msg.name : msg.tool_call_id) = value.get<std::string>();
        } else {
          return unsupported(name + "." + key);
        }
      }
      if (msg.role.empty()) {
        return bad_request(fmt::format("'{}.role' is required", name), name + ".role");
      }
      if (!has_content) {
        return bad_request(fmt::format("'{}.content' is required", name), name + ".content");
      }
      c.out.request.messages.push_back(std::move(msg));
    }
    c.input_given = true;
    return std::nullopt;
  };
}

std::optional<ApiError> read_token_ids(const json& v, const std::string& name,
                                       const ModelInfo& info, std::vector<int32_t>* out) {
  for (size_t i = 0; i < v.size(); ++i) {
    int64_t id = 0;
    std::string n = fmt::format("{}[{}]", name, i);
    if (auto e = read_integer(v[i], n, 0, info.n_vocab - 1, &id)) return e;
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

void add_completion_input_fields(FieldTable& t) {
  // A string, an array of token ids, or an array of prompts (strings or token arrays): one
  // choice per prompt (n each).
  t["prompt"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    auto one = [&](const json& p, const std::string& name) -> std::optional<ApiError> {
      PromptInput in;
      if (p.is_string()) {
        in.text = p.get<std::string>();
        if (in.text.empty()) return bad_request(fmt::format("'{}' must not be empty", name), name);
      } else if (p.is_array() && !p.empty() && p[0].is_number()) {
        if (auto e = read_token_ids(p, name, c.info, &in.tokens)) return e;
      } else {
        return bad_request(
            fmt::format("'{}' must be a non-empty string or array of token ids", name), name);
      }
      c.out.prompts.push_back(std::move(in));
      return std::nullopt;
    };
    c.out.prompts.clear();
    if (v.is_array() && !v.empty() && !v[0].is_number()) {
      if (v.size() > 128) return bad_request("'prompt' takes at most 128 prompts", "prompt");
      for (size_t i = 0; i < v.size(); ++i) {
        if (auto e = one(v[i], fmt::format("prompt[{}]", i))) return e;
      }
    } else if (v.is_array() && v.empty()) {
      return bad_request("'prompt' must not be empty", "prompt");
    } else if (auto e = one(v, "prompt")) {
      return e;
    }
    c.out.request.prompt = c.out.prompts[0].text;
    c.out.request.prompt_tokens = c.out.prompts[0].tokens;
    c.input_given = true;
    return std::nullopt;
  };
  t["echo"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_bool(v, "echo", &c.out.echo);
  };
  t["best_of"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (auto e = read_integer(v, "best_of", 1, 128, &c.best_of)) return e;
    c.best_of_given = true;
    return std::nullopt;
  };
  // Fill-in-the-middle: the server builds the model's FIM prompt (prefix, suffix, middle
  // tokens); a model whose vocabulary has none refuses it there.
  t["suffix"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_string(v, "suffix", &c.out.suffix);
  };
}

// ---- field group: length and stopping ----

void add_length_fields(FieldTable& t, bool chat) {
  auto max_tokens = [](const char* name) {
    return [name](const json& v, MapContext& c) -> std::optional<ApiError> {
      int64_t n = 0;
      if (auto e = read_integer(v, name, 1, std::numeric_limits<int32_t>::max(), &n)) return e;
      c.out.request.max_tokens = static_cast<int32_t>(n);
      c.max_tokens_given = true;
      c.out.max_tokens_given = true;
      return std::nullopt;
    };
  };
  t["max_tokens"] = max_tokens("max_tokens");
  if (chat) t["max_completion_tokens"] = max_tokens("max_completion_tokens");
  t["stop"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    std::vector<std::string> stops;
    if (v.is_string()) {
      stops.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      if (v.size() > 4) return bad_request("'stop' takes at most 4 sequences", "stop");
      for (const auto& s : v) {
        if (!s.is_string()) return bad_request("'stop' must be a string or strings", "stop");
        stops.push_back(s.get<std::string>());
      }
    } else {
      return bad_request("'stop' must be a string or an array of strings", "stop");
    }
    for (const auto& s : stops) {
      if (s.empty()) return bad_request("'stop' sequences must not be empty", "stop");
    }
    c.out.request.stop = std::move(stops);
    return std::nullopt;
  };
}

// ---- field group: sampling ----

void add_sampling_fields(FieldTable& t) {
  auto number = [](const char* name, double lo, double hi, float SamplingOptions::*field) {
    return [=](const json& v, MapContext& c) -> std::optional<ApiError> {
      double d = 0;
      if (auto e = read_number(v, name, lo, hi, &d)) return e;
      c.out.request.sampling.*field = static_cast<float>(d);
      return std::nullopt;
    };
  };
  t["temperature"] = number("temperature", 0, 2, &SamplingOptions::temperature);
  t["top_p"] = number("top_p", 0, 1, &SamplingOptions::top_p);
  t["min_p"] = number("min_p", 0, 1, &SamplingOptions::min_p);
  t["presence_penalty"] = number("presence_penalty", -2, 2, &SamplingOptions::presence_penalty);
  t["frequency_penalty"] = number("frequency_penalty", -2, 2, &SamplingOptions::frequency_penalty);
  t["top_k"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    int64_t k = 0;
    if (auto e = read_integer(v, "top_k", -1, std::numeric_limits<int32_t>::max(), &k)) return e;
    c.out.request.sampling.top_k = static_cast<int32_t>(k);
    return std::nullopt;
  };
  // llama-server's and vLLM's extension: generate through end-of-generation tokens, up to
  // max_tokens (load tests want a fixed length).
  t["ignore_eos"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_bool(v, "ignore_eos", &c.out.request.ignore_eos);
  };
  t["seed"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    int64_t s = 0;
    if (v.is_number_unsigned()) {
      c.out.request.sampling.seed = v.get<uint64_t>();
    } else {
      if (auto e = read_integer(v, "seed", std::numeric_limits<int64_t>::min(),
                                std::numeric_limits<int64_t>::max(), &s)) {
        return e;
      }
      c.out.request.sampling.seed = static_cast<uint64_t>(s);
    }
    c.seed_given = true;
    return std::nullopt;
  };
  t["logit_bias"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_object()) {
      return bad_request("'logit_bias' must be an object of token id -> bias", "logit_bias");
    }
    for (const auto& [key, value] : v.items()) {
      std::string name = "logit_bias." + key;
      char* end = nullptr;
      errno = 0;
      long long id = std::strtoll(key.c_str(), &end, 10);
      if (key.empty() || *end != '\0' || errno != 0 || id < 0 || id >= c.info.n_vocab) {
        return bad_request(fmt::format("'logit_bias' key '{}' is not a token id of this model "
                                       "(0..{})",
                                       key, c.info.n_vocab - 1),
                           "logit_bias");
      }
      double bias = 0;
      if (auto e = read_number(value, name, -100, 100, &bias)) return e;
      c.out.request.sampling.logit_bias.emplace_back(static_cast<int32_t>(id),
                                                     static_cast<float>(bias));
    }
    return std::nullopt;
  };
}

// ---- field group: streaming ----

void add_stream_fields(FieldTable& t) {
  t["stream"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_bool(v, "stream", &c.out.stream);
  };
  t["stream_options"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_object()) return bad_request("'stream_options' must be an object", "stream_options");
    for (const auto& [key, value] : v.items()) {
      if (key != "include_usage" && key != "include_obfuscation") {
        return unsupported("stream_options." + key);
      }
      if (value.is_null()) continue;
      bool* out = key == "include_usage" ? &c.out.include_usage : &c.out.include_obfuscation;
      if (auto e = read_bool(value, "stream_options." + key, out)) return e;
    }
    c.stream_options_given = true;
    return std::nullopt;
  };
}

// grammar (docs/STRUCTURED_OUTPUT.md): response_format, tools, tool_choice, logprobs,
// top_logprobs. Shapes are checked here; schema/tool semantics by the runtime at submit (its
// kInvalidArgument becomes a 400 naming the field and keyword).
void add_grammar_fields(FieldTable& t) {
  t["response_format"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    const std::string f = "response_format";
    if (!v.is_object() || !v.contains("type") || !v["type"].is_string()) {
      return bad_request("'response_format' must be an object with a string 'type'", f);
    }
    if (auto e = known_keys(v, f, {"type", "json_schema"})) return e;
    const std::string type = v["type"].get<std::string>();
    if (type != "json_schema" && v.contains("json_schema")) {
      return bad_request("'response_format.json_schema' goes with type json_schema",
                         f + ".json_schema");
    }
    ResponseFormat& rf = c.out.request.response_format;
    if (type == "text") {
      rf.type = ResponseFormat::Type::kText;
    } else if (type == "json_object") {
      rf.type = ResponseFormat::Type::kJsonObject;
    } else if (type == "json_schema") {
      const json* js = v.contains("json_schema") ? &v["json_schema"] : nullptr;
      if (js == nullptr || !js->is_object() || !js->contains("name") ||
          !(*js)["name"].is_string()) {
        return bad_request("'response_format.json_schema' must be an object with a 'name'",
                           f + ".json_schema");
      }
      for (const auto& [k, x] : js->items()) {
        if (k != "name" && k != "schema" && k != "strict" && k != "description") {
          return unsupported(f + ".json_schema." + k);
        }
      }
      const json schema = js->contains("schema") ? (*js)["schema"] : json::object();
      if (!schema.is_object() && !schema.is_boolean()) {
        return bad_request("'response_format.json_schema.schema' must be an object",
                           f + ".json_schema.schema");
      }
      rf.type = ResponseFormat::Type::kJsonSchema;
      rf.schema_json = schema.dump();
    } else {
      return bad_request("'response_format.type' must be text, json_object or json_schema",
                         f + ".type");
    }
    return std::nullopt;
  };
  t["tools"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_array()) return bad_request("'tools' must be an array", "tools");
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string name = fmt::format("tools[{}]", i);
      if (auto e = known_keys(v[i], name, {"type", "function", "custom"})) return e;
      const json type = v[i].value("type", json("function"));
      if (type == "custom") {
        return refused(name + ".type",
                       "custom (free-form text) tools have no JSON schema to "
                       "constrain; define the tool as a function");
      }
      if (type != "function") {
        return bad_request(fmt::format("'{}.type' must be function", name), name + ".type");
      }
      if (v[i].contains("function")) {
        if (auto e = known_keys(v[i]["function"], name + ".function",
                                {"name", "description", "parameters", "strict"})) {
          return e;
        }
      }
    }
    c.out.request.tools_json = v.dump();
    return std::nullopt;
  };
  t["tool_choice"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_string() && !v.is_object()) {
      return bad_request("'tool_choice' must be a string or an object", "tool_choice");
    }
    if (v.is_object()) {
      const json type = v.value("type", json());
      if (type == "allowed_tools" || type == "custom") {
        return refused("tool_choice", fmt::format("'{}' tool choices are not implemented; "
                                                  "use none, auto, required or a named function",
                                                  type.get<std::string>()));
      }
      if (auto e = known_keys(v, "tool_choice", {"type", "function"})) return e;
      if (v.contains("function")) {
        if (auto e = known_keys(v["function"], "tool_choice.function", {"name"})) return e;
      }
    }
    c.out.request.tool_choice_json = v.dump();
    return std::nullopt;
  };
  t["parallel_tool_calls"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_bool(v, "parallel_tool_calls", &c.out.request.parallel_tool_calls);
  };
  // The deprecated function calling, mapped onto tools: functions [{name, description,
  // parameters}] -> tools; function_call "none" | "auto" | {name} -> tool_choice. Replies use
  // the old shape (message.function_call, finish_reason "function_call").
  t["functions"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_array() || v.empty()) {
      return bad_request("'functions' must be a non-empty array", "functions");
    }
    json tools = json::array();
    for (size_t i = 0; i < v.size(); ++i) {
      const std::string name = fmt::format("functions[{}]", i);
      if (auto e = known_keys(v[i], name, {"name", "description", "parameters"})) return e;
      tools.push_back({{"type", "function"}, {"function", v[i]}});
    }
    c.functions_json = tools.dump();
    return std::nullopt;
  };
  t["function_call"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (v.is_string() && (v == "none" || v == "auto")) {
      c.function_call_json = v.dump();
      return std::nullopt;
    }
    if (auto e = known_keys(v, "function_call", {"name"})) return e;
    if (!v.contains("name") || !v["name"].is_string()) {
      return bad_request("'function_call' must be \"none\", \"auto\" or {\"name\": ...}",
                         "function_call");
    }
    c.function_call_json = json{{"type", "function"}, {"function", {{"name", v["name"]}}}}.dump();
    return std::nullopt;
  };
  t["logprobs"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_boolean()) return bad_request("'logprobs' must be a boolean", "logprobs");
    if (v.get<bool>() && c.out.request.top_logprobs < 0) c.out.request.top_logprobs = 0;
    if (!v.get<bool>()) c.out.request.top_logprobs = -1;
    return std::nullopt;
  };
  t["top_logprobs"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    int64_t n = 0;
    if (auto e = read_integer(v, "top_logprobs", 0, 20, &n)) return e;
    c.top_logprobs = static_cast<int>(n);
    return std::nullopt;
  };
}

// ---- field group: chat output controls ----
// modalities: text only. reasoning_effort / verbosity: passed to the chat template (the server
// checks that the model's template reads them). prediction: a speculative draft source.
// audio, web_search_options, moderation: things Power does not run.
void add_chat_output_fields(FieldTable& t) {
  t["modalities"] = [](const json& v, MapContext&) -> std::optional<ApiError> {
    if (!v.is_array()) return bad_request("'modalities' must be an array", "modalities");
    for (const auto& m : v) {
      if (!m.is_string()) return bad_request("'modalities' must hold strings", "modalities");
      if (m == "audio") {
        return refused("modalities", "Power generates text only ('audio' cannot be produced)");
      }
      if (m != "text") return bad_request("'modalities' entries must be text", "modalities");
    }
    return std::nullopt;
  };
  t["audio"] = [](const json&, MapContext&) -> std::optional<ApiError> {
    return refused("audio", "Power generates text only; there is no speech output");
  };
  t["web_search_options"] = [](const json&, MapContext&) -> std::optional<ApiError> {
    return refused("web_search_options",
                   "Power runs no web search; give the model a search tool through 'tools'");
  };
  t["moderation"] = [](const json&, MapContext&) -> std::optional<ApiError> {
    return refused("moderation", "Power runs no moderation model beside the one requested");
  };
  t["reasoning_effort"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_enum(v, "reasoning_effort",
                     {"none", "minimal", "low", "medium", "high", "xhigh", "max"},
                     &c.out.reasoning_effort);
  };
  t["verbosity"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_enum(v, "verbosity", {"low", "medium", "high"}, &c.out.verbosity);
  };
  t["prediction"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (auto e = known_keys(v, "prediction", {"type", "content"})) return e;
    std::string type;
    if (!v.contains("type")) return bad_request("'prediction.type' is required", "prediction.type");
    if (auto e = read_enum(v["type"], "prediction.type", {"content"}, &type)) return e;
    if (!v.contains("content")) {
      return bad_request("'prediction.content' is required", "prediction.content");
    }
    std::string text;
    if (auto e = read_message_content(v["content"], "prediction.content", &text)) return e;
    c.out.request.prediction = std::move(text);
    c.out.prediction = !c.out.request.prediction.empty();
    return std::nullopt;
  };
}

// ---- field group: receipts and acceptance (docs/RECEIPTS.md) ----
// power_policy: the caller's acceptance policy; a policy the model or configuration does not
// meet is refused with 409 before any compute, and no server setting relaxes it.
// power_receipt: true asks for the signed receipt (response body "power_receipt", header
// X-Power-Receipt-SHA256; streamed: a final "power.receipt" event before [DONE]).
void add_receipt_fields(FieldTable& t) {
  t["power_policy"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) return bad_request("'power_policy' must be an object", "power_policy");
    auto policy = parse_acceptance_policy(v.dump());
    if (!policy.ok()) return bad_request(status_sentence(policy.status()), "power_policy");
    c.out.request.policy = *policy;
    return std::nullopt;
  };
  t["power_receipt"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    return read_bool(v, "power_receipt", &c.out.request.want_receipt);
  };
}

// spec (docs/SPECULATIVE.md): speculative = {mode, k, s, adaptive}. Shapes and ranges are
// checked here; whether the mode can run on this model (a draft model loaded, MTP heads) is
// the runtime's to say at submit (its kInvalidArgument becomes a 400).
void add_speculative_fields(FieldTable& t) {
  t["speculative"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    if (!v.is_object()) return bad_request("'speculative' must be an object", "speculative");
    SpeculativeOptions o;
    for (const auto& [key, value] : v.items()) {
      const std::string name = "speculative." + key;
      if (key == "mode") {
        if (!value.is_string()) {
          return bad_request(fmt::format("'{}' must be a string", name), name);
        }
        o.mode = value.get<std::string>();
        if (o.mode != "off" && o.mode != "auto" && o.mode != "ngram" && o.mode != "draft" &&
            o.mode != "mtp") {
          return bad_request(fmt::format("'{}' must be off, auto, ngram, draft or mtp", name),
                             name);
        }
      } else if (key == "k") {
        int64_t n = 0;
        if (auto e = read_integer(value, name, 1, 16, &n)) return e;
        o.k = static_cast<int>(n);
      } else if (key == "s") {
        int64_t n = 0;
        if (auto e = read_integer(value, name, 1, 64, &n)) return e;
        o.s = static_cast<int>(n);
      } else if (key == "adaptive") {
        if (auto e = read_bool(value, name, &o.adaptive)) return e;
      } else {
        return unsupported(name);
      }
    }
    c.out.request.speculative = std::move(o);
    return std::nullopt;
  };
}

// logprobs on /v1/completions (the legacy completions shape): an integer N, 0..20 (OpenAI
// allows up to 5): every token's log-probability and the N most likely alternatives.
void add_completion_logprobs_fields(FieldTable& t) {
  t["logprobs"] = [](const json& v, MapContext& c) -> std::optional<ApiError> {
    int64_t n = 0;
    if (auto e = read_integer(v, "logprobs", 0, 20, &n)) return e;
    c.out.request.top_logprobs = static_cast<int32_t>(n);
    return std::nullopt;
  };
}

const FieldTable& field_table(Endpoint endpoint) {
  static const FieldTable chat = [] {
    FieldTable t;
    add_identity_fields(t);
    add_chat_input_fields(t);
    add_length_fields(t, /*chat=*/true);
    add_sampling_fields(t);
    add_stream_fields(t);
    add_grammar_fields(t);
    add_chat_output_fields(t);
    add_receipt_fields(t);
    add_speculative_fields(t);
    return t;
  }();
  static const FieldTable completion = [] {
    FieldTable t;
    add_identity_fields(t);
    add_completion_input_fields(t);
    add_length_fields(t, /*chat=*/false);
    add_sampling_fields(t);
    add_stream_fields(t);
    add_completion_logprobs_fields(t);
    add_receipt_fields(t);
    add_speculative_fields(t);
    return t;
  }();
  return endpoint == Endpoint::kChatCompletions ? chat : completion;
}

}  // namespace

std::optional<ApiError> request_model_name(const json& body, std::string* model) {
  if (!body.is_object()) return bad_request("the request body must be a JSON object");
  auto it = body.find("model");
  if (it == body.end() || it->is_null()) return bad_request("'model' is required", "model");
  if (!it->is_string()) return bad_request("'model' must be a string", "model");
  *model = it->get<std::string>();
  return std::nullopt;
}

MapResult map_request(Endpoint endpoint, const json& body, const ModelInfo& model_info) {
  MapResult r;
  if (!body.is_object()) {
    r.error = bad_request("the request body must be a JSON object");
    return r;
  }
  GenerateRequest& req = r.mapped.request;
  // OpenAI's defaults, not the runtime's: temperature 1, no top-k / top-p / min-p cut.
  req.sampling.temperature = 1.0f;
  req.sampling.top_k = 0;
  req.sampling.top_p = 1.0f;
  req.sampling.min_p = 0.0f;
  MapContext ctx{endpoint, model_info, r.mapped};
  const FieldTable& table = field_table(endpoint);
  for (const auto& [key, value] : body.items()) {
    auto h = table.find(key);
    if (h == table.end()) {
      r.error = unsupported(key);
      return r;
    }
    if (value.is_null()) continue;  // an explicit null is the field's default
    if (auto e = h->second(value, ctx)) {
      r.error = std::move(e);
      return r;
    }
  }
  if (!ctx.input_given) {
    r.error = endpoint == Endpoint::kChatCompletions
                  ? bad_request("'messages' is required", "messages")
                  : bad_request("'prompt' is required", "prompt");
    return r;
  }
  if (ctx.stream_options_given && !r.mapped.stream) {
    r.error =
        bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    return r;
  }
  if (ctx.top_logprobs >= 0) {  // OpenAI: top_logprobs needs logprobs: true
    if (req.top_logprobs < 0) {
      r.error = bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs");
      return r;
    }
    req.top_logprobs = ctx.top_logprobs;
  }
  if (!ctx.function_call_json.empty() && ctx.functions_json.empty()) {
    r.error = bad_request("'function_call' needs 'functions'", "function_call");
    return r;
  }
  if (!ctx.functions_json.empty()) {
    if (!req.tools_json.empty() || !req.tool_choice_json.empty()) {
      r.error = bad_request(
          "'functions' (deprecated) does not go with 'tools' or "
          "'tool_choice'",
          "functions");
      return r;
    }
    req.tools_json = ctx.functions_json;
    req.tool_choice_json = ctx.function_call_json;
    req.parallel_tool_calls = false;  // the old form returns one call
    r.mapped.legacy_functions = true;
  }
  // Streams carry logprobs per chunk and tool calls as delta.tool_calls (docs/SERVER.md).
  if (!req.tools_json.empty() && req.tool_choice_json != "\"none\"") {
    r.mapped.tools_active = true;
    r.mapped.tool_call_forced = !req.tool_choice_json.empty() && req.tool_choice_json != "\"auto\"";
  }
  if (ctx.best_of_given && ctx.best_of < r.mapped.n) {
    r.error = bad_request("'best_of' must be at least 'n'", "best_of");
    return r;
  }
  if (ctx.best_of_given && ctx.best_of > r.mapped.n) {
    if (r.mapped.stream) {
      r.error = bad_request(
          "'best_of' above 'n' cannot be streamed: the best are known only "
          "when every candidate is complete",
          "best_of");
      return r;
    }
    r.mapped.best_of = static_cast<int>(ctx.best_of);
  }
  if (r.mapped.echo && req.top_logprobs >= 0) {
    r.error = refused("echo",
                      "echo with logprobs needs the prompt's token log-probabilities, "
                      "which completions do not compute");
    return r;
  }
  const size_t n_choices = static_cast<size_t>(std::max(r.mapped.n, r.mapped.best_of)) *
                           std::max<size_t>(1, r.mapped.prompts.size());
  if (n_choices > 128) {
    r.error = bad_request("n (or best_of) times the number of prompts must be at most 128",
                          r.mapped.best_of > 0 ? "best_of" : "n");
    return r;
  }
  if (n_choices > 1 && req.want_receipt) {
    r.error = bad_request(
        "a receipt binds one output: ask for 'power_receipt' with one prompt "
        "and n = 1",
        "power_receipt");
    return r;
  }
  if (!ctx.max_tokens_given) {
    req.max_tokens = -1;
    req.max_tokens_up_to_context = true;
  }
  if (!ctx.seed_given) {
    // OpenAI samples differently on every unseeded request.
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    req.sampling.seed = rng();
  }
  return r;
}

std::string finish_reason(const Completion& c, bool legacy_functions) {
  if (!c.tool_calls.empty()) return legacy_functions ? "function_call" : "tool_calls";
  return c.finish == Finish::kStop ? "stop" : "length";
}

namespace {

// OpenAI's choices[].logprobs: {"content": [{token, logprob, bytes, top_logprobs}]}.
json logprob_entry(const TokenLogprob& t) {
  json bytes = json::array();
  for (unsigned char b : t.bytes) bytes.push_back(b);
  return json{{"token", t.bytes}, {"logprob", t.logprob}, {"bytes", bytes}};
}

}  // namespace

json logprobs_json(const std::vector<TokenLogprobs>& lps) {
  json content = json::array();
  for (const TokenLogprobs& lp : lps) {
    json e = logprob_entry(lp.chosen);
    e["top_logprobs"] = json::array();
    for (const TokenLogprob& t : lp.top) e["top_logprobs"].push_back(logprob_entry(t));
    content.push_back(std::move(e));
  }
  return json{{"content", content}};
}

json usage_json(const Usage& u, const SpeculativeUsage* spec) {
  json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_prompt_tokens}}}};
  if (spec != nullptr) {
    j["completion_tokens_details"] = {
        {"accepted_prediction_tokens", spec->accepted},
        {"rejected_prediction_tokens", spec->drafted - spec->accepted}};
  }
  return j;
}

Usage combined_usage(const std::vector<Completion>& choices, int n) {
  Usage u;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (n <= 1 || i % static_cast<size_t>(n) == 0) {  // a prompt counts once
      u.prompt_tokens += choices[i].usage.prompt_tokens;
      u.cached_prompt_tokens += choices[i].usage.cached_prompt_tokens;
    }
    u.completion_tokens += choices[i].usage.completion_tokens;
  }
  return u;
}

SpeculativeUsage combined_speculative(const std::vector<Completion>& choices) {
  SpeculativeUsage s;
  for (const Completion& c : choices) {
    s.drafted += c.speculative.drafted;
    s.accepted += c.speculative.accepted;
  }
  return s;
}

namespace {

json response_envelope(const ResponseMeta& meta, const char* object, json choices, const Usage& u,
                       const SpeculativeUsage* spec) {
  json j = {{"id", meta.id},
            {"object", object},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", std::move(choices)},
            {"usage", usage_json(u, meta.prediction ? spec : nullptr)}};
  if (!meta.service_tier.empty()) j["service_tier"] = meta.service_tier;
  return j;
}

}  // namespace

json chat_response(const ResponseMeta& meta, const std::vector<Completion>& completions,
                   const Usage& usage) {
  json choices = json::array();
  for (size_t i = 0; i < completions.size(); ++i) {
    const Completion& c = completions[i];
    json choice = {{"index", i},
                   {"message", {{"role", "assistant"}, {"content", c.text}, {"refusal", nullptr}}},
                   {"logprobs", nullptr},
                   {"finish_reason", finish_reason(c, meta.legacy_functions)}};
    if (!c.tool_calls.empty() && meta.legacy_functions) {
      const ToolCall& tc = c.tool_calls.front();  // the deprecated form carries one call
      choice["message"]["function_call"] = {{"name", tc.name}, {"arguments", tc.arguments_json}};
      if (c.text.empty()) choice["message"]["content"] = nullptr;
    } else if (!c.tool_calls.empty()) {
      json calls = json::array();
      for (const ToolCall& tc : c.tool_calls) {
        calls.push_back({{"id", tc.id},
                         {"type", "function"},
                         {"function", {{"name", tc.name}, {"arguments", tc.arguments_json}}}});
      }
      choice["message"]["tool_calls"] = std::move(calls);
      if (c.text.empty()) choice["message"]["content"] = nullptr;
    }
    if (!c.logprobs.empty()) choice["logprobs"] = logprobs_json(c.logprobs);
    choices.push_back(std::move(choice));
  }
  const SpeculativeUsage spec = combined_speculative(completions);
  return response_envelope(meta, "chat.completion", std::move(choices), usage, &spec);
}

json completion_logprobs_json(const std::vector<TokenLogprobs>& lps, size_t* text_offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(),
       offsets = json::array();
  for (const TokenLogprobs& lp : lps) {
    tokens.push_back(lp.chosen.bytes);
    token_logprobs.push_back(lp.chosen.logprob);
    // OpenAI: the N most likely tokens, plus the sampled one when it is not among them.
    json alternatives = json::object();
    for (const TokenLogprob& t : lp.top) {
      if (!alternatives.contains(t.bytes)) alternatives[t.bytes] = t.logprob;
    }
    if (!alternatives.contains(lp.chosen.bytes)) alternatives[lp.chosen.bytes] = lp.chosen.logprob;
    top.push_back(std::move(alternatives));
    offsets.push_back(*text_offset);
    *text_offset += lp.chosen.bytes.size();
  }
  return json{{"tokens", tokens},
              {"token_logprobs", token_logprobs},
              {"top_logprobs", top},
              {"text_offset", offsets}};
}

json completion_response(const ResponseMeta& meta, const std::vector<Completion>& completions,
                         const Usage& usage, const std::vector<std::string>& echo_prefixes) {
  json choices = json::array();
  for (size_t i = 0; i < completions.size(); ++i) {
    const Completion& c = completions[i];
    const std::string& prefix = i < echo_prefixes.size() ? echo_prefixes[i] : std::string();
    json choice = {{"index", i},
                   {"text", prefix + c.text},
                   {"logprobs", nullptr},
                   {"finish_reason", finish_reason(c)}};
    if (!c.logprobs.empty()) {
      size_t offset = 0;
      choice["logprobs"] = completion_logprobs_json(c.logprobs, &offset);
    }
    choices.push_back(std::move(choice));
  }
  const SpeculativeUsage spec = combined_speculative(completions);
  return response_envelope(meta, "text_completion", std::move(choices), usage, &spec);
}

json chat_chunk(const ResponseMeta& meta, int index, const std::string* role,
                const std::string* delta_text, const std::string* finish, bool with_usage_null,
                const json* logprobs) {
  json delta = json::object();
  if (role != nullptr) delta["role"] = *role;
  if (delta_text != nullptr) delta["content"] = *delta_text;
  json choice = {{"index", index}, {"delta", delta}, {"logprobs", nullptr}};
  if (logprobs != nullptr) choice["logprobs"] = *logprobs;
  choice["finish_reason"] = finish != nullptr ? json(*finish) : json(nullptr);
  json j = {{"id", meta.id},
            {"object", "chat.completion.chunk"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array({choice})}};
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

json completion_chunk(const ResponseMeta& meta, int index, const std::string& text,
                      const std::string* finish, bool with_usage_null, const json* logprobs) {
  json choice = {{"index", index}, {"text", text}, {"logprobs", nullptr}};
  if (logprobs != nullptr) choice["logprobs"] = *logprobs;
  choice["finish_reason"] = finish != nullptr ? json(*finish) : json(nullptr);
  json j = {{"id", meta.id},
            {"object", "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array({choice})}};
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

std::vector<json> tool_call_chunks(const ResponseMeta& meta, int index,
                                   const std::vector<ToolCall>& calls, bool with_usage_null,
                                   const json* logprobs) {
  std::vector<json> out;
  // One chunk whose delta is `delta` (logprobs, if any, on the first).
  auto emit = [&](json delta) {
    json choice = {{"index", index},
                   {"delta", std::move(delta)},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}};
    if (out.empty() && logprobs != nullptr) choice["logprobs"] = *logprobs;
    json j = {{"id", meta.id},
              {"object", "chat.completion.chunk"},
              {"created", meta.created},
              {"model", meta.model},
              {"choices", json::array({std::move(choice)})}};
    if (with_usage_null) j["usage"] = nullptr;
    out.push_back(std::move(j));
  };
  auto chunk = [&](json call) { emit({{"tool_calls", json::array({std::move(call)})}}); };
  if (meta.legacy_functions && !calls.empty()) {  // delta.function_call, one call
    auto fchunk = [&](json fc) { emit({{"function_call", std::move(fc)}}); };
    const ToolCall& tc = calls.front();
    fchunk({{"name", tc.name}, {"arguments", ""}});
    constexpr size_t kFragment = 32;
    for (size_t at = 0; at < tc.arguments_json.size(); at += kFragment) {
      fchunk({{"arguments", tc.arguments_json.substr(at, kFragment)}});
    }
    return out;
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    const ToolCall& tc = calls[i];
    chunk({{"index", i},
           {"id", tc.id},
           {"type", "function"},
           {"function", {{"name", tc.name}, {"arguments", ""}}}});
    // The arguments in fragments, as OpenAI sends them (each a piece of the JSON text).
    constexpr size_t kFragment = 32;
    for (size_t at = 0; at < tc.arguments_json.size(); at += kFragment) {
      chunk({{"index", i}, {"function", {{"arguments", tc.arguments_json.substr(at, kFragment)}}}});
    }
  }
  return out;
}

json usage_chunk(Endpoint endpoint, const ResponseMeta& meta, const Usage& u,
                 const SpeculativeUsage* spec) {
  json j = {{"id", meta.id},
            {"object",
             endpoint == Endpoint::kChatCompletions ? "chat.completion.chunk" : "text_completion"},
            {"created", meta.created},
            {"model", meta.model},
            {"choices", json::array()},
            {"usage", usage_json(u, meta.prediction ? spec : nullptr)}};
  if (!meta.service_tier.empty()) j["service_tier"] = meta.service_tier;
  return j;
}

std::optional<ApiError> context_length_error(const Status& status, Endpoint endpoint,
                                             bool max_tokens_given) {
  if (status.code() != StatusCode::kDoesNotFit) return std::nullopt;
  const int64_t n_ctx = status_context_number(status, "n_ctx");
  if (n_ctx < 0) return std::nullopt;  // the memory budget, not the context
  const int64_t prompt = status_context_number(status, "prompt_tokens");
  const int64_t completion = status_context_number(status, "max_new_tokens");
  const bool chat = endpoint == Endpoint::kChatCompletions;
  const char* input = chat ? "messages" : "prompt";
  ApiError e;
  e.http_status = 400;
  e.code = "context_length_exceeded";
  if (completion > 0 && prompt < n_ctx) {
    e.message = fmt::format(
        "This model's maximum context length is {} tokens. However, you requested {} tokens "
        "({} in the {}, {} in the completion). Please reduce the length of the {} or "
        "completion.",
        n_ctx, prompt + completion, prompt, input, completion, input);
    e.param = max_tokens_given ? "max_tokens" : input;
  } else {
    e.message = fmt::format(
        "This model's maximum context length is {} tokens. However, your {} resulted in {} "
        "tokens. Please reduce the length of the {}.",
        n_ctx, input, prompt, input);
    e.param = input;
  }
  return e;
}

std::string to_wire(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace power::server
