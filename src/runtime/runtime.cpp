// Runtime: loaded models, each with its KV pool, workspace, scheduler and worker thread, and
// the per-request work around the scheduler (tokenizing, sampling state, stop conditions,
// streaming text, timings).
#include "power/runtime.h"
#include "host/text.h"

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <future>
#include <mutex>
#include <thread>
#include <unordered_map>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/sha256.h"
#include "chat/chat_template.h"
#include "device/weights_cache.h"
#include "engine/generate.h"
#include "engine/sampler.h"
#include "format/gguf.h"
#include "format/tensor_manifest.h"
#include "host/model.h"
#include "kernels/cpu/isa.h"
#include "receipt/receipt.h"
#include "receipt/signing_key.h"
#include "runtime/model_file.h"
#include "runtime/model_runner.h"
#include "runtime/scheduler.h"
#include "runtime/speculative_step.h"
#include "runtime/structured.h"
#include "text/tokenizer.h"

namespace power {

using runtime::Clock;
using runtime::SeqEvent;

struct RequestState {
  uint64_t id = 0;
  GenerateRequest req;
  std::unique_ptr<Sampler> sampler;
  std::unique_ptr<text::StreamingDetokenizer> detok;
  std::string pending;  // decoded, not yet emitted (could begin a stop string)
  Completion result;
  Clock::time_point t_submit, t_admit, t_first;
  bool admitted = false, got_first = false, cancel_requested = false;
  std::weak_ptr<ModelSlot> slot;
  runtime::StructuredState structured;  // response_format, logprobs, tools
  // Speculative decoding state (null: plain decoding); freed on the worker when the
  // request ends (its draft KV lives in the replica's pool).
  std::unique_ptr<runtime::SpecSequence> spec;
  // Receipt: everything known at submit (schema, model, config, device, input); output and
  // timings are added and the whole signed when the request ends.
  std::shared_ptr<const receipt::SigningKey> receipt_key;
  nlohmann::json receipt_body;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

struct ModelSlot {
  ModelInfo info;
  std::shared_ptr<const GgufFile> file;
  std::shared_ptr<const Model> model;  // shared by the replicas (read-only)
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::unique_ptr<Workspace> ws;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<RecurrentState> recurrent;  // models with recurrent layers: max_running slots
  std::unique_ptr<runtime::Scheduler> sched;  // after kv and recurrent: destroyed before them
  std::unique_ptr<runtime::ModelRunner> runner;
  std::optional<chat::ChatTemplate> chat;
  // Speculative decoding: the load's default, the draft model (shared by the replicas) and
  // this replica's draft workspace and KV pool; counters guarded by mu.
  spec::Config spec_default;
  std::shared_ptr<const Model> draft_model;
  std::unique_ptr<Workspace> draft_ws;
  std::unique_ptr<KvCache> draft_kv;
  // The target's MTP head (when the file has one; shared) and this replica's MTP workspace
  // and KV pool (one layer, max_running contexts).
  std::shared_ptr<const Model> mtp;
  std::unique_ptr<Workspace> mtp_ws;
  std::unique_ptr<KvCache> mtp_kv;
  runtime::SpecCounters spec_totals;
  // Receipt facts of the loaded model, shared by the replicas; the tensor digest is computed
  // on the first receipt, from the cached per-tensor manifest or by reading every weight once.
  struct ReceiptModel {
    std::once_flag once;
    nlohmann::json json;
    std::string tensor_manifest_dir;  // "" for no cache
  };
  std::shared_ptr<ReceiptModel> receipt_model;
  bool threads_fixed = false;             // LoadOptions::threads > 0
  std::string spec_default_mode = "off";  // LoadOptions::speculative.mode
  std::string draft_model_name;           // LoadOptions::draft_model's file name
  std::string kv_type;
  bool prefix_reuse = true;

  std::mutex mu;  // guards sched, requests, chat, stopping, steps, preemptions
  std::condition_variable cv;
  bool stopping = false;
  uint64_t steps = 0;
  uint64_t step_tokens = 0;      // tokens those passes computed
  uint64_t preemptions = 0;      // running sequences sent back to the queue for higher priority
  uint64_t committed_bytes = 0;  // what this replica added to Runtime::committed_bytes_
  uint64_t next_id = 1;
  std::unordered_map<uint64_t, std::shared_ptr<RequestState>> requests;
  std::thread worker;

