#include "server/ollama_api.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <limits>
#include <optional>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "server/connection_watch.h"
#include "server/openai_mapping.h"
#include "server/tool_stream.h"

#if POWER_WITH_STORE
#include "store/layout.h"
#include "store/manifest.h"
#include "store/models.h"
#endif

namespace power::server {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kPollInterval{20};

// An Ollama-side error: Ollama's body is {"error": "message"}.
struct OError {
  int status = 400;
  std::string message;
  std::string reason = "invalid_request";  // the metrics label
};

OError bad(std::string message) {
  return OError{400, std::move(message)};
}

// The OpenAI side's status and sentence for the same Status; the metrics reason by code.
OError from_status(const Status& st) {
  const ApiError a = error_from_status(st);
  OError e{a.http_status, a.message};
  switch (st.code()) {
    case StatusCode::kDoesNotFit:
    case StatusCode::kResourceExhausted:
      e.reason = "does_not_fit";
      break;
    case StatusCode::kNotFound:
      e.reason = "not_found";
      break;
    case StatusCode::kQueueFull:
      e.reason = "queue_full";
      break;
    case StatusCode::kDeadlineExceeded:
      e.reason = "deadline";
      break;
    default:
      break;
  }
  return e;
}

void send_error(const OllamaContext& ctx, httplib::Response& res, const OError& e) {
  if (ctx.count_rejection) ctx.count_rejection(e.reason, e.message, e.status);
  res.status = e.status;
  res.set_content(to_wire(json{{"error", e.message}}), "application/json");
}

// "2026-12-02T15:04:05.123456Z", as Ollama's created_at.
std::string rfc3339_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  std::tm tm{};
  gmtime_r(&t, &tm);
  const auto us =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() %
      1000000;
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}.{:06}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, us);
}

std::string rfc3339(int64_t unix_s) {
  const std::time_t t = static_cast<std::time_t>(unix_s);
  std::tm tm{};
  gmtime_r(&t, &tm);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", tm.tm_year + 1900, tm.tm_mon + 1,
                     tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec);
}

std::optional<OError> check_keys(const json& body, std::initializer_list<std::string_view> known,
                                 const std::string& where = "") {
  for (const auto& [key, value] : body.items()) {
    bool ok = false;
    for (std::string_view k : known) ok = ok || k == key;
    if (!ok) return bad(fmt::format("unknown field '{}{}'", where, key));
  }
  return std::nullopt;
}

std::optional<json> parse(const OllamaContext& ctx, const httplib::Request& req,
                          httplib::Response& res) {
  json body = json::parse(req.body, nullptr, false);
  if (body.is_discarded() || !body.is_object()) {
    send_error(ctx, res, bad("the request body must be a JSON object (UTF-8)"));
    return std::nullopt;
  }
  return body;
}

// ---- options ----

std::optional<OError> number(const json& v, const std::string& name, double lo, double hi,
                             double* out) {
  if (!v.is_number() || !std::isfinite(v.get<double>()) || v.get<double>() < lo ||
      v.get<double>() > hi) {
    return bad(fmt::format("option '{}' must be a number from {} to {}", name, lo, hi));
  }
  *out = v.get<double>();
  return std::nullopt;
}

std::optional<OError> integer(const json& v, const std::string& name, int64_t lo, int64_t hi,
                              int64_t* out) {
  if (!v.is_number_integer() &&
      !(v.is_number_float() && std::floor(v.get<double>()) == v.get<double>())) {
    return bad(fmt::format("option '{}' must be an integer", name));
  }
  const double d = v.get<double>();
  if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) {
    return bad(fmt::format("option '{}' must be from {} to {}", name, lo, hi));
  }
  *out = v.is_number_integer() ? v.get<int64_t>() : static_cast<int64_t>(d);
  return std::nullopt;
}

