#include "server/server.h"

#include "power/sdk/registry.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "attest/ra_tls.h"
#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"
#include "server/api_keys.h"
#include "server/connection_watch.h"
#include "server/console.h"
#include "server/cors.h"
#include "server/embed_openai.h"
#include "server/generation.h"
#include "server/listeners.h"
#include "server/management.h"
#include "server/metrics.h"
#include "server/model_registry.h"
#include "server/ollama_api.h"
#include "server/onnx_http.h"
#include "server/openai_mapping.h"
#include "server/redact.h"
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
                                                "/v1/attestation",
                                                "/metrics",
                                                "/api/ps",
                                                "/api/pull",
                                                "/api/load",
                                                "/api/unload",
                                                "/api/delete",
                                                "/v1/audio/vad",
                                                "/v1/ocr",
                                                "/v1/classify",
                                                "/tokenize",
                                                "/detokenize",
                                                "/api/chat",
                                                "/api/generate",
                                                "/api/tags",
                                                "/api/show",
                                                "/api/embed",
                                                "/api/embeddings",
                                                "/api/version",
                                                "/api/receipts/key",
                                                "/api/refusals",
                                                "/"};
  if (kRoutes.count(path) != 0) return path;
  if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
  if (path.starts_with("/ui/")) return "/ui/{file}";
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

// llama-server's "timings" object, measured by the scheduler, for an answer with one choice:
// what a client needs for honest speed figures (a browser's clock cannot tell tokens that
// arrive in one read apart). prompt_n counts the prompt tokens computed (not those reused
// from the prefix cache); predicted_per_second is the decode rate after the first token.
json timings_json(const Completion& c) {
  const Timings& t = c.timings;
  return json{{"prompt_n", c.usage.prompt_tokens - c.usage.cached_prompt_tokens},
              {"prompt_ms", t.prefill_ms},
              {"prompt_per_second", t.prefill_tokens_per_s},
              {"predicted_n", c.usage.completion_tokens},
              {"predicted_ms", t.decode_ms},
              {"predicted_per_second", t.decode_tokens_per_s},
              {"queue_ms", t.queue_ms},
              {"time_to_first_token_ms", t.time_to_first_token_ms}};
}

// Power's memory split of a loaded language model (/api/ps, the console's Models view,
// --print-plan): weights are mapped from the artifact plus the kernels' packed copies, or, under
// a weights budget, the pinned part plus the staging slots of the streamed part; the KV pool,
// recurrent state (slots and the prefix cache's checkpoints) and scratch are per replica and summed
// over the replicas.
json memory_split(const ModelInfo& info) {
  const uint64_t r = static_cast<uint64_t>(info.replicas);
  const uint64_t kv = info.kv_cache_bytes * r;
  const uint64_t state = (info.recurrent_state_bytes + info.state_checkpoint_bytes) * r;
  const uint64_t scratch = info.scratch_bytes * r;
  return json{{"weights_bytes", info.weights_bytes},
              {"kv_cache_bytes", kv},
              {"state_bytes", state},
              {"scratch_bytes", scratch},
              {"size_bytes", info.weights_bytes + kv + state + scratch},
              {"replicas", info.replicas}};
}

// How often a waiting request checks that its client is still connected (docs/SERVER.md).
constexpr std::chrono::milliseconds kWatchInterval{20};

// A request that ended without ever being admitted (still queued): no queue time, no prefill.
bool never_admitted(const Completion& c) {
  return c.usage.completion_tokens == 0 && c.timings.queue_ms == 0 && c.timings.prefill_ms == 0;
}

// cpp-httplib keeps the listening socket in a protected member and runs its accept loop on
// whatever socket is there: a unix or vsock socket bound by listeners.cpp is adopted into it,
// so every kind of listener gets the library's connection handling (keep-alive, timeouts,
// TLS) unchanged.
template <class Base>
class AdoptingServer : public Base {
 public:
  using Base::Base;
  void adopt(int fd) { this->svr_sock_ = fd; }
  // The library listens on a tcp socket with a backlog of 5 (CPPHTTPLIB_LISTEN_BACKLOG, fixed
  // in the packaged library): a burst of more simultaneous connections than that overflowed
  // the accept queue and some clients were reset without an answer (32 concurrent VAD
  // callers). Listening again on the bound socket widens the queue (Linux takes a second
  // listen() as a new backlog).
  void widen_backlog(int backlog) {
    if (this->svr_sock_ != INVALID_SOCKET) ::listen(this->svr_sock_, backlog);
  }
};

// One --listen address and the accept loop serving it.
struct Listener {
  ListenAddress address;
  std::unique_ptr<httplib::Server> http;
  std::function<void(int)> adopt;          // hands a bound socket to `http`
  std::function<void(int)> widen_backlog;  // of the tcp socket `http` bound
  int adopted_fd = -1;                     // closed here if the loop never took it over
  int64_t port = 0;                        // tcp / vsock: the port bound (port 0 resolved)
  ino_t unix_inode = 0;                    // the socket file created, removed at stop if unchanged
  std::thread thread;
  std::atomic<bool> done{false};

  std::string uri() const {
    ListenAddress a = address;
    if (a.kind != ListenKind::kUnix) a.port = port;
    return a.uri();
  }
};

template <class S, class... Args>
std::unique_ptr<Listener> make_listener(const ListenAddress& address, Args&&... args) {
  auto l = std::make_unique<Listener>();
  l->address = address;
  auto http = std::make_unique<AdoptingServer<S>>(std::forward<Args>(args)...);
  AdoptingServer<S>* raw = http.get();
  l->adopt = [raw](int fd) { raw->adopt(fd); };
  l->widen_backlog = [raw](int backlog) { raw->widen_backlog(backlog); };
  l->http = std::move(http);
  return l;
}

}  // namespace

struct Server::Impl {
  ServerOptions opts;
  std::unique_ptr<Runtime> runtime;
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<onnx::Service> onnx;  // null without ONNX models
  // One cpp-httplib server per --listen address, all with the routes of register_routes().
  std::vector<std::unique_ptr<Listener>> listeners;
  ApiKeys keys;
  bool auth = false;
  // --ra-tls: the attested key and certificate every listener serves (null: off).
  std::unique_ptr<attest::RaTlsIdentity> ra_tls;
  std::mutex attestation_mu;  // one TEE report request at a time
  Metrics metrics;
  std::atomic<bool> draining{false};
  // True from start() until the models are loaded and warmed up: /health says "loading".
  std::atomic<bool> loading{true};
  std::atomic<int> bound_port{0};  // the first tcp listener's, set by start()
  std::string instance;            // X-Power-Instance, /health "instance"
  std::atomic<bool> listen_failed{false};