  void stop() {
    {
      std::lock_guard<std::mutex> lk(mu);
      stopping = true;
    }
    cv.notify_all();
    if (worker.joinable()) worker.join();
  }
  ~ModelSlot() { stop(); }
  void run_worker();
};

namespace {

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Ends a request: fills timings, calls on_done, wakes waiters.
void complete(RequestState& r, Finish finish, Status status) {
  {
    std::lock_guard<std::mutex> lk(r.mu);
    if (r.done) return;
  }
  const auto now = Clock::now();
  Completion& c = r.result;
  c.finish = finish;
  c.status = std::move(status);
  c.usage.completion_tokens = static_cast<int64_t>(c.tokens.size());
  runtime::finish_usage(c.speculative, c.usage.completion_tokens);
  runtime::finish_structured(r.structured, c);
  Timings& t = c.timings;
  if (r.admitted) t.queue_ms = ms_between(r.t_submit, r.t_admit);
  if (r.got_first) {
    t.time_to_first_token_ms = ms_between(r.t_submit, r.t_first);
    t.prefill_ms = ms_between(r.t_admit, r.t_first);
    t.decode_ms = ms_between(r.t_first, now);
    const int64_t computed = c.usage.prompt_tokens - c.usage.cached_prompt_tokens;
    if (t.prefill_ms > 0) t.prefill_tokens_per_s = computed / (t.prefill_ms / 1000.0);
    if (t.decode_ms > 0 && c.tokens.size() > 1) {
      t.decode_tokens_per_s = static_cast<double>(c.tokens.size() - 1) / (t.decode_ms / 1000.0);
    }
  } else if (r.admitted) {
    t.prefill_ms = ms_between(r.t_admit, now);
  }
  if (r.receipt_key) {
    nlohmann::json body = std::move(r.receipt_body);
    body["output"] = receipt::output_json(c);
    body["timings"] = receipt::timings_json(c.timings);
    auto signed_receipt = receipt::sign_receipt(std::move(body), *r.receipt_key);
    if (signed_receipt.ok()) {
      c.receipt = std::move(*signed_receipt);
    } else {
      POWER_LOG_ERROR("cannot sign the receipt of request {}: {}", r.id,
                      signed_receipt.status().to_string());
    }
  }
  if (r.req.on_done) r.req.on_done(c);
  {
    std::lock_guard<std::mutex> lk(r.mu);
    r.done = true;
  }
  r.cv.notify_all();
}

// Streams text; false when the caller's callback asked to stop.
bool emit(RequestState& r, int32_t token, std::string_view text) {
  r.result.text.append(text);
  if (!r.req.on_stream) return true;
  StreamEvent ev{token, text};
  if (token >= 0 && r.req.top_logprobs >= 0 && !r.result.logprobs.empty() &&
      r.result.logprobs.back().chosen.token == token) {
    ev.logprobs = &r.result.logprobs.back();
  }
  return r.req.on_stream(ev);
}

// Flushes held text at the end of a request.
void flush(RequestState& r) {
  r.detok->finish(r.pending);
  if (!r.pending.empty()) emit(r, -1, r.pending);
  r.pending.clear();
}

// A committed token: end-of-generation, detokenize, stop strings, stream. Returns true when
// the request ended here (the caller then frees its sequence).
bool on_token(const text::Tokenizer& tok, RequestState& r, int32_t token) {
  if (!r.got_first) {
    r.got_first = true;
    r.t_first = Clock::now();
  }
  r.result.tokens.push_back(token);
  runtime::collect_logprobs(tok, *r.sampler, token, r.result);
  if (r.sampler->grammar_failed()) {
    flush(r);
    complete(r, Finish::kError,
             Status(StatusCode::kInternal, "no token can continue the response_format grammar"));
    return true;
  }
  if (!r.req.ignore_eos && tok.is_eog(token)) {
    flush(r);
    complete(r, Finish::kStop, Status());
    return true;
  }
  Status st = r.detok->push(token, r.pending);
  if (!st.ok()) {
    complete(r, Finish::kError, std::move(st));
    return true;
  }
  StopScan scan = scan_stop_strings(r.pending, r.req.stop);
  if (scan.match != std::string::npos) {
    emit(r, token, std::string_view(r.pending).substr(0, scan.match));
    r.pending.clear();
    complete(r, Finish::kStop, Status());
    return true;
  }
  const size_t n = r.pending.size() - scan.hold;
  const bool go_on = emit(r, token, std::string_view(r.pending).substr(0, n));
  r.pending.erase(0, n);
  if (!go_on) {
    complete(r, Finish::kCancelled, Status(StatusCode::kCancelled, "cancelled by the caller"));
    return true;
  }
  return false;
}

}  // namespace

void ModelSlot::run_worker() {
  std::unique_lock<std::mutex> lk(mu);
  std::vector<std::pair<SeqEvent, std::shared_ptr<RequestState>>> todo;
  auto collect = [&](std::vector<SeqEvent>&& events) {
    const Clock::time_point now = Clock::now();
    for (SeqEvent& e : events) {
      auto it = requests.find(e.id);
      if (it == requests.end()) continue;
      if (e.kind == SeqEvent::Kind::kPreempted) ++preemptions;
      // An admission is stamped when it is planned, before the pass that prefills it runs
      // (process() sees the event only after that pass).
      if (e.kind == SeqEvent::Kind::kAdmitted && !e.resumed) it->second->t_admit = now;
      todo.emplace_back(std::move(e), it->second);
    }
  };
  auto process = [&]() {
    std::vector<uint64_t> ended;
    for (auto& [e, r] : todo) {
      if (r->done) continue;
      switch (e.kind) {
        case SeqEvent::Kind::kAdmitted:
          if (!e.resumed) {
            r->admitted = true;  // t_admit was stamped by collect()
            r->result.usage.cached_prompt_tokens = e.cached_tokens;
          }
          break;
        case SeqEvent::Kind::kPreempted:
          break;
        case SeqEvent::Kind::kToken:
          if (on_token(*tokenizer, *r, e.token)) ended.push_back(e.id);
          break;
        case SeqEvent::Kind::kFinished:
          ended.push_back(e.id);
          if (e.end == runtime::SeqEnd::kLength) {
            flush(*r);
            complete(*r, Finish::kLength, Status());
          } else if (e.end == runtime::SeqEnd::kCancelled) {
            complete(*r, Finish::kCancelled, std::move(e.status));
          } else {
            complete(*r, Finish::kError, std::move(e.status));
          }
          break;
      }
    }
    todo.clear();
    lk.lock();
    for (uint64_t id : ended) {
      sched->finish(id);
      auto it = requests.find(id);
      if (it != requests.end()) {
        it->second->spec.reset();  // its draft KV goes back to this replica's pool
        requests.erase(it);
      }
    }
  };
  while (!stopping) {
    if (!sched || !sched->has_work()) {  // sched is set once load() has planned the replica
      cv.wait(lk, [&] { return stopping || (sched && sched->has_work()); });
      continue;
    }
    runtime::StepPlan plan = sched->plan(Clock::now());
    collect(std::move(plan.events));
    lk.unlock();
    if (plan.items.empty()) {
      process();
      // Waiting work that cannot start yet: sleep until a deadline or a change.
      if (sched->has_work() && !stopping) {
        auto until = Clock::now() + std::chrono::milliseconds(20);
        if (auto d = sched->next_deadline(); d && *d < until) until = *d;
        cv.wait_until(lk, until);
      }
      continue;
    }
    std::vector<int32_t> next(plan.items.size(), -1);
    std::vector<int32_t> accepted(plan.items.size(), 0);
    Status st = runner->run_speculative(plan.items, next, accepted);
    lk.lock();
    ++steps;
    for (const runtime::BatchItem& it : plan.items) step_tokens += it.tokens.size();
    for (const runtime::BatchItem& it : plan.items) {
      auto r = requests.find(it.id);
      if (it.wants_token && st.ok() && r != requests.end()) {
        ++r->second->result.speculative.target_passes;
      }
    }
    collect(sched->commit(plan, next, st, accepted));
    lk.unlock();
    process();
  }
  // Shutting down: end whatever is left.
  std::vector<std::shared_ptr<RequestState>> left;
  for (auto& [id, r] : requests) {
    r->spec.reset();
    left.push_back(r);
  }
  requests.clear();
  lk.unlock();
  for (auto& r : left) {
    complete(*r, Finish::kCancelled, Status(StatusCode::kCancelled, "the runtime shut down"));
  }
}

const ModelInfo& ModelHandle::info() const {
  return slots_.front()->info;
}

std::vector<int32_t> ModelHandle::tokenize(std::string_view text, bool add_bos) const {
  text::EncodeOptions eo;
  eo.add_special = add_bos;
  eo.parse_special = true;
  return slots_.front()->tokenizer->encode(text, eo);
}

Result<std::string> ModelHandle::detokenize(std::span<const int32_t> ids,
                                            bool render_special) const {
  const text::Tokenizer& tok = *slots_.front()->tokenizer;
  for (int32_t id : ids) {
    if (!tok.is_valid(id)) {
      return Status(StatusCode::kInvalidArgument, "token id out of range")
          .with("token", id)
          .with("n_vocab", tok.n_tokens());
    }
  }
  text::DecodeOptions o;
  o.render_special = render_special;
  return tok.decode(ids, o);
}

std::string ModelHandle::token_piece(int32_t id) const {
  const text::Tokenizer& tok = *slots_.front()->tokenizer;
  if (!tok.is_valid(id)) return {};
  return tok.token_to_piece(id, /*render_special=*/true);
}

std::vector<int32_t> ModelHandle::fim_tokens() const {
  const text::SpecialTokens& sp = slots_.front()->tokenizer->special();
  if (sp.fim_pre == text::kNoToken || sp.fim_suf == text::kNoToken ||
      sp.fim_mid == text::kNoToken) {
    return {};
  }
  return {sp.fim_pre, sp.fim_suf, sp.fim_mid};
}

Result<std::string> ModelHandle::chat_template_source() const {
  ModelSlot& m = *slots_.front();
  std::lock_guard<std::mutex> lk(m.mu);
  if (!m.chat) {
    POWER_ASSIGN_OR_RETURN(chat::ChatTemplate t, load_chat_template(*m.file));
    m.chat.emplace(std::move(t));
  }
  return std::string(m.chat->source());
}

namespace {

nlohmann::json gguf_value_json(const GgufValue& v, size_t max_array_items) {
  if (const auto* a = v.as_array()) {
    nlohmann::json out = nlohmann::json::array();
    for (const GgufValue& x : *a) out.push_back(gguf_value_json(x, max_array_items));
    return out;
  }
  if (const auto* str = v.as_string()) return *str;
  if (v.type == GgufValueType::kBool) return v.as_bool().value_or(false);
  if (v.is_float()) return v.as_f64().value_or(0.0);
  if (auto u = v.as_u64()) return *u;
  if (auto i = v.as_i64()) return *i;
  return nullptr;
}

}  // namespace

std::string ModelHandle::metadata_json(size_t max_array_items) const {
  nlohmann::json out = nlohmann::json::object();
  for (const GgufKeyValue& kv : slots_.front()->file->metadata()) {
    if (const auto* a = kv.value.as_array(); a != nullptr && a->size() > max_array_items) continue;
    out[kv.key] = gguf_value_json(kv.value, max_array_items);
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

RuntimeStats ModelHandle::stats() const {
  RuntimeStats s;
  for (const auto& slot : slots_) {
    std::lock_guard<std::mutex> lk(slot->mu);
    if (!slot->sched) continue;
    const runtime::Admission& a = slot->sched->admission();
    s.running += slot->sched->n_running();
    s.waiting += slot->sched->n_waiting();
    s.reserved_bytes += a.reserved_bytes();
    s.peak_reserved_bytes += a.peak_reserved_bytes();
    s.budget_bytes += a.limits().budget_bytes;
    s.kv_blocks_total += slot->kv->config().n_blocks;
    s.kv_blocks_used += slot->kv->blocks_used();
    s.prefix_cache_blocks += static_cast<int64_t>(slot->sched->prefix_cache().entries());
    s.prefix_state_checkpoints += slot->sched->prefix_cache().checkpoints();
    s.steps += slot->steps;
    s.step_tokens += slot->step_tokens;
    s.preemptions += slot->preemptions;
    s.spec_drafted += slot->spec_totals.drafted;
    s.spec_accepted += slot->spec_totals.accepted;
    s.spec_verify_passes += slot->spec_totals.verify_passes;
    s.spec_verify_tokens += slot->spec_totals.verify_tokens;
    s.spec_restores += slot->spec_totals.restores;
    s.spec_replays += slot->spec_totals.replays;
    s.spec_replayed_tokens += slot->spec_totals.replayed_tokens;
  }
  // The replicas share one model, so one streamer.
  if (!slots_.empty() && slots_.front()->model->streamer() != nullptr) {
    const StreamStats w = slots_.front()->model->streamer()->stats();
    s.weights_read_bytes = w.bytes_read;
    s.weights_loads = w.loads;
    s.weights_prefetch_useful = w.prefetch_useful;
    s.weights_prefetch_unused = w.prefetch_unused;
    s.weights_wait_ns = w.wait_ns;
    s.weights_read_errors = w.read_errors;
    s.weights_mirror_loads = w.mirror_loads;
    s.weights_mirror_bytes_read = w.mirror_bytes_read;
    s.weights_mirror_fallbacks = w.mirror_fallbacks;
    const CachedRows::Counters c = slots_.front()->model->cached_rows_counters();
    s.weights_cache_hits = c.hits;
    s.weights_cache_misses = c.misses;
    s.weights_cache_read_bytes = c.read_bytes;
  }
  if (!slots_.empty() && slots_.front()->model->weights_cache() != nullptr) {
    const WeightsCacheStats c = slots_.front()->model->weights_cache()->stats();
    s.weights_cache_bytes = c.bytes;
    s.weights_cache_capacity_bytes = c.capacity_bytes;
    s.weights_cache_evictions = c.evictions;
    s.weights_cache_rejected = c.rejected;
  }
  return s;
}

uint64_t RequestHandle::id() const {
  return state_->id;
}

void RequestHandle::cancel() {
  auto slot = state_->slot.lock();
  if (!slot) return;
  {
    std::lock_guard<std::mutex> lk(slot->mu);
    slot->sched->cancel(state_->id);
  }
  slot->cv.notify_all();
}

bool RequestHandle::done() const {
  std::lock_guard<std::mutex> lk(state_->mu);
  return state_->done;
}

Completion RequestHandle::wait() {
  std::unique_lock<std::mutex> lk(state_->mu);
  state_->cv.wait(lk, [&] { return state_->done; });
  return state_->result;
}

Result<std::unique_ptr<Runtime>> Runtime::create(const RuntimeOptions& options) {
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->budget_bytes_ =
      options.memory_budget_bytes > 0 ? options.memory_budget_bytes : default_memory_budget_bytes();
  rt->keys_dir_ = options.keys_dir.empty() ? receipt::SigningKey::default_dir() : options.keys_dir;
  rt->tensor_manifest_dir_ = options.tensor_manifest_dir.empty()     ? default_tensor_manifest_dir()
                             : options.tensor_manifest_dir == "none" ? std::string()
                                                                     : options.tensor_manifest_dir;
  POWER_ASSIGN_OR_RETURN(const CachePolicy policy,
                         parse_cache_policy(options.weights_cache_policy));
  if (!options.weights_cache.empty()) {
    auto size = parse_weights_budget(options.weights_cache);  // the budget's byte syntax
    if (!size.ok() || size->percent) {
      return Status(StatusCode::kInvalidArgument, "bad weights cache size")
          .with("weights_cache", options.weights_cache)
          .with("expected", "bytes such as 64M or 1GiB");
    }
    const uint64_t bytes = size->resolve(0);
    if (bytes > rt->budget_bytes_) {
      return Status(StatusCode::kResourceExhausted, "the weights cache does not fit the budget")
          .with("weights_cache_bytes", bytes)
          .with("budget_bytes", rt->budget_bytes_);
    }
    if (bytes > 0) {
      rt->weights_cache_ = std::make_shared<WeightsCache>(bytes, policy);
      rt->committed_bytes_ += bytes;
    }
  }
  return rt;
}

Runtime::~Runtime() {
  for (auto& m : models_) m->stop();
}

namespace {

// Pins the calling thread to `cores` and sets its niceness; threads it creates afterwards
// (the compute pool) inherit both.
Status apply_host_scheduling(const std::vector<int>& cores, int nice) {
  if (!cores.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int c : cores) {
      if (c < 0 || c >= CPU_SETSIZE) {
        return Status(StatusCode::kInvalidArgument, "cpu core out of range").with("core", c);
      }
      CPU_SET(c, &set);
    }
    if (int e = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); e != 0) {
      return Status(StatusCode::kInvalidArgument, "cannot pin threads to the cores")
          .with("error", std::strerror(e));
    }
  }
  if (nice != 0 && setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), nice) != 0) {
    return Status(StatusCode::kInvalidArgument, "cannot set the thread priority")
        .with("nice", nice)
        .with("error", std::strerror(errno));
  }
  return Status();
}

}  // namespace