// Ollama's options onto a request (its defaults first: temperature 0.8, top_k 40, top_p 0.9,
// min_p 0, repeat_penalty 1.1 over the last 64 tokens, a random seed).
std::optional<OError> apply_options(const json* options, const ModelInfo& info,
                                    GenerateRequest& r) {
  SamplingOptions& s = r.sampling;
  s.temperature = 0.8f;
  s.top_k = 40;
  s.top_p = 0.9f;
  s.min_p = 0.0f;
  s.repeat_penalty = 1.1f;
  s.penalty_last_n = 64;
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  s.seed = rng();
  r.max_tokens = -1;
  r.max_tokens_up_to_context = true;
  if (options == nullptr || options->is_null()) return std::nullopt;
  if (!options->is_object()) return bad("'options' must be an object");
  for (const auto& [key, v] : options->items()) {
    if (v.is_null()) continue;
    double d = 0;
    int64_t i = 0;
    if (key == "temperature") {
      if (auto e = number(v, key, 0, 100, &d)) return e;
      s.temperature = static_cast<float>(d);
    } else if (key == "top_k") {
      if (auto e = integer(v, key, 0, std::numeric_limits<int32_t>::max(), &i)) return e;
      s.top_k = static_cast<int32_t>(i);
    } else if (key == "top_p") {
      if (auto e = number(v, key, 0, 1, &d)) return e;
      s.top_p = static_cast<float>(d);
    } else if (key == "min_p") {
      if (auto e = number(v, key, 0, 1, &d)) return e;
      s.min_p = static_cast<float>(d);
    } else if (key == "repeat_penalty") {
      if (auto e = number(v, key, 0, 100, &d)) return e;
      s.repeat_penalty = static_cast<float>(d);
    } else if (key == "repeat_last_n") {
      if (auto e = integer(v, key, -1, info.n_ctx, &i)) return e;
      s.penalty_last_n = static_cast<int32_t>(i < 0 ? info.n_ctx : i);
    } else if (key == "presence_penalty" || key == "frequency_penalty") {
      if (auto e = number(v, key, -100, 100, &d)) return e;
      (key == "presence_penalty" ? s.presence_penalty : s.frequency_penalty) =
          static_cast<float>(d);
    } else if (key == "seed") {
      if (auto e = integer(v, key, std::numeric_limits<int64_t>::min(),
                           std::numeric_limits<int64_t>::max(), &i)) {
        return e;
      }
      if (i != -1) s.seed = static_cast<uint64_t>(i);  // -1: random, as Ollama
    } else if (key == "num_predict") {
      if (auto e = integer(v, key, -2, std::numeric_limits<int32_t>::max(), &i)) return e;
      // -1 (until the end) and -2 (fill the context) both stop at the end of the context;
      // a count beyond what the context leaves is cut to it (finish "length").
      r.max_tokens = i < 0 ? -1 : static_cast<int32_t>(i);
      if (i == 0) r.max_tokens = 0;
    } else if (key == "num_ctx") {
      if (auto e = integer(v, key, 1, std::numeric_limits<int32_t>::max(), &i)) return e;
      if (i > info.n_ctx) {
        return bad(
            fmt::format("option 'num_ctx' is {} but the model was loaded with a context "
                        "of {} tokens; the context is fixed when the model is loaded "
                        "(power serve --ctx)",
                        i, info.n_ctx));
      }
    } else if (key == "stop") {
      if (!v.is_array()) return bad("option 'stop' must be an array of strings");
      for (const auto& x : v) {
        if (!x.is_string() || x.get<std::string>().empty()) {
          return bad("option 'stop' must hold non-empty strings");
        }
        r.stop.push_back(x.get<std::string>());
      }
    } else if (key == "typical_p" || key == "tfs_z") {
      if (auto e = number(v, key, 0, 1, &d)) return e;
      if (d != 1.0) {
        return bad(
            fmt::format("option '{}' is not supported: Power's sampler has no {} "
                        "sampling (1.0, off, is accepted)",
                        key, key == "typical_p" ? "locally typical" : "tail-free"));
      }
    } else if (key == "mirostat") {
      if (auto e = integer(v, key, 0, 2, &i)) return e;
      if (i != 0) return bad("option 'mirostat' is not supported: Power has no Mirostat sampler");
    } else if (key == "mirostat_tau" || key == "mirostat_eta") {
      if (auto e = number(v, key, 0, 100, &d)) return e;  // inert without mirostat
    } else if (key == "penalize_newline") {
      if (!v.is_boolean() || !v.get<bool>()) {
        return bad(
            "option 'penalize_newline' can only be true: the repeat penalty applies to "
            "every token");
      }
    } else if (key == "num_keep") {
      if (auto e = integer(v, key, -1, std::numeric_limits<int32_t>::max(), &i)) return e;
      // Ollama keeps these tokens when it shifts a full context; Power never shifts or
      // truncates a prompt (a request that does not fit is refused), so nothing is dropped.
    } else if (key == "num_thread" || key == "num_gpu" || key == "main_gpu" || key == "num_batch" ||
               key == "use_mmap" || key == "use_mlock" || key == "numa" || key == "low_vram" ||
               key == "f16_kv" || key == "vocab_only") {
      return bad(
          fmt::format("option '{}' is not supported per request: threads, devices, "
                      "batching and memory mapping are set when the model is loaded "
                      "(power serve --threads, --max-running, ...)",
                      key));
    } else {
      return bad(fmt::format("unknown option '{}'", key));
    }
  }
  return std::nullopt;
}

// format: "json", a JSON schema object, or "" / absent.
std::optional<OError> apply_format(const json* format, GenerateRequest& r) {
  if (format == nullptr || format->is_null()) return std::nullopt;
  if (format->is_string()) {
    const std::string f = format->get<std::string>();
    if (f.empty()) return std::nullopt;
    if (f != "json") return bad("'format' must be \"json\" or a JSON schema object");
    r.response_format.type = ResponseFormat::Type::kJsonObject;
    return std::nullopt;
  }
  if (!format->is_object()) return bad("'format' must be \"json\" or a JSON schema object");
  r.response_format.type = ResponseFormat::Type::kJsonSchema;
  r.response_format.schema_json = format->dump();
  return std::nullopt;
}