  // Stops every accept loop that runs and closes sockets bound but never served.
  void stop_listeners();

  std::mutex active_mu;
  std::map<uint64_t, RequestHandle> active;  // by runtime request id, for drain cancels
  uint64_t next_key = 1;

  // Counts a request turned away (power_rejections_total, /api/refusals).
  void count_refusal(const ApiError& e) {
    metrics.count_rejection(reason_for(e), e.message, e.http_status);
  }

  void send_error(httplib::Response& res, const ApiError& e) {
    count_refusal(e);
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

  std::shared_ptr<Generation> make_generation(std::shared_ptr<LoadedModel> model,
                                              std::vector<GenerateRequest> requests,
                                              std::vector<int> leader);
  // Waits for every choice, watching the client (gone: cancels them); a follower's refused
  // submit is returned.
  Status run_to_end(Generation& g, ConnectionWatch& watch);
  std::optional<ApiError> apply_template_controls(const MappedRequest& mapped,
                                                  const LoadedModel& model,
                                                  GenerateRequest& request);
  void handle_generate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  void stream_generation(Endpoint endpoint, const MappedRequest& mapped, ResponseMeta meta,
                         std::shared_ptr<Generation> gen, std::vector<std::string> echo_prefixes,
                         ConnectionWatch watch, httplib::Response& res);
  void register_routes(httplib::Server& s);
};

// Of each prompt's `group` candidates, the n with the highest mean token log-probability (in
// that order), as OpenAI's best_of; their logprobs are dropped unless the client asked.
static std::vector<Completion> best_of_n(std::vector<Completion> all, int group, int n,
                                         bool keep_logprobs) {
  std::vector<Completion> out;
  for (size_t start = 0; start < all.size(); start += static_cast<size_t>(group)) {
    std::vector<std::pair<double, size_t>> ranked;
    for (size_t i = start; i < start + static_cast<size_t>(group) && i < all.size(); ++i) {
      double sum = 0;
      for (const TokenLogprobs& lp : all[i].logprobs) sum += lp.chosen.logprob;
      const double mean = all[i].logprobs.empty()
                              ? -std::numeric_limits<double>::infinity()
                              : sum / static_cast<double>(all[i].logprobs.size());
      ranked.emplace_back(mean, i);
    }
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first > b.first; });
    for (int j = 0; j < n && j < static_cast<int>(ranked.size()); ++j) {
      Completion c = std::move(all[ranked[static_cast<size_t>(j)].second]);
      if (!keep_logprobs) c.logprobs.clear();
      out.push_back(std::move(c));
    }
  }
  return out;
}

static std::string obfuscation_pad() {
  // stream_options.include_obfuscation: random characters of random length on every delta,
  // so the sizes of encrypted chunks do not give away the tokens' lengths.
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kAlphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::string s(4 + rng() % 28, 'a');
  for (auto& c : s) c = kAlphabet[rng() % 62];
  return s;
}

std::shared_ptr<Generation> Server::Impl::make_generation(std::shared_ptr<LoadedModel> model,
                                                          std::vector<GenerateRequest> requests,
                                                          std::vector<int> leader) {
  Generation::Tracker tracker{[this](const RequestHandle& h) { return track(h); },
                              [this](uint64_t k) { untrack(k); }};
  auto g = std::make_shared<Generation>(runtime.get(), model->handle, std::move(requests),
                                        std::move(leader), std::move(tracker));
  g->on_finished = [this, model_id = model->id](const std::vector<Completion>& all,
                                                bool client_gone) {
    for (const Completion& c : all) {
      if (!c.status.ok() && c.usage.completion_tokens == 0 &&
          c.status.code() != StatusCode::kCancelled) {
        continue;
      }
      metrics.count_generation(c.usage, c.timings.time_to_first_token_ms, client_gone,
                               never_admitted(c), model_id);
    }
  };
  return g;
}

Status Server::Impl::run_to_end(Generation& g, ConnectionWatch& watch) {
  std::vector<Generation::Update> updates;
  while (!g.all_done()) {
    if (Status st = g.poll(kWatchInterval, &updates); !st.ok()) return st;
    if (!g.client_gone() && watch.peer_gone()) {
      // A client that went away cancels its requests at the next scheduler step.
      g.mark_client_gone();
      g.cancel_all();
    }
  }
  return Status();
}