// One replica: its own workspace (and compute threads), KV pool, scheduler and worker, over
// the shared read-only model. `fixed_extra` is what the replica must also account for (the
// weights, for the first replica).
Status Runtime::start_replica(ModelSlot& slot, const LoadOptions& o, GgmlType kv_type,
                              uint64_t fixed_extra) {
  const Model& model = *slot.model;
  const int64_t n_ctx = slot.info.n_ctx;
  // The worker creates the workspace, so that the compute pool inherits its affinity/nice.
  std::promise<Status> ready;
  std::future<Status> ready_f = ready.get_future();
  const int64_t ws_tokens = std::min(o.step_token_budget, n_ctx * o.max_running);
  ModelSlot* raw = &slot;
  slot.worker = std::thread([raw, &ready, ws_tokens, n_ctx, o] {
    Status st = apply_host_scheduling(o.cpu_cores, o.nice);
    if (st.ok()) {
      auto ws = raw->model->make_workspace(ws_tokens, n_ctx, o.threads);
      if (ws.ok()) {
        raw->ws = std::move(*ws);
      } else {
        st = ws.status();
      }
    }
    if (st.ok() && raw->draft_model) {  // speculative decoding's draft model
      auto dws = raw->draft_model->make_workspace(ws_tokens, n_ctx, o.threads);
      if (dws.ok()) {
        raw->draft_ws = std::move(*dws);
      } else {
        st = dws.status();
      }
    }
    if (st.ok() && raw->mtp) {  // MTP drafting: batches of committed pairs
      auto mws = raw->mtp->make_workspace(std::min<int64_t>(ws_tokens, 256), n_ctx, o.threads);
      if (mws.ok()) {
        raw->mtp_ws = std::move(*mws);
      } else {
        st = mws.status();
      }
    }
    const bool ok = st.ok();
    ready.set_value(std::move(st));
    if (ok) raw->run_worker();
  });
  POWER_RETURN_IF_ERROR(ready_f.get());

  KvCacheConfig kc = model.kv_config(n_ctx, 1, kv_type);
  const int64_t ctx_blocks = kc.n_blocks;
  kc.n_blocks = 1;
  POWER_ASSIGN_OR_RETURN(uint64_t block_bytes, KvCache::planned_bytes(kc));
  ModelInfo& info = slot.info;
  info.scratch_bytes = slot.ws->bytes();
  info.kv_block_bytes = block_bytes;
  info.kv_block_tokens = kc.block_tokens;
  info.threads = slot.ws->cpu.n_threads();
  const uint64_t available =
      budget_bytes_ > committed_bytes_ ? budget_bytes_ - committed_bytes_ : 0;
  uint64_t fixed = fixed_extra + info.scratch_bytes;
  // Recurrent layers: one state slot per running sequence, plus the snapshots speculative
  // decoding keeps per verify round (LoadOptions::speculative.s of them per sequence),
  // allocated whole here.
  // The prefix cache's state checkpoints (LoadOptions::state_checkpoints) come on top.
  const int running_slots = o.max_running * (1 + slot.spec_default.snapshots());
  const int checkpoints =
      model.has_recurrent_state() && o.prefix_reuse ? std::max(0, o.state_checkpoints) : 0;
  RecurrentStateConfig rc = model.recurrent_config(running_slots + checkpoints);
  uint64_t state_bytes = 0, checkpoint_bytes = 0;
  if (model.has_recurrent_state()) {
    POWER_ASSIGN_OR_RETURN(uint64_t slot_bytes,
                           RecurrentState::planned_bytes(model.recurrent_config(1)));
    state_bytes = slot_bytes * static_cast<uint64_t>(running_slots);
    checkpoint_bytes = slot_bytes * static_cast<uint64_t>(checkpoints);
    fixed += state_bytes + checkpoint_bytes;
  }
  KvCacheConfig draft_kc;
  if (slot.draft_model) {  // the draft workspace and a draft KV pool for max_running contexts
    draft_kc = slot.draft_model->kv_config(n_ctx, o.max_running, kv_type);
    POWER_ASSIGN_OR_RETURN(uint64_t draft_kv_bytes, KvCache::planned_bytes(draft_kc));
    fixed += slot.draft_ws->bytes() + draft_kv_bytes;
  }
  KvCacheConfig mtp_kc;
  if (slot.mtp) {  // the MTP workspace and its KV pool for max_running contexts
    mtp_kc = slot.mtp->kv_config(n_ctx, o.max_running, kv_type);
    POWER_ASSIGN_OR_RETURN(uint64_t mtp_kv_bytes, KvCache::planned_bytes(mtp_kc));
    fixed += slot.mtp_ws->bytes() + mtp_kv_bytes;
  }
  const uint64_t one_context = static_cast<uint64_t>(ctx_blocks) * block_bytes;
  if (fixed + one_context > available) {
    return Status(StatusCode::kDoesNotFit,
                  "weights + workspace + one context's KV exceed the memory budget")
        .with("weights_bytes", info.weights_bytes)
        .with("scratch_bytes", info.scratch_bytes)
        .with("kv_bytes_per_context", one_context)
        .with("recurrent_state_bytes", state_bytes)
        .with("state_checkpoint_bytes", checkpoint_bytes)
        .with("available_bytes", available)
        .with("budget_bytes", budget_bytes_);
  }
  const int64_t pool_blocks =
      block_bytes == 0  // no attention layers: blocks only count positions
          ? ctx_blocks * o.max_running
          : std::min<int64_t>(ctx_blocks * o.max_running,
                              static_cast<int64_t>((available - fixed) / block_bytes));
  kc.n_blocks = static_cast<int>(pool_blocks);
  POWER_ASSIGN_OR_RETURN(slot.kv, KvCache::create(kc));
  if (slot.draft_model) {
    POWER_ASSIGN_OR_RETURN(slot.draft_kv, KvCache::create(draft_kc));
  }
  if (slot.mtp) {
    POWER_ASSIGN_OR_RETURN(slot.mtp_kv, KvCache::create(mtp_kc));
  }
  if (model.has_recurrent_state()) {
    POWER_ASSIGN_OR_RETURN(slot.recurrent, RecurrentState::create(rc));
  }
  info.kv_blocks = pool_blocks;
  info.kv_cache_bytes = slot.kv->bytes_total();
  info.recurrent_state_bytes = state_bytes;
  info.state_checkpoint_bytes = checkpoint_bytes;
  // Requests reserve KV blocks of this pool, a recurrent state slot and shares of this
  // workspace, nothing else.
  info.budget_bytes = info.scratch_bytes + info.kv_cache_bytes + state_bytes;

  runtime::SchedulerConfig sc;
  sc.max_waiting = o.max_waiting;
  sc.step_token_budget = slot.ws->max_tokens;
  sc.n_ctx = n_ctx;
  sc.aging = std::chrono::milliseconds(o.aging_ms);
  // Recurrent layers get their state at the end of a shared prefix from the prefix cache's
  // checkpoints (none: every prompt is recomputed).
  sc.prefix_reuse = o.prefix_reuse;
  sc.state_checkpoints = checkpoints;
  runtime::AdmissionLimits limits;
  limits.budget_bytes = info.budget_bytes;
  limits.kv_pool_blocks = pool_blocks;
  limits.max_running = o.max_running;
  runtime::MemoryPlanner planner(block_bytes, kc.block_tokens, info.scratch_bytes, o.max_running,
                                 slot.recurrent ? slot.recurrent->slot_bytes() : 0);
  {
    std::lock_guard<std::mutex> lk(slot.mu);
    slot.sched = std::make_unique<runtime::Scheduler>(sc, slot.kv.get(), planner, limits,
                                                      slot.recurrent.get());
    slot.runner = std::make_unique<runtime::ModelRunner>(model, *slot.ws, o.max_running,
                                                         slot.recurrent.get());
  }
  slot.cv.notify_all();
  committed_bytes_ += fixed + info.kv_cache_bytes;
  slot.committed_bytes = fixed + info.kv_cache_bytes;
  return Status();
}