// keep_alive: a duration ("5m", "1h", "0") or seconds. Models stay loaded until unloaded, so
// the only value that acts is 0 on a request without input (unload).
std::optional<OError> read_keep_alive(const json* v, bool* zero) {
  *zero = false;
  if (v == nullptr || v->is_null()) return std::nullopt;
  if (v->is_number()) {
    *zero = v->get<double>() == 0;
    return std::nullopt;
  }
  if (!v->is_string()) return bad("'keep_alive' must be a duration (\"5m\") or seconds");
  const std::string s = v->get<std::string>();
  size_t i = 0;
  if (i < s.size() && s[i] == '-') ++i;
  bool digits = false, all_zero = true;
  for (; i < s.size() && (std::isdigit(static_cast<unsigned char>(s[i])) || s[i] == '.'); ++i) {
    digits = true;
    if (s[i] != '0' && s[i] != '.') all_zero = false;
  }
  const std::string unit = s.substr(i);
  if (!digits || !(unit.empty() || unit == "ns" || unit == "us" || unit == "ms" || unit == "s" ||
                   unit == "m" || unit == "h")) {
    return bad(fmt::format("'keep_alive' '{}' is not a duration such as 5m, 1h or 0", s));
  }
  *zero = all_zero;
  return std::nullopt;
}

// think: true/false or "low"/"medium"/"high", through the chat template like OpenAI's
// reasoning_effort (the template must read reasoning_effort or enable_thinking).
std::optional<OError> apply_think(const json* think, const LoadedModel& model, GenerateRequest& r) {
  if (think == nullptr || think->is_null()) return std::nullopt;
  std::string level;
  if (think->is_boolean()) {
    level = think->get<bool>() ? "medium" : "none";
  } else if (think->is_string() && (*think == "low" || *think == "medium" || *think == "high")) {
    level = think->get<std::string>();
  } else {
    return bad("'think' must be true, false, \"low\", \"medium\" or \"high\"");
  }
  auto source = model.handle.chat_template_source();
  if (!source.ok()) return from_status(source.status());
  json kwargs = json::object();
  if (source->find("enable_thinking") != std::string::npos) {
    kwargs["enable_thinking"] = level != "none";
  } else if (source->find("reasoning_effort") != std::string::npos) {
    if (level == "none") {
      return bad(
          "'think' false is not supported by this model: its template sets a "
          "reasoning_effort but cannot switch thinking off");
    }
    kwargs["reasoning_effort"] = level;
  } else {
    return bad(
        "'think' is not supported by this model: its chat template reads neither "
        "enable_thinking nor reasoning_effort");
  }
  r.template_kwargs_json = kwargs.dump();
  return std::nullopt;
}

// Ollama's tool calls ({"function": {"name", "arguments": {...}}}) as the OpenAI JSON the
// runtime renders.
std::optional<OError> tool_calls_to_openai(const json& calls, std::string* out) {
  if (!calls.is_array()) return bad("'tool_calls' must be an array");
  json o = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    const json& c = calls[i];
    if (!c.is_object() || !c.contains("function") || !c["function"].is_object() ||
        !c["function"].contains("name") || !c["function"]["name"].is_string()) {
      return bad("each tool call must be {\"function\": {\"name\", \"arguments\"}}");
    }
    const json& f = c["function"];
    json args = f.contains("arguments") ? f["arguments"] : json::object();
    o.push_back({{"id", c.value("id", fmt::format("call_{}", i))},
                 {"type", "function"},
                 {"function",
                  {{"name", f["name"]},
                   {"arguments", args.is_string() ? args.get<std::string>() : args.dump()}}}});
  }
  *out = o.dump();
  return std::nullopt;
}

json ollama_tool_calls(const std::vector<ToolCall>& calls) {
  json out = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json args = json::parse(calls[i].arguments_json, nullptr, false);
    if (args.is_discarded()) args = json::object();
    out.push_back({{"function", {{"index", i}, {"name", calls[i].name}, {"arguments", args}}}});
  }
  return out;
}

std::shared_ptr<LoadedModel> find_or_load(const OllamaContext& ctx, const std::string& name,
                                          OError* err) {
  if (auto m = ctx.registry.find(name)) return m;
  // Like Ollama, a model the store holds is loaded on first use.
  auto loaded = ctx.registry.load(name);
  if (loaded.ok()) return *loaded;
  err->status = 404;
  err->reason = "not_found";
  err->message = fmt::format("model \"{}\" not found, try pulling it first ({})", name,
                             loaded.status().message());
  return nullptr;
}

void add_timings(json& j, const std::vector<Completion>& all, Clock::time_point t0) {
  int64_t prompt = 0, eval = 0;
  double prefill_ms = 0, decode_ms = 0;
  for (const Completion& c : all) {
    prompt += c.usage.prompt_tokens;
    eval += c.usage.completion_tokens;
    prefill_ms += c.timings.prefill_ms;
    decode_ms += c.timings.decode_ms;
  }
  const auto ns = [](double ms) { return static_cast<int64_t>(ms * 1e6); };
  j["total_duration"] =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  j["load_duration"] = 0;
  j["prompt_eval_count"] = prompt;
  j["prompt_eval_duration"] = ns(prefill_ms);
  j["eval_count"] = eval;
  j["eval_duration"] = ns(decode_ms);
}

