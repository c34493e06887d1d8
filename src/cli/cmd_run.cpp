// `power run` (generate text), `power logits` (raw logits of a token list) and
// `power convert llama2c` (import a llama2.c checkpoint).
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <iostream>

#include "base/file.h"
#include "base/log.h"
#include "base/sha256.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/structured_flags.h"
#include "engine/sampler.h"
#include "format/llama2c.h"
#include "format/tensor_manifest.h"
#include "host/model.h"
#include "host/text.h"
#include "power/runtime.h"
#include "text/tokenizer.h"

namespace power::cli {
namespace {

struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<text::Tokenizer> tokenizer;
};

Result<LoadedModel> load(const std::string& path, bool need_tokenizer,
                         const LoadModelOptions& options = {}) {
  POWER_ASSIGN_OR_RETURN(auto file, GgufFile::open(path));
  std::shared_ptr<const GgufFile> shared(std::move(file));
  LoadedModel lm;
  if (need_tokenizer) {
    POWER_ASSIGN_OR_RETURN(lm.tokenizer, load_tokenizer(*shared));
  }
  POWER_ASSIGN_OR_RETURN(lm.model, load_model(shared, options));
  return lm;
}

Result<GgmlType> parse_kv_type(const std::string& s) {
  if (s == "f16" || s == "F16") return GgmlType::F16;
  if (s == "f32" || s == "F32") return GgmlType::F32;
  return Status(StatusCode::kInvalidArgument, "--kv-type must be f16 or f32").with("value", s);
}

struct RunOptions {
  std::string model_path;
  StructuredFlags structured;  // --json-schema, --json-object, --top-logprobs
  std::string prompt;
  bool chat = false;
  std::string system;
  int32_t n_predict = 128;
  bool n_predict_given = false;
  int64_t n_ctx = 0;
  int64_t n_batch = 512;
  int threads = 0;
  std::string kv_type = "f16";
  bool verbose = false;
  bool ignore_eos = false;
  bool no_bos = false;
  std::vector<std::string> stop;
  SamplerParams sampling;
  int64_t seed = -1;
  std::string spec_mode = "off";  // --spec: speculative decoding (docs/SPECULATIVE.md)
  int spec_k = 4;
  int spec_s = 0;
  bool spec_fixed_k = false;
  std::string draft_model;
  std::string receipt_path;    // --receipt: write the signed receipt here
  std::string policy_path;     // --policy: the caller's acceptance policy (JSON)
  std::string output_path;     // --output: write exactly the generated text here
  std::string model_key_file;  // --model-key-file: opens an encrypted container (power encrypt)
  bool require_mlock = false;  // --require-mlock: refuse weights that cannot be locked in RAM
  bool mlock = false;          // --mlock: lock the weights in RAM
  std::string weights_budget;  // --weights-budget (docs/RESIDENCY.md)
  int prefetch = 2;            // --prefetch
  std::string mirror_dir, mirror_bytes;                      // --mirror-dir, --mirror-bytes
  std::string weights_cache, weights_cache_policy = "lfru";  // --weights-cache[-policy]
  std::optional<AcceptancePolicy> policy;
};

// `power run` is one client of the embedded runtime: one model, one request at a time.
struct RunSession {
  std::unique_ptr<Runtime> rt;
  ModelHandle model;
  SamplingOptions sampling;
};

Result<RunSession> prepare(RunOptions& o) {
  RunSession s;
  RuntimeOptions ro;
  ro.weights_cache = o.weights_cache;
  ro.weights_cache_policy = o.weights_cache_policy;
  POWER_ASSIGN_OR_RETURN(s.rt, Runtime::create(ro));
  LoadOptions lo;
  lo.n_ctx = o.n_ctx;
  lo.max_running = 1;
  lo.max_waiting = 1;
  lo.step_token_budget = std::max<int64_t>(1, o.n_batch);
  lo.kv_type = o.kv_type;
  lo.threads = o.threads;
  lo.speculative.mode = o.spec_mode;
  lo.speculative.k = o.spec_k;
  lo.speculative.s = o.spec_s;
  lo.speculative.adaptive = !o.spec_fixed_k;
  lo.model_key_file = o.model_key_file;
  lo.require_mlock = o.require_mlock;
  lo.mlock = o.mlock;
  lo.weights_budget = o.weights_budget;
  lo.prefetch = o.prefetch;
  lo.mirror_dir = o.mirror_dir;
  lo.mirror_bytes = o.mirror_bytes;
  if (!o.draft_model.empty()) {
    POWER_ASSIGN_OR_RETURN(lo.draft_model, resolve_model_path(o.draft_model));
  }
  POWER_ASSIGN_OR_RETURN(std::string model_path, resolve_model_path(o.model_path));
  POWER_ASSIGN_OR_RETURN(s.model, s.rt->load(model_path, lo));
  const ModelInfo& info = s.model.info();
  if (o.seed < 0) {
    std::random_device rd;
    o.sampling.seed = (static_cast<uint64_t>(rd()) << 32) | rd();
  } else {
    o.sampling.seed = static_cast<uint64_t>(o.seed);
  }
  const SamplerParams& p = o.sampling;
  s.sampling = SamplingOptions{p.temperature,
                               p.top_k,
                               p.top_p,
                               p.min_p,
                               p.repeat_penalty,
                               p.frequency_penalty,
                               p.presence_penalty,
                               p.penalty_last_n,
                               p.logit_bias,
                               p.seed};
  if (o.verbose) {
    std::fprintf(stderr,
                 "model: %s, %lld layers, n_embd %lld, vocab %lld; context %lld; sha256 %s\n"
                 "memory: kv cache %.2f MiB (%s), scratch %.2f MiB; weights mapped %.2f MiB; "
                 "budget %.2f MiB\n"
                 "weights: %.2f of %.2f MiB resident, %.2f MiB streamed, staging %.2f MiB; "
                 "residency plan %s; locked %.2f MiB\n"
                 "threads: %d\n",
                 info.arch.c_str(), static_cast<long long>(info.n_layer),
                 static_cast<long long>(info.n_embd), static_cast<long long>(info.n_vocab),
                 static_cast<long long>(info.n_ctx), info.sha256.c_str(),
                 info.kv_cache_bytes / 1048576.0, o.kv_type.c_str(), info.scratch_bytes / 1048576.0,
                 info.weights_bytes / 1048576.0, s.rt->budget_bytes() / 1048576.0,
                 info.weights_pinned_bytes / 1048576.0, info.weights_total_bytes / 1048576.0,
                 info.weights_streamed_bytes / 1048576.0, info.weights_staging_bytes / 1048576.0,
                 info.residency_digest.c_str(), info.weights_locked_bytes / 1048576.0,
                 info.threads);
  }
  return s;
}

// Runs one request (text prompt, or the chat so far), streaming to stdout; returns the text.
Result<std::string> generate_once(RunSession& s, const RunOptions& o, GenerateRequest req) {
  req.sampling = s.sampling;
  req.max_tokens = o.n_predict;
  req.max_tokens_up_to_context = !o.n_predict_given;  // the default 128 stops at the context
  req.stop = o.stop;
  req.ignore_eos = o.ignore_eos;
  req.add_bos = !o.no_bos;
  req.want_receipt = !o.receipt_path.empty();
  req.policy = o.policy;
  POWER_RETURN_IF_ERROR(apply_structured_flags(o.structured, req));
  req.on_stream = [](const StreamEvent& e) {
    std::fwrite(e.text.data(), 1, e.text.size(), stdout);
    std::fflush(stdout);
    return true;
  };
  POWER_ASSIGN_OR_RETURN(RequestHandle h, s.rt->submit(s.model, std::move(req)));
  Completion r = h.wait();
  if (!r.status.ok()) return r.status;
  if (!o.receipt_path.empty()) {  // with --chat: the last turn's
    if (r.receipt.empty()) return Status(StatusCode::kInternal, "no receipt was produced");
    POWER_RETURN_IF_ERROR(write_file_atomic(o.receipt_path, r.receipt + "\n"));
  }
  if (!o.output_path.empty()) POWER_RETURN_IF_ERROR(write_file_atomic(o.output_path, r.text));
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (o.structured.top_logprobs >= 0) print_logprobs(r, stderr);
  const double pre_s = r.timings.prefill_ms / 1000.0, dec_s = r.timings.decode_ms / 1000.0;
  const long long n_prompt = static_cast<long long>(r.usage.prompt_tokens);
  std::fprintf(stderr,
               "prefill: %lld tokens in %.3f s (%.1f tokens/s); decode: %zu tokens in %.3f s "
               "(%.1f tokens/s); finish: %s\n",
               n_prompt, pre_s, pre_s > 0 ? n_prompt / pre_s : 0.0, r.tokens.size(), dec_s,
               dec_s > 0 ? r.tokens.size() / dec_s : 0.0,
               std::string(finish_name(r.finish)).c_str());
  if (o.verbose && !o.weights_cache.empty()) {
    const RuntimeStats st = s.model.stats();
    std::fprintf(stderr,
                 "weights cache: %llu hits, %llu misses (%llu bytes read), %llu of %llu bytes "
                 "held, %llu evicted, %llu refused\n",
                 static_cast<unsigned long long>(st.weights_cache_hits),
                 static_cast<unsigned long long>(st.weights_cache_misses),
                 static_cast<unsigned long long>(st.weights_cache_read_bytes),
                 static_cast<unsigned long long>(st.weights_cache_bytes),
                 static_cast<unsigned long long>(st.weights_cache_capacity_bytes),
                 static_cast<unsigned long long>(st.weights_cache_evictions),
                 static_cast<unsigned long long>(st.weights_cache_rejected));
  }
  if (r.speculative.mode != "off") {
    const SpeculativeUsage& u = r.speculative;
    std::fprintf(stderr,
                 "speculative: %s, drafted %lld, accepted %lld (%.1f%%), %.2f tokens per target "
                 "pass\n",
                 u.mode.c_str(), static_cast<long long>(u.drafted),
                 static_cast<long long>(u.accepted), 100.0 * u.acceptance_rate, u.tokens_per_pass);
    if (u.restores + u.replays > 0) {
      std::fprintf(stderr, "state rollbacks: %lld restored, %lld replayed (%lld tokens)\n",
                   static_cast<long long>(u.restores), static_cast<long long>(u.replays),
                   static_cast<long long>(u.replayed_tokens));
    }
  }
  return r.text;
}

// --chat: the model's chat template over the conversation so far. With -p, one user turn;
// otherwise every line of standard input is a user turn, answered in order until EOF.
Status run_chat(RunSession& s, const RunOptions& o) {
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  auto turn = [&](const std::string& user) -> Status {
    messages.push_back({"user", user});
    GenerateRequest req;
    req.messages = messages;
    POWER_ASSIGN_OR_RETURN(std::string reply, generate_once(s, o, std::move(req)));
    messages.push_back({"assistant", reply});
    return Status();
  };
  if (!o.prompt.empty()) return turn(o.prompt);
  std::string line;
  while (std::getline(std::cin, line)) {
    if (line.empty()) continue;
    POWER_RETURN_IF_ERROR(turn(line));
  }
  return Status();
}

void run_generate(RunOptions o) {
  if (!o.policy_path.empty()) {
    auto text = read_file_text(o.policy_path);
    if (!text.ok()) return report_error(text.status());
    auto policy = parse_acceptance_policy(*text);
    if (!policy.ok()) return report_error(policy.status());
    o.policy = *policy;
  }
  auto s = prepare(o);
  if (!s.ok()) return report_error(s.status());
  if (o.chat) {
    Status st = run_chat(*s, o);
    if (!st.ok()) report_error(st);
    return;
  }
  GenerateRequest req;
  req.prompt = o.prompt;  // empty: BOS alone
  auto r = generate_once(*s, o, std::move(req));
  if (!r.ok()) report_error(r.status());
}

Result<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::out_of_range("id");
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return Status(StatusCode::kInvalidArgument, "token ids must be comma-separated integers")
          .with("item", item);
    }
  }
  if (ids.empty()) return Status(StatusCode::kInvalidArgument, "no token ids given");
  return ids;
}