Status Runtime::unload(const ModelHandle& model) {
  std::lock_guard<std::mutex> load_lock(load_mu_);
  bool found = false;
  for (const auto& slot : model.slots_) {
    auto it = std::find(models_.begin(), models_.end(), slot);
    if (it == models_.end()) continue;
    found = true;
    models_.erase(it);
    committed_bytes_ -= std::min(committed_bytes_, slot->committed_bytes);
    slot->stop();
  }
  if (!found) return Status(StatusCode::kNotFound, "the model is not loaded in this runtime");
  return Status();
}

Result<ModelHandle> Runtime::load(const std::string& path, const LoadOptions& o) {
  GgmlType kv_type;
  if (o.kv_type == "f16" || o.kv_type == "F16") {
    kv_type = GgmlType::F16;
  } else if (o.kv_type == "f32" || o.kv_type == "F32") {
    kv_type = GgmlType::F32;
  } else {
    return Status(StatusCode::kInvalidArgument, "kv_type must be f16 or f32")
        .with("value", o.kv_type);
  }
  if (o.max_running < 1 || o.max_waiting < 0 || o.step_token_budget < o.max_running ||
      o.replicas < 1) {
    return Status(StatusCode::kInvalidArgument,
                  "need max_running >= 1, max_waiting >= 0, step_token_budget >= max_running, "
                  "replicas >= 1")
        .with("max_running", o.max_running)
        .with("max_waiting", o.max_waiting)
        .with("step_token_budget", o.step_token_budget)
        .with("replicas", o.replicas);
  }
  // A plain GGUF, or an encrypted container decrypted into locked memory; either way the
  // identity is the SHA-256 of the GGUF bytes.
  POWER_ASSIGN_OR_RETURN(runtime::ModelFile model_file, runtime::open_model_file(path, o));
  std::shared_ptr<const GgufFile> file = model_file.file;
  // The model first: an unknown architecture or a bad tensor is the error to report, not a
  // tokenizer the file may lack because its package brings its own.
  LoadModelOptions model_options;
  model_options.sha256 = model_file.sha256;
  model_options.prefetch = o.prefetch;
  model_options.mirror_dir = o.mirror_dir;
  model_options.mlock = o.mlock;
  model_options.weights_cache = weights_cache_;
  // The plaintext's tensor digests of an encrypted model stay in memory.
  model_options.tensor_manifest_dir = model_file.encrypted ? std::string() : tensor_manifest_dir_;
  POWER_ASSIGN_OR_RETURN(model_options.mirror_bytes, parse_mirror_bytes(o.mirror_bytes));
  if (!o.weights_budget.empty() && o.weights_budget != "auto") {
    POWER_ASSIGN_OR_RETURN(model_options.weights_budget, parse_weights_budget(o.weights_budget));
  } else {
    // Auto: what the runtime's budget has left beside this model's workspaces and one
    // context's KV cache per replica; everything resident when the model fits there.
    model_options.weights_budget_fn = [&](const Model& m, uint64_t total) -> uint64_t {
      int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : m.hparams().n_ctx_train;
      if (o.n_ctx <= 0 && m.spec().n_ctx_max > 0) n_ctx = std::min(n_ctx, m.spec().n_ctx_max);
      n_ctx = std::max<int64_t>(n_ctx, 1);
      const int64_t ws_tokens = std::min(o.step_token_budget, n_ctx * o.max_running);
      uint64_t reserve = m.workspace_bytes(ws_tokens, n_ctx, o.threads);
      auto kv_bytes = KvCache::planned_bytes(m.kv_config(n_ctx, 1, GgmlType::F16));
      if (kv_bytes.ok()) reserve += *kv_bytes;
      reserve *= static_cast<uint64_t>(std::max(1, o.replicas));
      const uint64_t available =
          budget_bytes_ > committed_bytes_ ? budget_bytes_ - committed_bytes_ : 0;
      if (available >= reserve && available - reserve >= total) return UINT64_MAX;
      const uint64_t left = available > reserve ? available - reserve : 0;
      POWER_LOG_WARN(
          "the weights ({} bytes) do not fit the memory left ({} bytes beside {} "
          "reserved): streaming what does not fit (docs/RESIDENCY.md)",
          total, available, reserve);
      return left;
    };
  }
  POWER_ASSIGN_OR_RETURN(std::unique_ptr<Model> model_owned, load_model(file, model_options));
  if (o.mlock && !model_owned->lock_status().ok()) {
    if (o.require_mlock) return Status(model_owned->lock_status()).with("path", path);
    POWER_LOG_WARN("{}: {}; the rest may be paged out", path,
                   model_owned->lock_status().to_string());
  }
  POWER_ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> tok, load_tokenizer(*file));
  std::shared_ptr<const text::Tokenizer> tokenizer(std::move(tok));
  std::shared_ptr<const Model> model(std::move(model_owned));
  const ModelHparams& hp = model->hparams();
  const int64_t n_ctx_max = model->spec().n_ctx_max;  // learned positions: a hard limit
  int64_t n_ctx = o.n_ctx > 0 ? o.n_ctx : hp.n_ctx_train;
  if (o.n_ctx <= 0 && n_ctx_max > 0 && n_ctx > n_ctx_max) n_ctx = n_ctx_max;
  if (n_ctx <= 0) return Status(StatusCode::kInvalidArgument, "the context size must be positive");
  if (n_ctx_max > 0 && n_ctx > n_ctx_max) {
    return Status(StatusCode::kInvalidArgument,
                  "the context exceeds the positions the model has (learned position embeddings)")
        .with("n_ctx", n_ctx)
        .with("n_ctx_max", n_ctx_max);
  }
  if (n_ctx > hp.n_ctx_train && hp.n_ctx_train > 0) {
    POWER_LOG_WARN("context {} exceeds the model's training context {}", n_ctx, hp.n_ctx_train);
  }

  POWER_ASSIGN_OR_RETURN(spec::Config spec_default, runtime::to_spec_config(o.speculative));
  std::shared_ptr<const Model> draft_model;
  uint64_t draft_weights = 0;
  if (!o.draft_model.empty()) {
    POWER_ASSIGN_OR_RETURN(runtime::ModelFile draft_opened,
                           runtime::open_model_file(o.draft_model, o));
    std::shared_ptr<const GgufFile> draft_file = draft_opened.file;
    POWER_ASSIGN_OR_RETURN(std::unique_ptr<text::Tokenizer> draft_tok, load_tokenizer(*draft_file));
    Status same = spec::check_same_vocabulary(*tokenizer, *draft_tok);
    if (!same.ok()) return same.with("draft_model", o.draft_model);
    POWER_ASSIGN_OR_RETURN(std::unique_ptr<Model> dm, load_model(draft_file));
    if (dm->has_recurrent_state()) {
      return Status(StatusCode::kUnsupported,
                    "a draft model with recurrent layers is not supported (its state cannot "
                    "follow the target's rollbacks)")
          .with("draft_model", o.draft_model);
    }
    if (dm->hparams().n_vocab != hp.n_vocab) {
      return Status(StatusCode::kInvalidArgument,
                    "the draft model's output width differs from the target's vocabulary")
          .with("target_n_vocab", hp.n_vocab)
          .with("draft_n_vocab", dm->hparams().n_vocab);
    }
    draft_weights = draft_file->file_size() + dm->repacked().bytes();
    draft_model = std::move(dm);
  }
  // MTP layers are validated whenever the file declares them (a broken file fails here).
  std::shared_ptr<const Model> mtp;
  if (mtp_layer_count(*file) > 0) {
    POWER_ASSIGN_OR_RETURN(std::unique_ptr<Model> head, load_draft_head(*model));
    mtp = std::move(head);
  }
  POWER_RETURN_IF_ERROR(
      runtime::resolve_mode(spec_default.mode, draft_model != nullptr, mtp != nullptr, *file)
          .status());

  std::lock_guard<std::mutex> load_lock(load_mu_);
  const uint64_t committed_before = committed_bytes_;
  ModelHandle h;
  for (int r = 0; r < o.replicas; ++r) {
    auto slot = std::make_shared<ModelSlot>();
    slot->file = file;
    slot->model = model;
    slot->tokenizer = tokenizer;
    ModelInfo& info = slot->info;
    info.path = path;
    info.sha256 = model_file.sha256;
    info.arch = hp.arch;
    info.n_vocab = hp.n_vocab;
    info.n_layer = hp.n_layer;
    info.n_embd = hp.n_embd;
    info.n_ctx = n_ctx;
    // The mapping's pages the kernels read plus their packed copies (Q4_0/Q8_0/Q4_K).
    info.weights_bytes = model->resident_weight_bytes();
    {
      const ResidencyPlan& plan = model->residency();
      info.residency_digest = plan.digest;
      info.weights_total_bytes = plan.total_bytes;
      info.weights_pinned_bytes = plan.streams() ? plan.pinned_bytes : plan.total_bytes;
      info.weights_streamed_bytes = plan.streamed_bytes;
      info.weights_staging_bytes =
          model->streamer() != nullptr ? model->streamer()->staging_bytes() : 0;
      if (model->mirror() != nullptr) {
        info.weights_mirror_dir = model->mirror()->dir();
        info.weights_mirror_bytes = model->mirror()->data_bytes();
      }
      info.weights_locked_bytes = model->locked_weight_bytes();
    }
    info.replicas = o.replicas;
    if (r == 0) {
      slot->receipt_model = std::make_shared<ModelSlot::ReceiptModel>();
      slot->receipt_model->tensor_manifest_dir = model_options.tensor_manifest_dir;
    } else {
      slot->receipt_model = h.slots_.front()->receipt_model;
    }
    slot->threads_fixed = o.threads > 0;
    slot->spec_default_mode = o.speculative.mode;
    slot->draft_model_name = o.draft_model.substr(o.draft_model.find_last_of('/') + 1);
    slot->kv_type = kv_type == GgmlType::F16 ? "f16" : "f32";
    slot->prefix_reuse = o.prefix_reuse;
    slot->spec_default = spec_default;
    slot->draft_model = draft_model;
    slot->mtp = mtp;
    Status st = start_replica(*slot, o, kv_type, r == 0 ? info.weights_bytes + draft_weights : 0);
    if (!st.ok()) {
      committed_bytes_ = committed_before;  // the replicas made so far go with `h`
      return st.with("replica", r);
    }
    h.slots_.push_back(slot);
  }
  for (auto& s : h.slots_) models_.push_back(s);
  return h;
}