// /api/chat and /api/generate: one generation, answered as NDJSON lines or one object.
struct Job {
  bool chat = true;
  bool stream = true;
  bool tools_active = false, tool_call_forced = false;
  std::string model_name;
  std::shared_ptr<LoadedModel> model;
  GenerateRequest request;
};

void run_job(const OllamaContext& ctx, const httplib::Request& req, httplib::Response& res,
             Job job) {
  const auto t0 = Clock::now();
  std::vector<GenerateRequest> one;
  one.push_back(std::move(job.request));
  auto gen = ctx.make_generation(job.model, std::move(one), {-1});
  if (Status st = gen->start(); !st.ok()) return send_error(ctx, res, from_status(st));
  auto piece = [chat = job.chat, name = job.model_name](const std::string& text) {
    json j = {{"model", name}, {"created_at", rfc3339_now()}};
    if (chat) {
      j["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
      j["response"] = text;
    }
    j["done"] = false;
    return j;
  };
  auto last = [chat = job.chat, name = job.model_name, t0](const Completion& c,
                                                           const std::string& text) {
    json j = {{"model", name}, {"created_at", rfc3339_now()}};
    if (chat) {
      j["message"] = {{"role", "assistant"}, {"content", text}};
      if (!c.tool_calls.empty()) j["message"]["tool_calls"] = ollama_tool_calls(c.tool_calls);
    } else {
      j["response"] = text;
    }
    j["done"] = true;
    j["done_reason"] = c.finish == Finish::kStop ? "stop" : "length";
    add_timings(j, {c}, t0);
    return j;
  };
  ConnectionWatch watch(req.local_port, req.remote_addr, req.remote_port);
  if (!job.stream) {
    std::vector<Generation::Update> updates;
    while (!gen->all_done()) {
      if (Status st = gen->poll(kPollInterval, &updates); !st.ok()) {
        return send_error(ctx, res, from_status(st));
      }
      if (!gen->client_gone() && watch.peer_gone()) {
        gen->mark_client_gone();
        gen->cancel_all();
      }
    }
    if (Status st = gen->first_error(); !st.ok()) return send_error(ctx, res, from_status(st));
    std::vector<Completion> all = gen->take_completions();
    res.set_content(to_wire(last(all[0], all[0].text)), "application/json");
    return;
  }
  const bool tools_active = job.tools_active;
  const bool forced = job.tool_call_forced;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [gen, piece, last, tools_active, forced, watch](size_t,
                                                      httplib::DataSink& sink) mutable -> bool {
        auto send = [&](const json& j) {
          const std::string line = to_wire(j) + "\n";
          if (!sink.write(line.data(), line.size())) {
            gen->mark_client_gone();
            gen->cancel_all();
            return false;
          }
          return true;
        };
        ToolStreamFilter filter(forced);
        std::vector<Generation::Update> updates;
        auto next_check = Clock::now() + kPollInterval;
        while (!gen->all_done()) {
          Status st = gen->poll(kPollInterval, &updates);
          if (st.ok()) st = gen->first_error();
          if (!st.ok()) {
            gen->cancel_all();
            send(json{{"error", from_status(st).message}});
            sink.done();
            return true;
          }
          for (const Generation::Update& u : updates) {
            const std::string text = tools_active ? filter.push(u.text) : u.text;
            if (!text.empty()) {
              if (!send(piece(text))) return false;
              next_check = Clock::now() + kPollInterval;
            }
            if (u.finished) {
              const Completion& c = gen->completion(0);
              const std::string rest = tools_active ? filter.finish(c) : std::string();
              if (!send(last(c, rest))) return false;
            }
          }
          if (Clock::now() >= next_check) {
            if (watch.peer_gone()) {
              gen->mark_client_gone();
              gen->cancel_all();
              return false;
            }
            next_check = Clock::now() + kPollInterval;
          }
        }
        sink.done();
        return true;
      },
      [gen](bool success) {
        if (!success) {
          gen->mark_client_gone();
          gen->cancel_all();
        }
      });
}

// A request without input: Ollama's way to load a model (or, with keep_alive 0, unload it).
void load_or_unload(const OllamaContext& ctx, httplib::Response& res, bool chat,
                    const std::string& name, bool unload) {
  json j = {{"model", name}, {"created_at", rfc3339_now()}};
  if (chat) {
    j["message"] = {{"role", "assistant"}, {"content", ""}};
  } else {
    j["response"] = "";
  }
  j["done"] = true;
  if (unload) {
    Status st = ctx.registry.unload(name);
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      return send_error(ctx, res, from_status(st));
    }
    j["done_reason"] = "unload";
  } else {
    OError err;
    if (!find_or_load(ctx, name, &err)) return send_error(ctx, res, err);
    j["done_reason"] = "load";
  }
  res.set_content(to_wire(j), "application/json");
}