std::optional<ApiError> Server::Impl::apply_template_controls(const MappedRequest& mapped,
                                                              const LoadedModel& model,
                                                              GenerateRequest& request) {
  if (mapped.reasoning_effort.empty() && mapped.verbosity.empty()) return std::nullopt;
  auto source = model.handle.chat_template_source();
  if (!source.ok()) return error_from_status(source.status());
  json kwargs = json::object();
  if (!mapped.reasoning_effort.empty()) {
    if (source->find("reasoning_effort") != std::string::npos) {
      kwargs["reasoning_effort"] = mapped.reasoning_effort;
    } else if (source->find("enable_thinking") != std::string::npos) {
      kwargs["enable_thinking"] = mapped.reasoning_effort != "none";
    } else {
      return bad_request(
          "'reasoning_effort' is not supported by this model: its chat template "
          "reads neither reasoning_effort nor enable_thinking",
          "reasoning_effort", "unsupported_value");
    }
  }
  if (!mapped.verbosity.empty()) {
    if (source->find("verbosity") == std::string::npos) {
      return bad_request(
          "'verbosity' is not supported by this model: its chat template does "
          "not read a verbosity variable",
          "verbosity", "unsupported_value");
    }
    kwargs["verbosity"] = mapped.verbosity;
  }
  request.template_kwargs_json = kwargs.dump();
  return std::nullopt;
}

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
  const MappedRequest& m = mapped.mapped;
  if (opts.log_requests && !m.user.empty()) {
    // The user id may be an e-mail address: redacted logs carry a digest that still
    // correlates one user's requests.
    POWER_LOG_INFO("request {} user={}", res.get_header_value("X-Request-ID"),
                   opts.redact_logs ? "sha256:" + sha256_hex(m.user).substr(0, 16) : m.user);
  }

  ResponseMeta meta;
  meta.id = (endpoint == Endpoint::kChatCompletions ? "chatcmpl-" : "cmpl-") + random_hex(24);
  meta.created = unix_now();
  meta.model = model->id;
  meta.service_tier = m.service_tier;
  meta.prediction = m.prediction;
  meta.legacy_functions = m.legacy_functions;
  GenerateRequest base = std::move(mapped.mapped.request);
  if (auto e = apply_template_controls(m, *model, base)) return send_error(res, *e);
  if (opts.queue_timeout_s > 0) {
    base.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(opts.queue_timeout_s);
  }
  // The choices: per prompt, n of them; the first of each prompt leads, the others follow it
  // (so they reuse its prompt KV). Each choice samples with its own seed.
  std::vector<PromptInput> prompts = m.prompts;
  if (prompts.empty()) prompts.push_back({base.prompt, base.prompt_tokens});
  if (!m.suffix.empty()) {
    // Fill-in-the-middle, as llama.cpp's infill: [BOS] FIM_PRE prompt FIM_SUF suffix FIM_MID.
    const std::vector<int32_t> fim = model->handle.fim_tokens();
    if (fim.empty()) {
      return send_error(res, bad_request("'suffix' is not supported by this model: its "
                                         "vocabulary has no fill-in-the-middle tokens",
                                         "suffix", "unsupported_value"));
    }
    const std::vector<int32_t> suffix = model->handle.tokenize(m.suffix, false);
    for (PromptInput& p : prompts) {
      std::vector<int32_t> ids = model->handle.tokenize("", true);  // BOS when the model adds one
      ids.push_back(fim[0]);
      if (p.tokens.empty()) {
        const std::vector<int32_t> t = model->handle.tokenize(p.text, false);
        ids.insert(ids.end(), t.begin(), t.end());
      } else {
        ids.insert(ids.end(), p.tokens.begin(), p.tokens.end());
      }
      ids.push_back(fim[1]);
      ids.insert(ids.end(), suffix.begin(), suffix.end());
      ids.push_back(fim[2]);
      p.tokens = std::move(ids);  // echo still shows the prompt text
    }
  }
  std::vector<GenerateRequest> requests;
  std::vector<int> leader;
  std::vector<std::string> echo_prefixes;
  // best_of above n: more candidates, ranked by mean token log-probability (so logprobs are
  // collected for them, and dropped again unless asked for).
  const int per_prompt = std::max(m.n, m.best_of);
  const bool user_logprobs = base.top_logprobs >= 0;
  if (m.best_of > 0 && !user_logprobs) base.top_logprobs = 0;
  for (const PromptInput& p : prompts) {
    const int lead = static_cast<int>(requests.size());
    for (int j = 0; j < per_prompt; ++j) {
      GenerateRequest r = base;
      if (endpoint == Endpoint::kCompletions) {
        r.prompt = p.tokens.empty() ? p.text : std::string();
        r.prompt_tokens = p.tokens;
      }
      r.sampling.seed = base.sampling.seed + static_cast<uint64_t>(j);
      leader.push_back(j == 0 ? -1 : lead);
      requests.push_back(std::move(r));
      if (m.echo) {
        std::string text = p.text;
        if (text.empty()) {
          auto t = model->handle.detokenize(p.tokens, /*render_special=*/false);
          text = t.ok() ? *t : std::string();
        }
        echo_prefixes.push_back(std::move(text));
      }
    }
  }
  auto gen = make_generation(model, std::move(requests), std::move(leader));
  auto api_error = [&](const Status& st) {
    if (auto e = context_length_error(st, endpoint, m.max_tokens_given)) return *e;
    return error_from_status(st);
  };
  // Immediate rejections (queue full, does not fit, bad token ids) are plain HTTP errors.
  if (Status st = gen->start(); !st.ok()) return send_error(res, api_error(st));
  ConnectionWatch watch(req.local_port, req.remote_addr, req.remote_port);
  if (m.stream) {
    return stream_generation(endpoint, m, std::move(meta), gen, std::move(echo_prefixes),
                             std::move(watch), res);
  }
  Status st = run_to_end(*gen, watch);
  if (st.ok()) st = gen->first_error();
  if (!st.ok()) return send_error(res, api_error(st));
  std::vector<Completion> all = gen->take_completions();
  const Usage usage = combined_usage(all, per_prompt);
  if (m.best_of > 0) {
    all = best_of_n(std::move(all), per_prompt, m.n, user_logprobs);
    if (!echo_prefixes.empty()) {  // one prefix per returned choice
      std::vector<std::string> kept;
      for (size_t i = 0; i < all.size(); ++i) {
        kept.push_back(echo_prefixes[(i / static_cast<size_t>(m.n)) * per_prompt]);
      }
      echo_prefixes = std::move(kept);
    }
  }
  json answer = endpoint == Endpoint::kChatCompletions
                    ? chat_response(meta, all, usage)
                    : completion_response(meta, all, usage, echo_prefixes);
  if (all.size() == 1) answer["timings"] = timings_json(all[0]);
  if (all.size() == 1 && !all[0].receipt.empty()) {
    // The exact signed bytes, and their digest (docs/RECEIPTS.md).
    answer["power_receipt"] = all[0].receipt;
    res.set_header("X-Power-Receipt-SHA256", sha256_hex(all[0].receipt));
  }
  send_json(res, answer);
}