struct LogitsOptions {
  std::string model, tokens, out, kv_type = "f32", weights_budget, mirror_dir, mirror_bytes;
  int threads = 0, prefetch = 2;
};

void run_logits(const LogitsOptions& lo) {
  const std::string& out = lo.out;
  const int threads = lo.threads;
  auto ids = parse_ids(lo.tokens);
  if (!ids.ok()) return report_error(ids.status());
  auto kv_type = parse_kv_type(lo.kv_type);
  if (!kv_type.ok()) return report_error(kv_type.status());
  auto resolved = resolve_model_path(lo.model);
  if (!resolved.ok()) return report_error(resolved.status());
  LoadModelOptions options;
  options.prefetch = lo.prefetch;
  if (!lo.weights_budget.empty() && lo.weights_budget != "auto") {
    auto budget = parse_weights_budget(lo.weights_budget);
    if (!budget.ok()) return report_error(budget.status());
    options.weights_budget = *budget;
  }
  if (!lo.mirror_dir.empty()) {  // a mirror is bound to the artifact's digest
    options.mirror_dir = lo.mirror_dir;
    auto cap = parse_mirror_bytes(lo.mirror_bytes);
    if (!cap.ok()) return report_error(cap.status());
    options.mirror_bytes = *cap;
    options.tensor_manifest_dir = default_tensor_manifest_dir();
    auto digest = sha256_file(*resolved);
    if (!digest.ok()) return report_error(digest.status());
    options.sha256 = to_hex(*digest);
  }
  auto lm = load(*resolved, false, options);
  if (!lm.ok()) return report_error(lm.status());
  const Model& model = *lm->model;
  const int64_t n = static_cast<int64_t>(ids->size());
  auto ws = model.make_workspace(n, n, threads);
  if (!ws.ok()) return report_error(ws.status());
  auto kv = KvCache::create(model.kv_config(n, 1, *kv_type));
  if (!kv.ok()) return report_error(kv.status());
  std::unique_ptr<RecurrentState> rec;  // models with recurrent layers: one state slot
  KvSequence seq(kv->get());
  if (Status st = model.attach_state(seq, rec); !st.ok()) return report_error(st);
  ForwardChunk chunk{&seq, *ids, true};
  std::vector<float> logits(static_cast<size_t>(n * model.hparams().n_vocab));
  Status st = model.forward(**ws, std::span<const ForwardChunk>(&chunk, 1), logits.data());
  if (!st.ok()) return report_error(st);
  st = write_file_atomic(out,
                         std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(logits.data()),
                                                  logits.size() * sizeof(float)));
  if (!st.ok()) return report_error(st);
  std::fprintf(stderr, "wrote logits [%lld x %lld] f32 to %s\n", static_cast<long long>(n),
               static_cast<long long>(model.hparams().n_vocab), out.c_str());
}

}  // namespace