namespace {

SamplerParams to_sampler_params(const SamplingOptions& s) {
  SamplerParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.repeat_penalty = s.repeat_penalty;
  p.frequency_penalty = s.frequency_penalty;
  p.presence_penalty = s.presence_penalty;
  p.penalty_last_n = s.penalty_last_n;
  p.logit_bias = s.logit_bias;
  p.seed = s.seed;
  return p;
}

Result<std::vector<int32_t>> prompt_tokens(ModelSlot& m, const GenerateRequest& req) {
  const int forms = (!req.prompt.empty() ? 1 : 0) + (!req.prompt_tokens.empty() ? 1 : 0) +
                    (!req.messages.empty() ? 1 : 0);
  if (forms > 1) {
    return Status(StatusCode::kInvalidArgument,
                  "give one of prompt, prompt_tokens or messages, not several");
  }
  if (!req.prompt_tokens.empty()) {
    for (int32_t t : req.prompt_tokens) {
      if (t < 0 || t >= m.info.n_vocab) {
        return Status(StatusCode::kInvalidArgument, "token id out of range")
            .with("token", t)
            .with("n_vocab", m.info.n_vocab);
      }
    }
    return req.prompt_tokens;
  }
  std::string text = req.prompt;
  bool add_bos = req.add_bos;
  if (!req.messages.empty()) {
    POWER_ASSIGN_OR_RETURN(nlohmann::ordered_json messages, runtime::chat_messages_json(req));
    std::lock_guard<std::mutex> lk(m.mu);
    if (!m.chat) {
      POWER_ASSIGN_OR_RETURN(chat::ChatTemplate t, load_chat_template(*m.file));
      m.chat.emplace(std::move(t));
    }
    chat::ChatRenderOptions ro;
    ro.add_generation_prompt = true;
    POWER_RETURN_IF_ERROR(runtime::add_tools(req, ro));
    if (!req.template_kwargs_json.empty()) {
      ro.extra_context = nlohmann::ordered_json::parse(req.template_kwargs_json, nullptr, false);
      if (!ro.extra_context.is_object()) {
        return Status(StatusCode::kInvalidArgument, "template_kwargs_json must be a JSON object");
      }
    }
    POWER_ASSIGN_OR_RETURN(text, m.chat->render(messages, ro));
    // Templates that print the BOS token themselves must not get a second one.
    const text::Tokenizer& tok = *m.tokenizer;
    const std::string bos_text =
        tok.special().bos >= 0 ? tok.token_text(tok.special().bos) : std::string();
    if (!bos_text.empty() && text.rfind(bos_text, 0) == 0) add_bos = false;
  }
  text::EncodeOptions eo;
  eo.add_special = add_bos;
  eo.parse_special = true;
  std::vector<int32_t> ids = m.tokenizer->encode(text, eo);
  if (ids.empty()) {
    return Status(StatusCode::kInvalidArgument,
                  "the prompt is empty and the vocabulary adds no BOS token");
  }
  return ids;
}

}  // namespace