void Server::Impl::stream_generation(Endpoint endpoint, const MappedRequest& mapped,
                                     ResponseMeta meta, std::shared_ptr<Generation> gen,
                                     std::vector<std::string> echo_prefixes, ConnectionWatch watch,
                                     httplib::Response& res) {
  const bool include_usage = mapped.include_usage;
  const bool obfuscate = mapped.include_obfuscation;
  const bool want_logprobs = mapped.request.top_logprobs >= 0;
  const bool tools_active = mapped.tools_active && endpoint == Endpoint::kChatCompletions;
  const bool tool_call_forced = mapped.tool_call_forced;
  const int n = mapped.n;

  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, gen, meta, endpoint, include_usage, obfuscate, want_logprobs, tools_active,
       tool_call_forced, n, echo_prefixes, watch](size_t, httplib::DataSink& sink) mutable -> bool {
        const bool chat = endpoint == Endpoint::kChatCompletions;
        auto send = [&](json payload) {
          if (obfuscate && payload.contains("choices") && !payload["choices"].empty()) {
            payload["obfuscation"] = obfuscation_pad();
          }
          std::string frame = "data: " + to_wire(payload) + "\n\n";
          if (!sink.write(frame.data(), frame.size())) {
            gen->mark_client_gone();
            gen->cancel_all();
            return false;
          }
          return true;
        };
        auto send_done = [&] {
          const std::string frame = "data: [DONE]\n\n";
          return sink.write(frame.data(), frame.size());
        };
        struct ChoiceStream {
          ToolStreamFilter filter;
          // Logprobs of tokens whose text has not gone out yet; they ride on the next chunk.
          std::vector<TokenLogprobs> carry;
          size_t text_offset = 0;  // completions: text_offset numbers on across chunks
        };
        std::vector<ChoiceStream> cs;
        for (size_t i = 0; i < gen->size(); ++i) cs.push_back({ToolStreamFilter(tool_call_forced)});
        auto take_logprobs = [&](ChoiceStream& c) -> std::optional<json> {
          if (!want_logprobs || c.carry.empty()) return std::nullopt;
          json j =
              chat ? logprobs_json(c.carry) : completion_logprobs_json(c.carry, &c.text_offset);
          c.carry.clear();
          return j;
        };
        auto send_content = [&](size_t i, const std::string& text) {
          std::optional<json> lp = take_logprobs(cs[i]);
          const json* lpp = lp ? &*lp : nullptr;
          const int idx = static_cast<int>(i);
          return send(chat ? chat_chunk(meta, idx, nullptr, &text, nullptr, include_usage, lpp)
                           : completion_chunk(meta, idx, text, nullptr, include_usage, lpp));
        };
        const std::string role = "assistant";
        const std::string empty;
        for (size_t i = 0; i < gen->size(); ++i) {
          const int idx = static_cast<int>(i);
          if (chat && !send(chat_chunk(meta, idx, &role, &empty, nullptr, include_usage))) {
            return false;
          }
          if (!chat && i < echo_prefixes.size() && !echo_prefixes[i].empty() &&
              !send(completion_chunk(meta, idx, echo_prefixes[i], nullptr, include_usage))) {
            return false;
          }
        }
        // A choice's end: held-back text, tool calls, the finish chunk.
        auto finish_choice = [&](size_t i) {
          const Completion& c = gen->completion(i);
          const int idx = static_cast<int>(i);
          if (tools_active) {
            const std::string rest = cs[i].filter.finish(c);
            if (!rest.empty() && !send_content(i, rest)) return false;
            if (!c.tool_calls.empty()) {
              std::optional<json> lp = take_logprobs(cs[i]);
              for (const json& chunk :
                   tool_call_chunks(meta, idx, c.tool_calls, include_usage, lp ? &*lp : nullptr)) {
                if (!send(chunk)) return false;
              }
            }
          }
          // Tokens whose text never went out (a matched stop string): their logprobs still do.
          if (want_logprobs && !cs[i].carry.empty() && !send_content(i, "")) return false;
          const std::string finish = finish_reason(c, meta.legacy_functions);
          return send(chat ? chat_chunk(meta, idx, nullptr, nullptr, &finish, include_usage)
                           : completion_chunk(meta, idx, "", &finish, include_usage));
        };
        std::vector<Generation::Update> updates;
        auto next_check = std::chrono::steady_clock::now() + kWatchInterval;
        while (!gen->all_done()) {
          Status st = gen->poll(kWatchInterval, &updates);
          if (st.ok() && !gen->first_error().ok()) st = gen->first_error();
          if (!st.ok()) {
            // Headers are gone already: the error travels as an event, as OpenAI does.
            gen->cancel_all();
            ApiError e = error_from_status(st);
            if (auto ce = context_length_error(st, endpoint, false)) e = *ce;
            count_refusal(e);
            if (!send(error_body(e)) || !send_done()) return false;
            sink.done();
            return true;
          }
          for (Generation::Update& u : updates) {
            ChoiceStream& c = cs[u.choice];
            for (TokenLogprobs& lp : u.logprobs) c.carry.push_back(std::move(lp));
            std::string text = tools_active ? c.filter.push(u.text) : u.text;
            if (!text.empty()) {
              if (!send_content(u.choice, text)) return false;
              next_check = std::chrono::steady_clock::now() + kWatchInterval;
            }
            if (u.finished && gen->completion(u.choice).status.ok() && !finish_choice(u.choice)) {
              return false;
            }
          }
          // Nothing written for a while (queued, prefilling, or text held back): a write
          // cannot tell whether the client is still there, the socket can.
          if (std::chrono::steady_clock::now() >= next_check) {
            if (watch.peer_gone()) {
              gen->mark_client_gone();
              gen->cancel_all();
              return false;
            }
            next_check = std::chrono::steady_clock::now() + kWatchInterval;
          }
        }
        std::vector<Completion> all = gen->take_completions();
        if (include_usage) {
          const SpeculativeUsage spec = combined_speculative(all);
          json chunk = usage_chunk(endpoint, meta, combined_usage(all, n), &spec);
          if (all.size() == 1) chunk["timings"] = timings_json(all[0]);
          if (!send(chunk)) return false;
        }
        if (all.size() == 1 && !all[0].receipt.empty() &&
            !send(json{{"object", "power.receipt"},
                       {"id", meta.id},
                       {"sha256", sha256_hex(all[0].receipt)},
                       {"receipt", all[0].receipt}})) {
          return false;
        }
        if (!send_done()) return false;
        sink.done();
        return true;
      },
      [gen](bool success) {
        // Runs when the response ends for any reason: a client that went away before the
        // stream finished cancels the generation.
        if (!success) {
          gen->mark_client_gone();
          gen->cancel_all();
        }
      });
}