void add_run_commands(CLI::App& app) {
  static RunOptions o;
  auto* run = app.add_subcommand("run", "Generate text with a language model");
  run->add_option("-m,--model", o.model_path, "GGUF model file")->required();
  add_model_lib_option(run);
  run->add_option("-p,--prompt", o.prompt, "Prompt text (default: empty, i.e. BOS alone)");
  run->add_flag("--chat", o.chat,
                "Apply the model's chat template: -p is one user turn, else each stdin line is");
  run->add_option("--system", o.system, "System message for --chat");
  run->add_option("-n,--n-predict", o.n_predict, "Tokens to generate (-1: until EOS or context)");
  run->add_option("--temp", o.sampling.temperature, "Temperature (0 = greedy)")
      ->capture_default_str();
  run->add_option("--top-k", o.sampling.top_k, "Top-k (0 = off)")->capture_default_str();
  run->add_option("--top-p", o.sampling.top_p, "Top-p (1 = off)")->capture_default_str();
  run->add_option("--min-p", o.sampling.min_p, "Min-p (0 = off)")->capture_default_str();
  run->add_option("--repeat-penalty", o.sampling.repeat_penalty, "Repetition penalty (1 = off)");
  run->add_option("--repeat-last-n", o.sampling.penalty_last_n, "Tokens the penalties look at");
  run->add_option("--frequency-penalty", o.sampling.frequency_penalty, "Frequency penalty");
  run->add_option("--presence-penalty", o.sampling.presence_penalty, "Presence penalty");
  run->add_option("--seed", o.seed, "RNG seed (default: random)");
  run->add_option("--stop", o.stop, "Stop string (repeatable)");
  add_structured_flags(run, o.structured);
  run->add_flag("--ignore-eos", o.ignore_eos, "Do not stop at end-of-generation tokens");
  run->add_flag("--no-bos", o.no_bos, "Do not add the BOS token");
  run->add_option("-t,--threads", o.threads, "Threads (0 = all cores)");
  run->add_option("-c,--ctx", o.n_ctx, "Context size in tokens (default: the model's)");
  run->add_option("-b,--batch", o.n_batch, "Prompt tokens per forward pass");
  run->add_option("--kv-type", o.kv_type, "KV cache type: f16 (default) or f32");
  run->add_option("--weights-budget", o.weights_budget,
                  "Bytes of weights kept in memory (800M, 1.5GiB, 50%); the rest is streamed "
                  "from the file (default auto: all when they fit; docs/RESIDENCY.md)");
  run->add_option("--prefetch", o.prefetch, "Streamed weight groups read ahead, 0-4 (default 2)");
  add_mirror_options(run, &o.mirror_dir, &o.mirror_bytes);
  add_weights_cache_options(run, &o.weights_cache, &o.weights_cache_policy);
  run->add_option("--spec", o.spec_mode,
                  "Speculative decoding: off (default), auto, ngram, draft (needs --draft-model), "
                  "mtp (needs a model with MTP layers)");
  run->add_option("--spec-k", o.spec_k, "Draft tokens per target pass, 1-16 (adaptive upper bound)")
      ->capture_default_str();
  run->add_flag("--spec-fixed-k", o.spec_fixed_k, "Always draft --spec-k tokens (no adaptive k)");
  run->add_option("--spec-s", o.spec_s,
                  "State snapshots per verify round, 1-64 (models with recurrent layers; default "
                  "min(k, 7); no effect on attention-only models)");
  run->add_option("--draft-model", o.draft_model,
                  "Draft model for --spec draft/auto (same vocabulary as -m)");
  run->add_flag("--verbose", o.verbose, "Print model, memory and thread information");
  run->add_option("--receipt", o.receipt_path,
                  "Write the signed execution receipt (power.receipt.v1) to this file");
  run->add_option("--policy", o.policy_path,
                  "Acceptance policy JSON: refuse to run unless the model/config meet it");
  run->add_option("--output", o.output_path, "Also write exactly the generated text here");
  run->add_option("--model-key-file", o.model_key_file,
                  "Key of an encrypted model (power encrypt): 32 raw bytes or 64 hex digits; "
                  "default $POWER_MODEL_KEY");
  run->add_flag("--mlock", o.mlock,
                "Lock the weights in RAM so that memory pressure cannot page them out");
  run->add_flag("--require-mlock", o.require_mlock,
                "Fail when weights cannot be locked in RAM (RLIMIT_MEMLOCK): an encrypted "
                "model's decrypted ones, or any with --mlock");
  run->callback([run] {
    o.n_predict_given = run->count("--n-predict") > 0;
    run_generate(o);
  });

  static LogitsOptions lg;
  auto* logits = app.add_subcommand("logits", "Write raw f32 logits for every position");
  logits->add_option("-m,--model", lg.model, "GGUF model file")->required();
  add_model_lib_option(logits);
  logits->add_option("--tokens", lg.tokens, "Comma-separated token ids")->required();
  logits->add_option("--out,-o", lg.out, "Output file ([n_tokens x n_vocab] f32)")->required();
  logits->add_option("-t,--threads", lg.threads, "Threads (0 = all cores)");
  logits->add_option("--kv-type", lg.kv_type, "KV cache type: f32 (default here) or f16");
  logits->add_option("--weights-budget", lg.weights_budget,
                     "Bytes of weights kept in memory (800M, 50%); the rest is streamed "
                     "(default: all resident; docs/RESIDENCY.md)");
  logits->add_option("--prefetch", lg.prefetch, "Streamed weight groups read ahead, 0-4");
  add_mirror_options(logits, &lg.mirror_dir, &lg.mirror_bytes);
  logits->callback([] { run_logits(lg); });

  static std::string cv_model, cv_tok, cv_out;
  auto* convert = app.add_subcommand("convert", "Convert other model formats to GGUF");
  convert->require_subcommand(1);
  auto* l2c = convert->add_subcommand("llama2c", "llama2.c checkpoint + tokenizer -> GGUF");
  l2c->add_option("model", cv_model, "llama2.c model .bin")->required();
  l2c->add_option("tokenizer", cv_tok, "llama2.c tokenizer .bin")->required();
  l2c->add_option("output", cv_out, "Output GGUF")->required();
  l2c->callback([] {
    auto s = convert_llama2c(cv_model, cv_tok, cv_out);
    if (!s.ok()) return report_error(s.status());
    std::fprintf(stderr,
                 "converted: dim %d, hidden %d, %d layers, %d heads (%d kv), vocab %d, seq_len %d "
                 "-> %s\n",
                 s->dim, s->hidden_dim, s->n_layers, s->n_heads, s->n_kv_heads, s->vocab_size,
                 s->seq_len, cv_out.c_str());
  });
}

}  // namespace power::cli