std::optional<OError> read_common(const json& body, Job& job, bool* keep_alive_zero) {
  auto m = body.find("model");
  if (m == body.end() || !m->is_string() || m->get<std::string>().empty()) {
    return bad("'model' is required");
  }
  job.model_name = m->get<std::string>();
  if (auto it = body.find("stream"); it != body.end() && !it->is_null()) {
    if (!it->is_boolean()) return bad("'stream' must be a boolean");
    job.stream = it->get<bool>();
  }
  auto ka = body.find("keep_alive");
  return read_keep_alive(ka == body.end() ? nullptr : &*ka, keep_alive_zero);
}

const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

void handle_chat(const OllamaContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse(ctx, req, res);
  if (!body) return;
  if (auto e = check_keys(*body, {"model", "messages", "tools", "format", "options", "stream",
                                  "keep_alive", "think", "truncate", "shift"})) {
    return send_error(ctx, res, *e);
  }
  Job job;
  bool unload = false;
  if (auto e = read_common(*body, job, &unload)) return send_error(ctx, res, *e);
  const json* messages = field(*body, "messages");
  if (messages != nullptr && !messages->is_array()) {
    return send_error(ctx, res, bad("'messages' must be an array"));
  }
  if (messages == nullptr || messages->empty()) {
    return load_or_unload(ctx, res, true, job.model_name, unload);
  }
  OError err;
  job.model = find_or_load(ctx, job.model_name, &err);
  if (!job.model) return send_error(ctx, res, err);
  if (job.model->embedding) {
    return send_error(
        ctx, res, bad(fmt::format("\"{}\" is an embedding model and cannot chat", job.model_name)));
  }
  GenerateRequest& r = job.request;
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = fmt::format("messages[{}].", i);
    if (!m.is_object())
      return send_error(ctx, res, bad(fmt::format("'messages[{}]' must be an object", i)));
    if (auto e = check_keys(
            m, {"role", "content", "images", "tool_calls", "tool_name", "thinking", "tool_call_id"},
            where)) {
      return send_error(ctx, res, *e);
    }
    ChatMessage msg;
    if (!m.contains("role") || !m["role"].is_string()) {
      return send_error(ctx, res, bad(fmt::format("'{}role' must be a string", where)));
    }
    msg.role = m["role"].get<std::string>();
    if (msg.role != "system" && msg.role != "user" && msg.role != "assistant" &&
        msg.role != "tool") {
      return send_error(
          ctx, res, bad(fmt::format("'{}role' must be system, user, assistant or tool", where)));
    }
    if (const json* c = field(m, "content")) {
      if (!c->is_string())
        return send_error(ctx, res, bad(fmt::format("'{}content' must be a string", where)));
      msg.content = c->get<std::string>();
    }
    if (const json* imgs = field(m, "images"); imgs != nullptr && !imgs->empty()) {
      return send_error(ctx, res,
                        bad("'images' are not supported: the language models Power "
                            "serves take text (images go to /v1/ocr and /v1/classify)"));
    }
    if (const json* tc = field(m, "tool_calls")) {
      if (auto e = tool_calls_to_openai(*tc, &msg.tool_calls_json)) return send_error(ctx, res, *e);
    }
    for (const char* k : {"tool_name", "tool_call_id"}) {
      if (const json* v = field(m, k)) {
        if (!v->is_string())
          return send_error(ctx, res, bad(fmt::format("'{}{}' must be a string", where, k)));
        (std::string_view(k) == "tool_name" ? msg.name : msg.tool_call_id) = v->get<std::string>();
      }
    }
    if (const json* v = field(m, "thinking"); v != nullptr && !v->is_string()) {
      // An earlier turn's thinking: accepted and not rendered (templates drop it from history).
      return send_error(ctx, res, bad(fmt::format("'{}thinking' must be a string", where)));
    }
    r.messages.push_back(std::move(msg));
  }
  if (auto e = apply_options(field(*body, "options"), job.model->handle.info(), r)) {
    return send_error(ctx, res, *e);
  }
  if (auto e = apply_format(field(*body, "format"), r)) return send_error(ctx, res, *e);
  if (auto e = apply_think(field(*body, "think"), *job.model, r)) return send_error(ctx, res, *e);
  if (const json* tools = field(*body, "tools")) {
    if (!tools->is_array()) return send_error(ctx, res, bad("'tools' must be an array"));
    if (!tools->empty()) {
      r.tools_json = tools->dump();
      job.tools_active = true;
    }
  }
  if (const json* t = field(*body, "truncate");
      t != nullptr && (!t->is_boolean() || t->get<bool>())) {
    return send_error(ctx, res,
                      bad("'truncate' can only be false: Power never truncates a "
                          "conversation; one that does not fit is refused"));
  }
  if (const json* t = field(*body, "shift"); t != nullptr && (!t->is_boolean() || t->get<bool>())) {
    return send_error(ctx, res, bad("'shift' can only be false: Power never shifts the context"));
  }
  if (ctx.opts.queue_timeout_s > 0) {
    r.deadline = Clock::now() + std::chrono::seconds(ctx.opts.queue_timeout_s);
  }
  job.chat = true;
  run_job(ctx, req, res, std::move(job));
}