void Server::Impl::register_routes(httplib::Server& s) {
  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    std::string rid = req.get_header_value("X-Request-ID");
    if (!acceptable_request_id(rid)) rid = random_hex(32);
    res.set_header("X-Request-ID", rid);
    // Which replica answered, for clients and balancers in a fleet (docs/DEPLOY.md).
    res.set_header("X-Power-Instance", instance);
    // CORS (server/cors.h): allowed origins get the headers on every answer; a preflight is
    // answered here, before authentication (browsers send it without credentials).
    const std::string origin = req.get_header_value("Origin");
    const bool cross_ok = !origin.empty() && cors_origin_allowed(opts.cors_origins, origin);
    if (cross_ok) {
      res.set_header("Access-Control-Allow-Origin", origin);
      res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", kCorsExposeHeaders);
    }
    if (req.method == "OPTIONS") {
      if (!origin.empty() && !cross_ok) {
        ApiError e;
        e.http_status = 403;
        e.message =
            fmt::format("the origin {} may not call this server (see --cors-origin)", origin);
        e.code = "origin_not_allowed";
        send_error(res, e);
        return httplib::Server::HandlerResponse::Handled;
      }
      res.status = 204;
      res.set_header("Allow", kCorsAllowMethods);
      if (cross_ok) {
        res.set_header("Access-Control-Allow-Methods", kCorsAllowMethods);
        // The headers the page asked for (the OpenAI client sends x-stainless-*), else ours.
        const std::string asked = req.get_header_value("Access-Control-Request-Headers");
        res.set_header("Access-Control-Allow-Headers", asked.empty() ? kCorsAllowHeaders : asked);
        res.set_header("Access-Control-Max-Age", kCorsMaxAge);
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    // /v1/attestation is open: a client checks the server before it trusts it with a key.
    const bool open_path = req.path == "/health" || req.path.starts_with("/health/") ||
                           req.path == "/v1/attestation" || (opts.ui && is_console_path(req.path));
    const std::string authorization = req.get_header_value("Authorization");
    if (auth && !open_path && !keys.check_header(authorization)) {
      // OpenAI's two 401s: no key at all, or a key it does not know.
      ApiError e;
      e.http_status = 401;
      if (authorization.empty()) {
        e.message =
            "You didn't provide an API key. You need to provide your API key in an "
            "Authorization header using Bearer auth (i.e. Authorization: Bearer "
            "YOUR_KEY).";
      } else {
        e.message =
            "Incorrect API key provided. The server's keys are set with "
            "--api-key-file.";
        e.code = "invalid_api_key";
      }
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, e);
      return httplib::Server::HandlerResponse::Handled;
    }
    if ((draining || loading) && !open_path) {
      ApiError e;
      e.http_status = 503;
      e.type = "server_error";
      e.message = draining ? "the server is shutting down" : "the server is loading its models";
      e.code = draining ? "draining" : "loading";
      res.set_header("Retry-After", "1");
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
        count_refusal(e);
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

  // With --redact-logs an error's message loses any text the request itself carried (a
  // quoted prompt fragment, a tool argument) before it is sent.
  s.set_post_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (opts.redact_logs && res.status >= 400 && !res.body.empty() && !req.body.empty()) {
      res.body = redact_error_body(res.body, req.body);
    }
  });

  s.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    metrics.count_request(route_label(req.path), res.status);
    // POWER_LOG=debug logs each exchange with the start of both bodies, as vLLM logs
    // prompts; --redact-logs logs their sizes only.
    if (log_level() >= LogLevel::kDebug) {
      auto preview = [this](const std::string& body) {
        if (opts.redact_logs) return redacted_size(body.size());
        std::string p = body.substr(0, 240);
        for (char& c : p) {
          if (c == '\n' || c == '\r') c = ' ';
        }
        return body.size() > p.size() ? p + "..." : p;
      };
      POWER_LOG_DEBUG("{} {} {} request {} body: {} answer: {}", req.method, req.path, res.status,
                      res.get_header_value("X-Request-ID"), preview(req.body),
                      res.body.empty() ? std::string("(streamed)") : preview(res.body));
    }
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

  // OpenAI's model object, plus what tools look for: the context length (vLLM's
  // max_model_len, llama-server's meta.n_ctx_train) and the architecture.
  auto model_json = [](const LoadedModel& m) {
    json j = {{"id", m.id}, {"object", "model"}, {"created", m.created}, {"owned_by", "power"}};
    if (m.embedding) {
      const EmbeddingModelInfo& ei = m.embedding->info();
      j["context_length"] = ei.n_ctx;
      j["max_model_len"] = ei.n_ctx;
      j["arch"] = ei.arch;
      j["kind"] = "embedding";
    } else {
      const ModelInfo& info = m.handle.info();
      j["context_length"] = info.n_ctx;
      j["max_model_len"] = info.n_ctx;
      j["arch"] = info.arch;
      j["kind"] = "generate";
      j["meta"] = {{"n_vocab", info.n_vocab},    {"n_ctx", info.n_ctx},
                   {"n_embd", info.n_embd},      {"n_layer", info.n_layer},
                   {"size", info.weights_bytes}, {"sha256", info.sha256}};
    }
    return j;
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

  // llama-server's tokenizer endpoints: POST /tokenize {"model"?, "content", "add_special"?,
  // "with_pieces"?} -> {"tokens": [ids] or [{id, piece}]}; POST /detokenize {"model"?,
  // "tokens"} -> {"content"}. "model" may be left out when one generative model is loaded.
  auto tokenizer_model =
      [this](const json& body, httplib::Response& res,
             std::initializer_list<std::string_view> known) -> std::shared_ptr<LoadedModel> {
    for (const auto& [key, value] : body.items()) {
      bool ok = false;
      for (std::string_view k : known) ok = ok || k == key;
      if (!ok) {
        send_error(res, bad_request(fmt::format("unknown field '{}'", key), key, "unknown_field"));
        return nullptr;
      }
    }
    std::string id;
    if (auto it = body.find("model"); it != body.end() && !it->is_null()) {
      if (!it->is_string()) {
        send_error(res, bad_request("'model' must be a string", "model"));
        return nullptr;
      }
      id = it->get<std::string>();
    } else {
      std::vector<std::shared_ptr<LoadedModel>> generative;
      for (const auto& m : registry->list()) {
        if (!m->embedding) generative.push_back(m);
      }
      if (generative.size() != 1) {
        send_error(res, bad_request("'model' is required when the server has not exactly one "
                                    "generative model loaded",
                                    "model"));
        return nullptr;
      }
      return generative[0];
    }
    auto m = find_model(id, res);
    if (m && m->embedding) {
      send_error(res, bad_request("the tokenizer endpoints serve generative models", "model",
                                  "model_not_generative"));
      return nullptr;
    }
    return m;
  };
  s.Post("/tokenize", [this, tokenizer_model](const httplib::Request& req, httplib::Response& res) {
    auto body = parse_body(req, res);
    if (!body) return;
    auto m = tokenizer_model(*body, res,
                             {"model", "content", "add_special", "with_pieces", "parse_special"});
    if (!m) return;
    auto content = body->find("content");
    if (content == body->end() || !content->is_string()) {
      return send_error(res, bad_request("'content' must be a string", "content"));
    }
    bool add_special = false, with_pieces = false;
    for (auto [name, out] :
         {std::pair{"add_special", &add_special}, std::pair{"with_pieces", &with_pieces}}) {
      if (auto it = body->find(name); it != body->end() && !it->is_null()) {
        if (!it->is_boolean()) {
          return send_error(res, bad_request(fmt::format("'{}' must be a boolean", name), name));
        }
        *out = it->get<bool>();
      }
    }
    if (auto it = body->find("parse_special"); it != body->end() && !it->is_null()) {
      // Power's tokenizer always turns special-token text into the special token.
      if (!it->is_boolean() || !it->get<bool>()) {
        return send_error(res, bad_request("'parse_special' can only be true: special-token "
                                           "text is always parsed as the special token",
                                           "parse_special", "unsupported_value"));
      }
    }
    std::vector<int32_t> ids = m->handle.tokenize(content->get<std::string>(), add_special);
    json tokens = json::array();
    for (int32_t id : ids) {
      if (with_pieces) {
        tokens.push_back({{"id", id}, {"piece", m->handle.token_piece(id)}});
      } else {
        tokens.push_back(id);
      }
    }
    send_json(res, json{{"tokens", tokens}});
  });
  s.Post(
      "/detokenize", [this, tokenizer_model](const httplib::Request& req, httplib::Response& res) {
        auto body = parse_body(req, res);
        if (!body) return;
        auto m = tokenizer_model(*body, res, {"model", "tokens"});
        if (!m) return;
        auto tokens = body->find("tokens");
        if (tokens == body->end() || !tokens->is_array()) {
          return send_error(res, bad_request("'tokens' must be an array of token ids", "tokens"));
        }
        std::vector<int32_t> ids;
        const int64_t n_vocab = m->handle.info().n_vocab;
        for (size_t i = 0; i < tokens->size(); ++i) {
          const json& t = (*tokens)[i];
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= n_vocab) {
            return send_error(res, bad_request(fmt::format("'tokens[{}]' is not a token id of this "
                                                           "model (0..{})",
                                                           i, n_vocab - 1),
                                               fmt::format("tokens[{}]", i)));
          }
          ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
        auto text = m->handle.detokenize(ids, /*render_special=*/true);
        if (!text.ok()) return send_error(res, error_from_status(text.status()));
        send_json(res, json{{"content", *text}});
      });

  // Not ready while loading, from the first moment of a drain, or with nothing to serve.
  auto health_status = [this]() -> const char* {
    if (draining) return "draining";
    if (loading) return "loading";
    if (registry->list().empty() && !onnx) return "no_models";
    return "ok";
  };
  // Fresh TEE evidence bound to the TLS key and the client's nonce (attest/ra_tls.h).
  s.Get("/v1/attestation", [this](const httplib::Request& req, httplib::Response& res) {
    if (!ra_tls) {
      ApiError e;
      e.http_status = 404;
      e.message = "this server does not serve RA-TLS (power serve --ra-tls)";
      e.code = "attestation_unavailable";
      return send_error(res, e);
    }
    auto nonce = attest::parse_ra_tls_nonce(req.get_param_value("nonce"));
    if (!nonce.ok()) {
      return send_error(res, bad_request(nonce.status().message(), "nonce", "invalid_nonce"));
    }
    std::lock_guard<std::mutex> lk(attestation_mu);
    auto body = ra_tls->fresh_evidence(*nonce);
    if (!body.ok()) {
      ApiError e;
      e.http_status = 500;
      e.type = "server_error";
      e.message = "cannot obtain attestation evidence: " + body.status().message();
      e.code = "attestation_failed";
      return send_error(res, e);
    }
    send_json(res, *body);
  });

  s.Get("/health/live", [this](const httplib::Request&, httplib::Response& res) {
    send_json(res, json{{"status", "ok"}});
  });
  s.Get("/health/ready", [this, health_status](const httplib::Request&, httplib::Response& res) {
    const std::string status = health_status();
    send_json(res, json{{"status", status}}, status == "ok" ? 200 : 503);
  });
  s.Get("/health", [this, health_status](const httplib::Request&, httplib::Response& res) {
    const std::string status = health_status();
    const bool ok = status == "ok";
    send_json(res,
              json{{"status", status},
                   {"live", true},
                   {"ready", ok},
                   {"instance", instance},
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
        const ModelInfo& info = m->handle.info();
        // A recurrent model holds one state slot per running sequence, max_running per replica.
        const int64_t slots =
            info.recurrent_state_bytes > 0 ? int64_t{opts.load.max_running} * info.replicas : 0;
        gauges.push_back({m->id, m->handle.stats(), info.kv_block_tokens, slots,
                          info.weights_pinned_bytes, info.weights_streamed_bytes,
                          info.weights_staging_bytes, info.weights_mirror_bytes,
                          info.weights_locked_bytes});
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
      json entry = memory_split(info);
      const uint64_t size = entry["size_bytes"].get<uint64_t>();
      // Weights residency (docs/RESIDENCY.md): the plan and what streaming has cost so far.
      const RuntimeStats stats = m->handle.stats();
      const bool streams = info.weights_streamed_bytes > 0;
      entry["weights"] = json{
          {"plan_sha256", info.residency_digest},
          {"total_bytes", info.weights_total_bytes},
          {"pinned_bytes", info.weights_pinned_bytes},
          {"locked_bytes", info.weights_locked_bytes},
          {"streamed_bytes", info.weights_streamed_bytes},
          {"staging_bytes", info.weights_staging_bytes},
          {"read_bytes", stats.weights_read_bytes},
          {"group_reads", stats.weights_loads},
          {"prefetch_used", stats.weights_prefetch_useful},
          {"prefetch_unused", stats.weights_prefetch_unused},
          {"io_wait_ms", static_cast<double>(stats.weights_wait_ns) / 1e6},
          {"read_errors", stats.weights_read_errors},
          // Artifact + mirror bytes per token the passes computed (a pass
          // of n tokens reads the streamed weights once).
          {"read_bytes_per_token",
           stats.step_tokens == 0
               ? 0.0
               : static_cast<double>(stats.weights_read_bytes + stats.weights_mirror_bytes_read) /
                     static_cast<double>(stats.step_tokens)},
          {"mirror", info.weights_mirror_dir.empty()
                         ? json(nullptr)
                         : json{{"dir", info.weights_mirror_dir},
                                {"bytes", info.weights_mirror_bytes},
                                {"group_reads", stats.weights_mirror_loads},
                                {"read_bytes", stats.weights_mirror_bytes_read},
                                {"fallbacks", stats.weights_mirror_fallbacks}}},
          {"cache", stats.weights_cache_capacity_bytes == 0
                        ? json(nullptr)
                        : json{{"hits", stats.weights_cache_hits},
                               {"misses", stats.weights_cache_misses},
                               {"read_bytes", stats.weights_cache_read_bytes},
                               {"bytes", stats.weights_cache_bytes},
                               {"capacity_bytes", stats.weights_cache_capacity_bytes},
                               {"evictions", stats.weights_cache_evictions},
                               {"rejected", stats.weights_cache_rejected}}}};
      entry.update(json{
          {"name", m->id},
          {"model", m->source},
          {"digest", "sha256:" + info.sha256},
          {"residency", streams ? "streamed" : "mmap"},
          {"arch", info.arch},
          // Ollama's fields beside Power's.
          {"size", size},
          {"size_vram", 0},
          {"context_length", info.n_ctx},
          {"details",
           {{"format", "gguf"}, {"family", info.arch}, {"families", json::array({info.arch})}}},
          {"expires_at", "never"}});
      models.push_back(std::move(entry));
    }
    send_json(res, json{{"models", models}});
  });
  // The receipt key, so that a browser (the console) or a script can check receipts without
  // `power key show` on this machine.
  s.Get("/api/receipts/key", [this](const httplib::Request&, httplib::Response& res) {
    auto key = runtime->receipt_public_key_hex();
    if (!key.ok()) {
      ApiError e = error_from_status(key.status());
      e.http_status = 503;
      e.type = "server_error";
      e.code = "no_receipt_key";
      return send_error(res, e);
    }
    send_json(res, json{{"alg", "Ed25519"}, {"public_key", *key}});
  });
  // The latest requests turned away, with their reasons (the counts are in /metrics).
  s.Get("/api/refusals", [this](const httplib::Request&, httplib::Response& res) {
    json list = json::array();
    for (const auto& r : metrics.recent_rejections()) {
      list.push_back(json{{"time_ms", r.unix_ms},
                          {"reason", r.reason},
                          {"status", r.http_status},
                          {"message", r.message}});
    }
    send_json(res, json{{"refusals", list}});
  });
  if (opts.ui) register_console_routes(s);
  register_onnx_routes(s, OnnxHttpContext{onnx.get(), opts.queue_timeout_s,
                                          [this](httplib::Response& res, const ApiError& e) {
                                            send_error(res, e);
                                          }});
  register_ollama_routes(
      s, OllamaContext{opts, *registry,
                       [this](std::shared_ptr<LoadedModel> m, std::vector<GenerateRequest> r,
                              std::vector<int> leader) {
                         return make_generation(std::move(m), std::move(r), std::move(leader));
                       },
                       [this](const std::string& reason, const std::string& message, int status) {
                         metrics.count_rejection(reason, message, status);
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
  std::vector<ListenAddress> addresses;
  if (o.listen.empty()) {
    ListenAddress a;
    a.host = o.host;
    a.port = o.port;
    addresses.push_back(a);
  }
  for (const auto& text : o.listen) {
    POWER_ASSIGN_OR_RETURN(ListenAddress a, parse_listen_address(text));
    for (const auto& b : addresses) {
      if (b.uri() == a.uri() && (a.kind == ListenKind::kUnix || a.port != 0)) {
        return Status(StatusCode::kInvalidArgument, "--listen names the same address twice")
            .with("listen", text);
      }
    }
    addresses.push_back(std::move(a));
  }
  if (!o.ra_tls.empty()) {
    if (!o.tls_cert.empty()) {
      return Status(
          StatusCode::kInvalidArgument,
          "--ra-tls makes its own attested key and certificate: drop --tls-cert/--tls-key");
    }
    POWER_ASSIGN_OR_RETURN(attest::RaTlsMode mode, attest::parse_ra_tls_mode(o.ra_tls));
    attest::RaTlsOptions ra;
    ra.tee.snp_vcek_file = o.ra_tls_vcek_file;
    auto identity = attest::RaTlsIdentity::create(mode, ra);
    if (!identity.ok()) {
      Status st = identity.status();
      return Status(st.code(), "--ra-tls: " + st.message());
    }
    impl->ra_tls = std::make_unique<attest::RaTlsIdentity>(std::move(*identity));
  }
  for (const auto& a : addresses) {
    std::unique_ptr<Listener> l;
    if (impl->ra_tls) {
      l = make_listener<httplib::SSLServer>(a, impl->ra_tls->certificate(),
                                            impl->ra_tls->private_key());
      if (!l->http->is_valid()) {
        return Status(StatusCode::kInternal, "cannot serve the RA-TLS certificate");
      }
    } else if (!o.tls_cert.empty()) {
      l = make_listener<httplib::SSLServer>(a, o.tls_cert.c_str(), o.tls_key.c_str());
      if (!l->http->is_valid()) {
        return Status(StatusCode::kInvalidArgument, "cannot load the TLS certificate and key")
            .with("cert", o.tls_cert)
            .with("key", o.tls_key);
      }
    } else {
      l = make_listener<httplib::Server>(a);
    }
    impl->listeners.push_back(std::move(l));
  }
  RuntimeOptions ro;
  ro.weights_cache = o.weights_cache;
  ro.weights_cache_policy = o.weights_cache_policy;
  POWER_ASSIGN_OR_RETURN(impl->runtime, Runtime::create(ro));
  impl->registry = std::make_unique<ModelRegistry>(impl->runtime.get(), o.load, o.resolve_model);
  if (o.onnx.any()) {
    POWER_ASSIGN_OR_RETURN(impl->onnx, onnx::Service::create(o.onnx, o.resolve_model));
  }
  const int threads = std::max(4, o.http_threads);
  for (auto& l : impl->listeners) {
    httplib::Server& s = *l->http;
    s.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    s.set_payload_max_length(o.max_body_bytes);
    s.set_read_timeout(o.read_timeout_s, 0);
    s.set_write_timeout(o.write_timeout_s, 0);
    s.set_keep_alive_timeout(o.keep_alive_timeout_s);
    s.set_keep_alive_max_count(100000);
    s.set_tcp_nodelay(true);
    // cpp-httplib's default is SO_REUSEPORT, which lets a second server bind a port already
    // listened on and silently take half its connections: SO_REUSEADDR only (a restart can
    // still rebind over TIME_WAIT), so a taken port is an error.
    s.set_socket_options([](int fd) {
      int yes = 1;
      setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });
    // shutdown() of a listening vsock socket does not wake a blocked accept(): poll it, so
    // that stop() (which invalidates the socket) ends the loop within this interval.
    if (l->address.kind == ListenKind::kVsock) s.set_idle_interval(0, 100000);
    impl->register_routes(s);
  }
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() {
  if (impl_) impl_->stop_listeners();
}

void Server::Impl::stop_listeners() {
  for (auto& l : listeners) {
    if (l->thread.joinable()) {
      l->http->stop();
      l->thread.join();
    } else if (l->adopted_fd >= 0) {
      close(l->adopted_fd);
    }
    l->adopted_fd = -1;
    if (l->address.kind == ListenKind::kUnix && l->unix_inode != 0) {
      // Remove the socket file we created, not one a later server put at the same path.
      struct stat st {};
      if (lstat(l->address.path.c_str(), &st) == 0 && st.st_ino == l->unix_inode) {
        unlink(l->address.path.c_str());
      }
      l->unix_inode = 0;
    }
  }
}

namespace {

// One greedy token from a short prompt on every replica of `model`: maps and touches the
// weights, starts the compute threads and sizes the workspace before the first user request.
Status warm_up(Runtime& runtime, const LoadedModel& model) {
  if (model.embedding) return Status();
  std::vector<RequestHandle> handles;
  for (int r = 0; r < std::max(1, model.handle.info().replicas); ++r) {
    GenerateRequest req;
    req.prompt = "Hello";
    req.max_tokens = 1;
    req.sampling.temperature = 0;
    auto h = runtime.submit(model.handle, std::move(req));
    if (!h.ok()) return h.status();
    handles.push_back(std::move(*h));
  }
  for (auto& h : handles) {
    Completion c = h.wait();
    if (!c.status.ok()) return c.status;
  }
  return Status();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

}  // namespace

Status Server::start() {
  Impl& im = *impl_;
  const ServerOptions& o = im.opts;
  auto fail = [&im](Status st) {
    im.stop_listeners();
    return st;
  };
  // Bind every address before serving any, so a taken port fails start-up as a whole.
  for (auto& l : im.listeners) {
    const ListenAddress& a = l->address;
    if (a.kind == ListenKind::kTcp) {
      l->port = a.port == 0 ? l->http->bind_to_any_port(a.host)
                            : (l->http->bind_to_port(a.host, a.port) ? a.port : -1);
      if (l->port <= 0) {
        return fail(Status(StatusCode::kIo, "cannot listen on the address")
                        .with("host", a.host)
                        .with("port", a.port));
      }
      l->widen_backlog(512);  // as bind_listen_socket's default for the other kinds
      continue;
    }
    auto fd = bind_listen_socket(a);
    if (!fd.ok()) return fail(fd.status());
    l->adopted_fd = *fd;
    l->adopt(*fd);
    if (a.kind == ListenKind::kVsock) l->port = vsock_bound_port(*fd);
    if (a.kind == ListenKind::kUnix) {
      struct stat st {};
      if (lstat(a.path.c_str(), &st) == 0) l->unix_inode = st.st_ino;
    }
  }
  int port = 0;
  for (const auto& l : im.listeners) {
    if (l->address.kind == ListenKind::kTcp) {
      port = static_cast<int>(l->port);
      break;
    }
  }
  im.bound_port = port;
  im.instance = !o.instance_id.empty() ? o.instance_id
                : port > 0             ? fmt::format("{}:{}", host_name(), port)
                           : fmt::format("{} {}", host_name(), im.listeners.front()->uri());
  // Serve /health (status "loading") while the models load, so probes see a live process.
  for (auto& l : im.listeners) {
    Listener* raw = l.get();
    raw->thread = std::thread([&im, raw] {
      if (!raw->http->listen_after_bind() && !im.draining) im.listen_failed = true;
      raw->done = true;
    });
    // httplib's stop() only ends an accept loop that has started: wait for it, so that a
    // failed load or an early shutdown() cannot leave the loop running.
    while (!raw->http->is_running() && !raw->done) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    raw->adopted_fd = -1;  // the loop owns it now: stop() closes it
  }
  for (const auto& lib : o.model_libs) {
    if (Status st = sdk::load_model_library(lib); !st.ok()) return fail(std::move(st));
  }
  for (const auto& m : o.models) {
    auto loaded = im.registry->load(m);
    if (!loaded.ok()) {
      Status st = loaded.status();
      return fail(std::move(st).with("model", m));
    }
    if (o.warmup) {
      if (Status st = warm_up(*im.runtime, **loaded); !st.ok()) {
        return fail(
            Status(st.code(), "warm-up generation failed: " + st.message()).with("model", m));
      }
    }
  }
  im.loading = false;
  return Status();
}

Result<json> memory_plan(const ServerOptions& options) {
  for (const auto& lib : options.model_libs) {
    POWER_RETURN_IF_ERROR(sdk::load_model_library(lib));
  }
  RuntimeOptions ro;
  ro.weights_cache = options.weights_cache;
  ro.weights_cache_policy = options.weights_cache_policy;
  POWER_ASSIGN_OR_RETURN(auto runtime, Runtime::create(ro));
  ModelRegistry registry(runtime.get(), options.load, options.resolve_model);
  json models = json::array();
  uint64_t total = 0;
  for (const auto& m : options.models) {
    auto loaded = registry.load(m);
    if (!loaded.ok()) {
      Status st = loaded.status();
      return std::move(st).with("model", m);
    }
    const LoadedModel& lm = **loaded;
    json entry;
    if (lm.embedding) {
      const EmbeddingModelInfo& ei = lm.embedding->info();
      entry = json{{"weights_bytes", ei.weights_bytes},
                   {"kv_cache_bytes", 0},
                   {"state_bytes", 0},
                   {"scratch_bytes", ei.workspace_bytes},
                   {"size_bytes", ei.weights_bytes + ei.workspace_bytes},
                   {"replicas", 1}};
    } else {
      entry = memory_split(lm.handle.info());
      entry["n_ctx"] = lm.handle.info().n_ctx;
    }
    entry["name"] = lm.id;
    total += entry["size_bytes"].get<uint64_t>();
    models.push_back(std::move(entry));
  }
  json plan = {{"models", models}, {"total_bytes", total}};
  if (models.size() == 1) {
    const json& only = models[0];
    plan["helm_memory_plan"] = {{"weightsBytes", only["weights_bytes"]},
                                {"kvCacheBytes", only["kv_cache_bytes"]},
                                {"stateBytes", only["state_bytes"]},
                                {"scratchBytes", only["scratch_bytes"]}};
  }
  return plan;
}

int Server::port() const {
  return impl_->bound_port;
}
std::vector<std::string> Server::listening() const {
  std::vector<std::string> out;
  for (const auto& l : impl_->listeners) out.push_back(l->uri());
  return out;
}
bool Server::tls() const {
  return !impl_->opts.tls_cert.empty() || impl_->ra_tls != nullptr;
}

Status Server::wait() {
  for (auto& l : impl_->listeners) {
    if (l->thread.joinable()) l->thread.join();
  }
  impl_->stop_listeners();  // removes unix socket files
  if (impl_->listen_failed) return Status(StatusCode::kIo, "the HTTP server stopped unexpectedly");
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
  for (auto& l : im.listeners) l->http->stop();
}

}  // namespace power::server