namespace {

// Why a request on this replica would not be reproducible bit for bit (docs/RECEIPTS.md,
// "Determinism"); empty when it is.
std::vector<std::string> nondeterminism(const ModelSlot& m, const GenerateRequest& req) {
  std::vector<std::string> why;
  const std::string spec_mode = req.speculative ? req.speculative->mode : m.spec_default_mode;
  if (spec_mode != "off" && req.sampling.temperature > 0) {
    why.push_back(
        "speculative decoding with sampling draws from the same distribution, not the same "
        "tokens, as a replay");
  }
  if (!m.threads_fixed) {
    why.push_back("the thread count is not fixed (loaded with threads = 0: all cores)");
  }
  if (req.deadline) why.push_back("a deadline can end the request depending on the load");
  return why;
}

receipt::ExecutionFacts execution_facts(const ModelSlot& m, const GenerateRequest& req,
                                        bool can_sign) {
  receipt::ExecutionFacts f;
  f.model_sha256 = m.info.sha256;
  f.power_version = POWER_VERSION;
  f.signed_receipt = can_sign;
  f.device_kind = "cpu";
  f.kernel_isa = std::string(cpu_isa_name(cpu_isa()));
  f.nondeterminism = nondeterminism(m, req);
  return f;
}

}  // namespace