void handle_generate(const OllamaContext& ctx, const httplib::Request& req,
                     httplib::Response& res) {
  auto body = parse(ctx, req, res);
  if (!body) return;
  if (auto e = check_keys(
          *body, {"model", "prompt", "suffix", "images", "format", "options", "system", "template",
                  "context", "stream", "raw", "keep_alive", "think", "truncate", "shift"})) {
    return send_error(ctx, res, *e);
  }
  Job job;
  bool unload = false;
  if (auto e = read_common(*body, job, &unload)) return send_error(ctx, res, *e);
  std::string prompt, system;
  if (const json* p = field(*body, "prompt")) {
    if (!p->is_string()) return send_error(ctx, res, bad("'prompt' must be a string"));
    prompt = p->get<std::string>();
  }
  if (prompt.empty()) return load_or_unload(ctx, res, false, job.model_name, unload);
  if (const json* s = field(*body, "suffix");
      s != nullptr && (!s->is_string() || !s->get<std::string>().empty())) {
    return send_error(ctx, res,
                      bad("'suffix' is not supported: fill-in-the-middle needs the "
                          "model's FIM prompt format, which Power does not build"));
  }
  if (const json* imgs = field(*body, "images"); imgs != nullptr && !imgs->empty()) {
    return send_error(ctx, res,
                      bad("'images' are not supported: the language models Power "
                          "serves take text (images go to /v1/ocr and /v1/classify)"));
  }
  if (const json* t = field(*body, "template");
      t != nullptr && (!t->is_string() || !t->get<std::string>().empty())) {
    return send_error(ctx, res,
                      bad("'template' is not supported: Power renders the model's own "
                          "chat template (send \"raw\": true with a formatted prompt)"));
  }
  if (const json* c = field(*body, "context"); c != nullptr && (!c->is_array() || !c->empty())) {
    return send_error(ctx, res,
                      bad("'context' is not supported: send the conversation as "
                          "/api/chat messages (the prefix cache reuses its KV)"));
  }
  for (const char* k : {"truncate", "shift"}) {
    if (const json* t = field(*body, k); t != nullptr && (!t->is_boolean() || t->get<bool>())) {
      return send_error(ctx, res,
                        bad(fmt::format("'{}' can only be false: Power never "
                                        "truncates or shifts a prompt",
                                        k)));
    }
  }
  bool raw = false;
  if (const json* v = field(*body, "raw")) {
    if (!v->is_boolean()) return send_error(ctx, res, bad("'raw' must be a boolean"));
    raw = v->get<bool>();
  }
  if (const json* s = field(*body, "system")) {
    if (!s->is_string()) return send_error(ctx, res, bad("'system' must be a string"));
    system = s->get<std::string>();
  }
  if (raw && !system.empty()) {
    return send_error(ctx, res,
                      bad("'system' does not go with 'raw': a raw prompt is sent as "
                          "it is"));
  }
  OError err;
  job.model = find_or_load(ctx, job.model_name, &err);
  if (!job.model) return send_error(ctx, res, err);
  if (job.model->embedding) {
    return send_error(ctx, res,
                      bad(fmt::format("\"{}\" is an embedding model and cannot "
                                      "generate",
                                      job.model_name)));
  }
  GenerateRequest& r = job.request;
  if (raw) {
    r.prompt = prompt;
  } else {  // Ollama renders the prompt with the model's template, as a user turn
    if (!system.empty()) r.messages.push_back({"system", system, "", "", ""});
    r.messages.push_back({"user", prompt, "", "", ""});
  }
  if (auto e = apply_options(field(*body, "options"), job.model->handle.info(), r)) {
    return send_error(ctx, res, *e);
  }
  if (auto e = apply_format(field(*body, "format"), r)) return send_error(ctx, res, *e);
  if (const json* think = field(*body, "think")) {
    if (raw) return send_error(ctx, res, bad("'think' does not go with 'raw'"));
    if (auto e = apply_think(think, *job.model, r)) return send_error(ctx, res, *e);
  }
  if (ctx.opts.queue_timeout_s > 0) {
    r.deadline = Clock::now() + std::chrono::seconds(ctx.opts.queue_timeout_s);
  }
  job.chat = false;
  run_job(ctx, req, res, std::move(job));
}

// general.file_type -> Ollama's quantization_level names (llama.cpp's LLAMA_FTYPE values).
std::string file_type_name(int64_t t) {
  switch (t) {
    case 0:
      return "F32";
    case 1:
      return "F16";
    case 2:
      return "Q4_0";
    case 3:
      return "Q4_1";
    case 7:
      return "Q8_0";
    case 8:
      return "Q5_0";
    case 9:
      return "Q5_1";
    case 10:
      return "Q2_K";
    case 11:
      return "Q3_K_S";
    case 12:
      return "Q3_K_M";
    case 13:
      return "Q3_K_L";
    case 14:
      return "Q4_K_S";
    case 15:
      return "Q4_K_M";
    case 16:
      return "Q5_K_S";
    case 17:
      return "Q5_K_M";
    case 18:
      return "Q6_K";
    case 32:
      return "BF16";
    default:
      return "unknown";
  }
}

json model_details(const LoadedModel& m, const json& meta) {
  const std::string arch = m.embedding ? m.embedding->info().arch : m.handle.info().arch;
  std::string quant = "unknown";
  if (auto it = meta.find("general.file_type"); it != meta.end() && it->is_number_integer()) {
    quant = file_type_name(it->get<int64_t>());
  }
  std::string size;
  if (auto it = meta.find("general.size_label"); it != meta.end() && it->is_string()) {
    size = it->get<std::string>();
  }
  return json{{"parent_model", ""},     {"format", "gguf"},
              {"family", arch},         {"families", json::array({arch})},
              {"parameter_size", size}, {"quantization_level", quant}};
}

json model_metadata(const LoadedModel& m) {
  if (m.embedding) return json::object();
  json meta = json::parse(m.handle.metadata_json(64), nullptr, false);
  return meta.is_discarded() ? json::object() : meta;
}

json tags_entry(const LoadedModel& m) {
  const json meta = model_metadata(m);
  const uint64_t size =
      m.embedding ? m.embedding->info().weights_bytes : m.handle.info().weights_bytes;
  const std::string digest = m.embedding ? std::string() : m.handle.info().sha256;
  return json{{"name", m.id}, {"model", m.id},    {"modified_at", rfc3339(m.created)},
              {"size", size}, {"digest", digest}, {"details", model_details(m, meta)}};
}

void handle_show(const OllamaContext& ctx, const httplib::Request& req, httplib::Response& res) {
  auto body = parse(ctx, req, res);
  if (!body) return;
  if (auto e = check_keys(*body, {"model", "name", "verbose", "system", "template", "options"})) {
    return send_error(ctx, res, *e);
  }
  const json* name = field(*body, "model");
  if (name == nullptr) name = field(*body, "name");
  if (name == nullptr || !name->is_string())
    return send_error(ctx, res, bad("'model' is required"));
  OError err;
  auto m = find_or_load(ctx, name->get<std::string>(), &err);
  if (!m) return send_error(ctx, res, err);
  const json meta = model_metadata(*m);
  json out = {{"modelfile", fmt::format("# served by Power\nFROM {}\n", m->source)},
              {"parameters", ""},
              {"details", model_details(*m, meta)},
              {"model_info", meta},
              {"modified_at", rfc3339(m->created)}};
  json caps = json::array();
  if (m->embedding) {
    caps.push_back("embedding");
    out["template"] = "";
  } else {
    caps.push_back("completion");
    auto source = m->handle.chat_template_source();
    const std::string tmpl = source.ok() ? *source : std::string();
    out["template"] = tmpl;
    if (tmpl.find("tools") != std::string::npos) caps.push_back("tools");
    if (tmpl.find("enable_thinking") != std::string::npos ||
        tmpl.find("reasoning_effort") != std::string::npos) {
      caps.push_back("thinking");
    }
  }
  out["capabilities"] = caps;
  res.set_content(to_wire(out), "application/json");
}