Result<std::string> Runtime::receipt_public_key_hex() {
  POWER_ASSIGN_OR_RETURN(auto key, signing_key());
  return key->public_key_hex();
}

Result<std::shared_ptr<const receipt::SigningKey>> Runtime::signing_key() {
  std::lock_guard<std::mutex> lk(key_mu_);
  if (!key_) {
    POWER_ASSIGN_OR_RETURN(std::unique_ptr<receipt::SigningKey> k,
                           receipt::SigningKey::load_or_create(keys_dir_));
    key_ = std::move(k);
  }
  return key_;
}

namespace {

// The receipt's parts known at submit: schema, model, config, device, input.
nlohmann::json receipt_body(ModelSlot& m, const GenerateRequest& req,
                            std::span<const int32_t> prompt, const spec::Config& spec_cfg,
                            spec::Mode spec_mode) {
  std::call_once(m.receipt_model->once, [&] {
    // A plain file is hashed with pread (nothing stays in the page cache); a decrypted
    // container through its locked mapping. A failed read falls back to the mapping.
    const bool plain = !m.file->mapping().is_secure_memory();
    auto manifest = load_or_hash_tensors(*m.file, plain ? m.info.path : std::string(),
                                         m.info.sha256, m.receipt_model->tensor_manifest_dir);
    if (!manifest.ok()) {
      POWER_LOG_WARN("hashing the tensors of {} through its mapping: {}", m.info.path,
                     manifest.status().to_string());
      manifest = hash_tensors(*m.file, std::string(), m.info.sha256);
      m.model->drop_unread_pages();
    }
    m.receipt_model->json =
        receipt::model_json(*m.file, m.info.path, m.info.sha256, m.info.arch, *manifest);
  });
  nlohmann::json config = receipt::request_config_json(req);
  config["kv_type"] = m.kv_type;
  config["threads"] = m.info.threads;
  config["n_ctx"] = m.info.n_ctx;
  config["prefix_reuse"] = m.prefix_reuse;
  config["kernel_isa"] = std::string(cpu_isa_name(cpu_isa()));
  config["power_version"] = POWER_VERSION;
  // Where the weights were read from (docs/RESIDENCY.md): the plan's digest binds the artifact
  // and the budget; model.tensors_sha256 is the same whatever the plan.
  config["weights_residency"] = {{"plan_sha256", m.info.residency_digest},
                                 {"pinned_bytes", m.info.weights_pinned_bytes},
                                 {"streamed_bytes", m.info.weights_streamed_bytes}};
  if (spec_mode == spec::Mode::kOff) {
    config["speculative"] = {{"enabled", false}, {"mode", "off"}};
  } else {
    config["speculative"] = {{"enabled", true},
                             {"mode", std::string(spec::mode_name(spec_mode))},
                             {"k", spec_cfg.k},
                             {"s", spec_cfg.snapshots()},
                             {"adaptive", spec_cfg.adaptive},
                             {"ngram_min", spec_cfg.ngram_min},
                             {"ngram_max", spec_cfg.ngram_max},
                             {"draft_model", m.draft_model_name}};
  }
  config["nondeterminism"] = nondeterminism(m, req);
  {
    std::lock_guard<std::mutex> lk(m.mu);
    config["chat_template_sha256"] = !req.messages.empty() && m.chat
                                         ? nlohmann::json(sha256_hex(m.chat->source()))
                                         : nlohmann::json(nullptr);
  }
  nlohmann::json input = receipt::input_json(req);
  input["tokens_sha256"] = receipt::token_ids_sha256(prompt);
  input["n_tokens"] = prompt.size();
  nlohmann::json body;
  body["schema"] = std::string(receipt::kReceiptSchema);
  body["model"] = m.receipt_model->json;
  body["config"] = std::move(config);
  body["device"] = receipt::device_json();
  body["input"] = std::move(input);
  return body;
}

}  // namespace

// The replica a request runs on: the one asked for, else the least loaded.
Result<std::shared_ptr<ModelSlot>> pick_replica(const ModelHandle& handle, int replica) {
  const auto& slots = handle.slots_;
  if (replica >= 0) {
    if (replica >= static_cast<int>(slots.size())) {
      return Status(StatusCode::kInvalidArgument, "no such replica")
          .with("replica", replica)
          .with("replicas", slots.size());
    }
    return slots[static_cast<size_t>(replica)];
  }
  std::shared_ptr<ModelSlot> best;
  int best_load = 0;
  for (const auto& s : slots) {
    std::lock_guard<std::mutex> lk(s->mu);
    const int load = s->sched->n_running() + s->sched->n_waiting();
    if (!best || load < best_load) {
      best = s;
      best_load = load;
    }
  }
  return best;
}

Result<std::vector<float>> Runtime::logits(const ModelHandle& handle,
                                           const std::vector<int32_t>& tokens) {
  if (handle.slots_.empty()) return Status(StatusCode::kInvalidArgument, "no model");
  const ModelSlot& m = *handle.slots_.front();
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n == 0) return Status(StatusCode::kInvalidArgument, "no tokens to score");
  if (n > m.info.n_ctx) {
    return Status(StatusCode::kInvalidArgument, "more tokens than the model's context")
        .with("tokens", n)
        .with("n_ctx", m.info.n_ctx);
  }
  const Model& model = *m.model;
  const GgmlType kv_type = m.kv_type == "f32" ? GgmlType::F32 : GgmlType::F16;
  const KvCacheConfig kc = model.kv_config(n, 1, kv_type);
  POWER_ASSIGN_OR_RETURN(uint64_t kv_bytes, KvCache::planned_bytes(kc));
  const uint64_t rec_bytes = model.has_recurrent_state()
                                 ? RecurrentState::planned_bytes(model.recurrent_config(1)).value()
                                 : 0;
  const uint64_t need = model.workspace_bytes(n, n, m.info.threads) + kv_bytes + rec_bytes +
                        static_cast<uint64_t>(n * m.info.n_vocab) * sizeof(float);
  {
    std::lock_guard<std::mutex> lk(load_mu_);
    const uint64_t available =
        budget_bytes_ > committed_bytes_ ? budget_bytes_ - committed_bytes_ : 0;
    if (need > available) {
      return Status(StatusCode::kDoesNotFit, "scoring these tokens exceeds the memory budget")
          .with("needed_bytes", need)
          .with("available_bytes", available);
    }
    committed_bytes_ += need;
  }
  auto release = [&] {
    std::lock_guard<std::mutex> lk(load_mu_);
    committed_bytes_ -= std::min(committed_bytes_, need);
  };
  std::vector<float> out;
  Status st = [&]() -> Status {
    POWER_ASSIGN_OR_RETURN(auto ws, model.make_workspace(n, n, m.info.threads));
    POWER_ASSIGN_OR_RETURN(auto kv, KvCache::create(kc));
    std::unique_ptr<RecurrentState> rec;
    KvSequence seq(kv.get());
    POWER_RETURN_IF_ERROR(model.attach_state(seq, rec));
    out.resize(static_cast<size_t>(n * m.info.n_vocab));
    const ForwardChunk chunk{&seq, tokens, true};
    Status fst = model.forward(*ws, std::span<const ForwardChunk>(&chunk, 1), out.data());
    seq.attach_recurrent(nullptr, -1);
    return fst;
  }();
  release();
  if (!st.ok()) return st;
  return out;
}