void handle_embed(const OllamaContext& ctx, const httplib::Request& req, httplib::Response& res,
                  bool legacy) {
  auto body = parse(ctx, req, res);
  if (!body) return;
  if (legacy) {
    if (auto e = check_keys(*body, {"model", "prompt", "options", "keep_alive"})) {
      return send_error(ctx, res, *e);
    }
  } else if (auto e = check_keys(
                 *body, {"model", "input", "truncate", "options", "keep_alive", "dimensions"})) {
    return send_error(ctx, res, *e);
  }
  const auto t0 = Clock::now();
  const json* name = field(*body, "model");
  if (name == nullptr || !name->is_string())
    return send_error(ctx, res, bad("'model' is required"));
  bool unused = false;
  if (auto e = read_keep_alive(field(*body, "keep_alive"), &unused))
    return send_error(ctx, res, *e);
  if (const json* o = field(*body, "options"); o != nullptr && (!o->is_object() || !o->empty())) {
    return send_error(ctx, res,
                      bad("'options' do not apply to embeddings (pooling and context "
                          "are set when the model is loaded)"));
  }
  OError err;
  auto m = find_or_load(ctx, name->get<std::string>(), &err);
  if (!m) return send_error(ctx, res, err);
  if (!m->embedding) {
    return send_error(ctx, res,
                      bad(fmt::format("\"{}\" is not an embedding model; load a BERT "
                                      "embedding model (docs/EMBEDDINGS.md)",
                                      m->id)));
  }
  EmbedRequest er;
  int64_t dims = 0;
  if (legacy) {
    const json* p = field(*body, "prompt");
    if (p == nullptr || !p->is_string())
      return send_error(ctx, res, bad("'prompt' must be a string"));
    er.texts.push_back(p->get<std::string>());
  } else {
    const json* in = field(*body, "input");
    if (in == nullptr) return send_error(ctx, res, bad("'input' is required"));
    if (in->is_string()) {
      er.texts.push_back(in->get<std::string>());
    } else if (in->is_array() && !in->empty()) {
      for (const auto& x : *in) {
        if (!x.is_string()) return send_error(ctx, res, bad("'input' must be a string or strings"));
        er.texts.push_back(x.get<std::string>());
      }
    } else {
      return send_error(ctx, res, bad("'input' must be a string or a non-empty array of strings"));
    }
    er.truncate = true;  // Ollama's default
    if (const json* t = field(*body, "truncate")) {
      if (!t->is_boolean()) return send_error(ctx, res, bad("'truncate' must be a boolean"));
      er.truncate = t->get<bool>();
    }
    er.normalize = true;  // /api/embed returns unit vectors
    if (const json* d = field(*body, "dimensions")) {
      const int64_t n_embd = m->embedding->info().n_embd;
      if (!d->is_number_integer() || d->get<int64_t>() < 1 || d->get<int64_t>() > n_embd) {
        return send_error(ctx, res, bad(fmt::format("'dimensions' must be from 1 to {}", n_embd)));
      }
      dims = d->get<int64_t>();
    }
  }
  for (const std::string& t : er.texts) {
    if (t.empty()) return send_error(ctx, res, bad("inputs must not be empty"));
  }
  auto out = m->embedding->embed(er);
  if (!out.ok()) return send_error(ctx, res, from_status(out.status()));
  if (legacy) {
    res.set_content(to_wire(json{{"embedding", out->embeddings.at(0)}}), "application/json");
    return;
  }
  json embeddings = json::array();
  for (std::vector<float>& v : out->embeddings) {
    if (dims > 0) {  // the leading dimensions, made unit length again
      v.resize(static_cast<size_t>(dims));
      double norm = 0;
      for (float x : v) norm += static_cast<double>(x) * x;
      norm = std::sqrt(norm);
      if (norm > 0) {
        for (float& x : v) x = static_cast<float>(x / norm);
      }
    }
    embeddings.push_back(v);
  }
  json j = {{"model", m->id}, {"embeddings", embeddings}};
  j["total_duration"] =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  j["load_duration"] = 0;
  j["prompt_eval_count"] = out->prompt_tokens;
  res.set_content(to_wire(j), "application/json");
}

}  // namespace

void register_ollama_routes(httplib::Server& s, OllamaContext ctx) {
  auto c = std::make_shared<OllamaContext>(std::move(ctx));
  s.Post("/api/chat",
         [c](const httplib::Request& req, httplib::Response& res) { handle_chat(*c, req, res); });
  s.Post("/api/generate", [c](const httplib::Request& req, httplib::Response& res) {
    handle_generate(*c, req, res);
  });
  s.Get("/api/tags", [c](const httplib::Request&, httplib::Response& res) {
    json models = json::array();
    std::set<std::string> listed;
    for (const auto& m : c->registry.list()) {
      models.push_back(tags_entry(*m));
      listed.insert(m->id);
    }
#if POWER_WITH_STORE
    // The store's models too (what Ollama lists): loaded on first use.
    auto layout = c->opts.store_home.empty() ? store::StoreLayout::open_default()
                                             : store::StoreLayout::open(c->opts.store_home);
    if (layout.ok()) {
      auto entries = store::list_manifests(*layout);
      for (const store::ManifestEntry& e :
           entries.ok() ? *entries : std::vector<store::ManifestEntry>{}) {
        if (!e.manifest || listed.count(e.name) != 0) continue;
        const store::ManifestPart* part = e.manifest->part_with_role("model");
        if (part == nullptr && !e.manifest->parts.empty()) part = &e.manifest->parts.front();
        json details = {{"parent_model", ""},   {"format", e.manifest->format},
                        {"family", ""},         {"families", json::array()},
                        {"parameter_size", ""}, {"quantization_level", ""}};
        models.push_back({{"name", e.name},
                          {"model", e.name},
                          {"modified_at", e.manifest->created},
                          {"size", e.manifest->size_bytes()},
                          {"digest", part != nullptr ? store::digest_string(part->digest) : ""},
                          {"details", details}});
      }
    }
#endif
    res.set_content(to_wire(json{{"models", models}}), "application/json");
  });
  s.Post("/api/show",
         [c](const httplib::Request& req, httplib::Response& res) { handle_show(*c, req, res); });
  s.Post("/api/embed", [c](const httplib::Request& req, httplib::Response& res) {
    handle_embed(*c, req, res, /*legacy=*/false);
  });
  s.Post("/api/embeddings", [c](const httplib::Request& req, httplib::Response& res) {
    handle_embed(*c, req, res, /*legacy=*/true);
  });
  s.Get("/api/version", [](const httplib::Request&, httplib::Response& res) {
    res.set_content(to_wire(json{{"version", kOllamaApiVersion}, {"power_version", POWER_VERSION}}),
                    "application/json");
  });
}

}  // namespace power::server