Result<RequestHandle> Runtime::submit(const ModelHandle& handle, GenerateRequest request) {
  if (handle.slots_.empty()) return Status(StatusCode::kInvalidArgument, "no model loaded");
  POWER_ASSIGN_OR_RETURN(std::shared_ptr<ModelSlot> slot, pick_replica(handle, request.replica));
  ModelSlot& m = *slot;
  const auto now = Clock::now();
  // The caller's policy, before any compute; nothing here relaxes it.
  std::shared_ptr<const receipt::SigningKey> key;
  if (request.want_receipt || (request.policy && request.policy->require_signature)) {
    auto k = signing_key();
    if (k.ok()) {
      key = *k;
    } else if (!request.policy || !request.policy->require_signature) {
      return k.status();  // asked for a receipt that cannot be signed
    }
  }
  if (request.policy) {
    POWER_RETURN_IF_ERROR(
        receipt::check_policy(*request.policy, execution_facts(m, request, key != nullptr)));
  }
  POWER_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, prompt_tokens(m, request));
  SamplerParams sp = to_sampler_params(request.sampling);
  POWER_RETURN_IF_ERROR(sp.validate(m.info.n_vocab));
  spec::Config spec_cfg = m.spec_default;
  if (request.speculative) {
    POWER_ASSIGN_OR_RETURN(spec_cfg, runtime::to_spec_config(*request.speculative));
  }
  std::vector<int32_t> prediction;
  if (!request.prediction.empty()) {
    // A predicted output drafts through the n-gram path: off and auto become ngram, a model
    // drafter asked for by name cannot take it.
    if (spec_cfg.mode == spec::Mode::kDraft || spec_cfg.mode == spec::Mode::kMtp) {
      return Status(StatusCode::kInvalidArgument,
                    "a prediction drafts in the ngram speculative mode, not with a draft model "
                    "or MTP heads")
          .with("mode", spec::mode_name(spec_cfg.mode));
    }
    spec_cfg.mode = spec::Mode::kNgram;
    text::EncodeOptions eo;
    eo.add_special = false;
    eo.parse_special = false;
    prediction = m.tokenizer->encode(request.prediction, eo);
  }
  POWER_ASSIGN_OR_RETURN(
      spec::Mode spec_mode,
      runtime::resolve_mode(spec_cfg.mode, m.draft_model != nullptr, m.mtp != nullptr, *m.file));
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  int64_t max_new = request.max_tokens;
  if (max_new < 0 || (request.max_tokens_up_to_context && n_prompt + max_new > m.info.n_ctx)) {
    max_new = std::max<int64_t>(0, m.info.n_ctx - n_prompt);
  }
  if (n_prompt >= m.info.n_ctx) {
    return Status(StatusCode::kDoesNotFit, "the prompt does not fit the context")
        .with("prompt_tokens", n_prompt)
        .with("n_ctx", m.info.n_ctx);
  }

  auto r = std::make_shared<RequestState>();
  r->t_submit = now;
  r->slot = slot;
  if (key) {
    r->receipt_key = key;
    r->receipt_body = receipt_body(m, request, prompt, spec_cfg, spec_mode);
  }
  r->req = std::move(request);
  r->result.usage.prompt_tokens = n_prompt;
  r->sampler = std::make_unique<Sampler>(sp, m.info.n_vocab);
  for (int32_t t : prompt) r->sampler->accept(t);
  {
    const chat::ChatTemplate* chat_template = nullptr;
    {
      std::lock_guard<std::mutex> lk(m.mu);
      if (m.chat) chat_template = &*m.chat;
    }
    POWER_ASSIGN_OR_RETURN(
        r->structured, runtime::setup_structured(r->req, m.tokenizer, chat_template, *r->sampler));
  }
  text::StreamOptions so;
  so.at_sequence_start = prompt.size() == 1 && m.tokenizer->special().bos == prompt[0];
  r->detok = std::make_unique<text::StreamingDetokenizer>(*m.tokenizer, so);
  r->result.speculative.mode = std::string(spec::mode_name(spec_mode));
  if (spec_mode != spec::Mode::kOff && max_new > 1 && !r->structured.active) {
    std::unique_ptr<spec::DraftModelDrafter> drafter;
    if (spec_mode == spec::Mode::kDraft) {
      SamplerParams dp = sp;
      dp.seed = sp.seed ^ 0xD1B54A32D192ED03ull;  // its own stream (any seed is exact)
      drafter = std::make_unique<spec::DraftModelDrafter>(*m.draft_model, *m.draft_ws,
                                                          m.draft_kv.get(), dp);
    }
    std::unique_ptr<spec::MtpDrafter> mtp_drafter;
    if (spec_mode == spec::Mode::kMtp) {
      SamplerParams dp = sp;
      dp.seed = sp.seed ^ 0xD1B54A32D192ED03ull;  // its own stream (any seed is exact)
      mtp_drafter = std::make_unique<spec::MtpDrafter>(*m.mtp, *m.mtp_ws, m.mtp_kv.get(), dp);
    }
    r->spec = std::make_unique<runtime::SpecSequence>(spec_cfg, std::move(drafter),
                                                      &r->result.speculative, &m.spec_totals,
                                                      std::move(mtp_drafter));
    if (!prediction.empty()) r->spec->set_prediction(std::move(prediction), prompt.size());
  }
  RequestHandle h;
  h.state_ = r;
  if (max_new == 0) {  // nothing to generate
    r->admitted = true;
    r->t_admit = now;
    complete(*r, Finish::kLength, Status());
    return h;
  }

  runtime::SeqRequest sr;
  sr.prompt = std::move(prompt);
  sr.max_new_tokens = static_cast<int32_t>(max_new);
  sr.priority = static_cast<int>(r->req.priority);
  sr.deadline = r->req.deadline;
  sr.runner_state = r->sampler.get();
  sr.drafter = r->spec.get();
  if (sr.drafter != nullptr && m.model->has_recurrent_state()) {
    // Snapshots per verify round: the request's s, at most what the pool holds per sequence.
    sr.snapshot_slots = std::min(spec_cfg.snapshots(), m.spec_default.snapshots());
  }
  {
    std::lock_guard<std::mutex> lk(m.mu);
    if (m.stopping) return Status(StatusCode::kCancelled, "the runtime is shutting down");
    r->id = m.next_id++;
    sr.id = r->id;
    POWER_RETURN_IF_ERROR(m.sched->add(std::move(sr), now));
    m.requests.emplace(r->id, r);
  }
  m.cv.notify_all();
  return h;
}

}  // namespace power
