// `power perplexity` (perplexity and KL divergence, as llama-perplexity reports them),
// `power hardware` (the hardware record), `power ab` (two-order A/B validation of two
// settings) and `power ab verify` (re-derive and check an evidence file). docs/VALIDATION.md.
//
// `power ab --process fresh` runs every measurement in a new process: this binary re-executed
// as the hidden `power ab worker`, with the arm's environment, which loads the model, does
// one request (a timed run, a teacher-forced pass or the task set) and prints its record as
// one JSON line. `--process shared` does the same in this process, both settings loaded side
// by side.
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/file.h"
#include "base/sha256.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "power/runtime.h"
#include "receipt/canonical_json.h"
#include "receipt/signing_key.h"
#include "validate/ab.h"
#include "validate/ab_run.h"
#include "validate/hardware.h"
#include "validate/perplexity.h"
#include "validate/stats.h"

extern char** environ;

namespace power::cli {
namespace {

using json = nlohmann::json;
using validate::Settings;

// ---------------------------------------------------------------- power perplexity

struct PerplexityCli {
  std::string model_path, text_path, save_path, base_path;
  int32_t n_ctx = 512;
  int32_t chunks = -1;
  int threads = 0;
  std::string kv_type = "f16";
  bool json_out = false;
};

json kld_json(const validate::KldStats& k) {
  return {{"count", k.count},
          {"mean_kld", k.mean},
          {"mean_kld_err", k.mean_err},
          {"max_kld", k.max},
          {"p99_9_kld", k.p99_9},
          {"p99_kld", k.p99},
          {"p95_kld", k.p95},
          {"p90_kld", k.p90},
          {"median_kld", k.median},
          {"p10_kld", k.p10},
          {"p5_kld", k.p5},
          {"p1_kld", k.p1},
          {"p0_1_kld", k.p0_1},
          {"min_kld", k.min},
          {"same_top1_pct", k.same_top_p},
          {"same_top1_pct_err", k.same_top_p_err},
          {"ppl_base", k.ppl_base},
          {"mean_ln_ppl_ratio", k.mean_ln_ppl_ratio},
          {"mean_ln_ppl_ratio_err", k.mean_ln_ppl_ratio_err},
          {"rms_dp_pct", k.rms_dp},
          {"max_dp_pct", k.max_dp},
          {"median_dp_pct", k.median_dp},
          {"min_dp_pct", k.min_dp}};
}

json perplexity_json(const validate::PerplexityResult& r) {
  json j = {{"n_ctx", r.n_ctx},    {"n_tokens", r.n_tokens}, {"n_chunk", r.n_chunk},
            {"scored", r.scored},  {"ppl", r.ppl},           {"ppl_err", r.ppl_err},
            {"running", r.running}};
  if (r.kld) j["kld"] = kld_json(*r.kld);
  return j;
}

Result<std::pair<std::unique_ptr<Runtime>, ModelHandle>> load_for(const std::string& path,
                                                                  const LoadOptions& lo) {
  POWER_ASSIGN_OR_RETURN(auto rt, Runtime::create(RuntimeOptions{}));
  POWER_ASSIGN_OR_RETURN(std::string resolved, resolve_model_path(path));
  POWER_ASSIGN_OR_RETURN(ModelHandle m, rt->load(resolved, lo));
  return std::make_pair(std::move(rt), std::move(m));
}

// Teacher-forced pass over `text`: writes `save` or compares with `base` (paths; "" for none).
Result<validate::PerplexityResult> teacher_forced(Runtime& rt, const ModelHandle& m,
                                                  const std::string& text, int32_t n_ctx,
                                                  int32_t chunks, const std::string& save,
                                                  const std::string& base, bool progress) {
  validate::PerplexityOptions po;
  po.n_ctx = n_ctx;
  po.max_chunks = chunks;
  if (progress) {
    po.on_chunk = [](int32_t c, double ppl) {
      std::fprintf(stderr, "[%d]%.4f,", c + 1, ppl);
      std::fflush(stderr);
    };
  }
  std::optional<validate::BaseLogits> base_logits;
  if (!base.empty()) {
    POWER_ASSIGN_OR_RETURN(base_logits, validate::read_base_logits(base));
  }
  validate::BaseLogits saved;
  POWER_ASSIGN_OR_RETURN(
      validate::PerplexityResult r,
      validate::perplexity(rt, m, text, po, base_logits ? &*base_logits : nullptr,
                           save.empty() ? nullptr : &saved));
  if (progress) std::fprintf(stderr, "\n");
  if (!save.empty()) POWER_RETURN_IF_ERROR(validate::write_base_logits(save, saved));
  return r;
}

void run_perplexity(const PerplexityCli& o) {
  if (!o.save_path.empty() && !o.base_path.empty()) {
    return report_error(Status(StatusCode::kInvalidArgument,
                               "--save-logits and --kl-divergence-base exclude each other"));
  }
  auto text = read_file_text(o.text_path);
  if (!text.ok()) return report_error(text.status());
  LoadOptions lo;
  lo.n_ctx = o.n_ctx;
  lo.max_running = 1;
  lo.max_waiting = 1;
  lo.step_token_budget = o.n_ctx;
  lo.threads = o.threads;
  lo.kv_type = o.kv_type;
  auto loaded = load_for(o.model_path, lo);
  if (!loaded.ok()) return report_error(loaded.status());
  auto& [rt, model] = *loaded;
  auto r =
      teacher_forced(*rt, model, *text, o.n_ctx, o.chunks, o.save_path, o.base_path, !o.json_out);
  if (!r.ok()) return report_error(r.status());
  if (o.json_out) {
    json j = perplexity_json(*r);
    j["model"] = o.model_path;
    j["model_sha256"] = model.info().sha256;
    j["text_sha256"] = sha256_hex(*text);
    std::printf("%s\n", j.dump().c_str());
    return;
  }
  std::printf("perplexity: %lld tokens, %d chunks of n_ctx %d, %lld positions scored\n",
              static_cast<long long>(r->n_tokens), r->n_chunk, r->n_ctx,
              static_cast<long long>(r->scored));
  std::printf("Final estimate: PPL = %.4f +/- %.5f\n", r->ppl, r->ppl_err);
  if (r->kld) {
    const validate::KldStats& k = *r->kld;
    std::printf("Mean PPL(Q)                   : %10.6f\n", r->ppl);
    std::printf("Mean PPL(base)                : %10.6f\n", k.ppl_base);
    std::printf("Mean ln(PPL(Q)/PPL(base))     : %10.6f ± %10.6f\n", k.mean_ln_ppl_ratio,
                k.mean_ln_ppl_ratio_err);
    std::printf("Mean    KLD: %10.6f ± %10.6f\n", k.mean, k.mean_err);
    std::printf("Maximum KLD: %10.6f\n99.9%%   KLD: %10.6f\n99.0%%   KLD: %10.6f\n", k.max, k.p99_9,
                k.p99);
    std::printf("95.0%%   KLD: %10.6f\n90.0%%   KLD: %10.6f\nMedian  KLD: %10.6f\n", k.p95, k.p90,
                k.median);
    std::printf("10.0%%   KLD: %10.6f\n 5.0%%   KLD: %10.6f\n 1.0%%   KLD: %10.6f\n", k.p10, k.p5,
                k.p1);
    std::printf(" 0.1%%   KLD: %10.6f\nMinimum KLD: %10.6f\n", k.p0_1, k.min);
    std::printf(
        "RMS Δp    : %6.3f %%\nMaximum Δp: %6.3f%%\nMedian  Δp: %6.3f%%\n"
        "Minimum Δp: %6.3f%%\n",
        k.rms_dp, k.max_dp, k.median_dp, k.min_dp);
    std::printf("Same top p: %6.3f ± %5.3f %%\n", k.same_top_p, k.same_top_p_err);
  }
}

// ---------------------------------------------------------------- power hardware

struct HardwareCli {
  std::string model_path;
  int threads = 0;
  bool no_probes = false;
};

void run_hardware(const HardwareCli& o) {
  validate::HardwareOptions ho;
  ho.model_path = o.model_path;
  ho.threads = o.threads;
  ho.probes = !o.no_probes;
  std::printf("%s\n", validate::hardware_record(ho).dump(2).c_str());
}

// ---------------------------------------------------------------- power ab

struct AbCli {
  std::string model_path, baseline_path, candidate_path, workload_path, tasks_path, text_path,
      out_path = "power.ab-evidence.json", apply_path, policy_path, equivalence, model_sha256;
  int rounds = 6;
  int aa_rounds = -1;  // -1: as many as --rounds
  std::string order = "abba";
  uint64_t seed = 1;
  std::string cache = "warm";
  std::string process = "shared";
  int32_t text_ctx = 128;
  bool quiet = false;
  // verify
  std::string verify_path, public_key;
  // worker (hidden): one measurement in this process
  std::string worker_settings, worker_request;
};

// Everything a measurement needs besides its settings.
struct AbInputs {
  std::string model_path;
  validate::Workload workload;
  std::string text;  // teacher-forced text ("" for none)
  int32_t text_ctx = 128;
  std::vector<std::pair<std::string, std::string>> tasks;  // prompt, answer
  std::vector<int32_t> task_max_tokens;
};

Result<AbInputs> read_tasks(const std::string& path, AbInputs in, std::string* sha) {
  POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(path));
  *sha = sha256_hex(text);
  std::istringstream s(text);
  std::string line;
  int n = 0;
  while (std::getline(s, line)) {
    ++n;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    json j = json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("prompt") || !j["prompt"].is_string() ||
        !j.contains("answer") || !j["answer"].is_string()) {
      return Status(StatusCode::kInvalidArgument,
                    fmt::format("tasks line {}: needs {{\"prompt\": ..., \"answer\": ...}}", n))
          .with("path", path);
    }
    in.tasks.emplace_back(j["prompt"].get<std::string>(), j["answer"].get<std::string>());
    in.task_max_tokens.push_back(j.value("max_tokens", 16));
  }
  if (in.tasks.empty()) return Status(StatusCode::kInvalidArgument, "the task set is empty");
  return in;
}

std::string trim(std::string s) {
  const size_t a = s.find_first_not_of(" \t\r\n");
  if (a == std::string::npos) return "";
  const size_t b = s.find_last_not_of(" \t\r\n");
  return s.substr(a, b - a + 1);
}

// One measurement on a loaded arm. Requests: {"kind": "run", "logits_probe": bool},
// {"kind": "ppl", "save": path} / {"kind": "ppl", "base": path}, {"kind": "tasks"}.
Result<json> measure(Runtime& rt, const ModelHandle& m, const AbInputs& in, const json& req) {
  const std::string kind = req.value("kind", "");
  if (kind == "run")
    return validate::run_workload(rt, m, in.workload, req.value("logits_probe", false));
  if (kind == "ppl") {
    POWER_ASSIGN_OR_RETURN(validate::PerplexityResult r,
                           teacher_forced(rt, m, in.text, in.text_ctx, -1, req.value("save", ""),
                                          req.value("base", ""), false));
    return perplexity_json(r);
  }
  if (kind == "tasks") {
    json ok = json::array();
    for (size_t i = 0; i < in.tasks.size(); ++i) {
      GenerateRequest g;
      g.prompt = in.tasks[i].first;
      g.max_tokens = in.task_max_tokens[i];
      g.sampling.temperature = 0;
      POWER_ASSIGN_OR_RETURN(RequestHandle h, rt.submit(m, std::move(g)));
      Completion c = h.wait();
      if (!c.status.ok()) return c.status;
      const std::string answer = trim(in.tasks[i].second);
      ok.push_back(trim(c.text).rfind(answer, 0) == 0);
    }
    return json{{"correct", ok}};
  }
  return Status(StatusCode::kInvalidArgument, "unknown measurement kind").with("kind", kind);
}

// An arm: its settings and where its measurements run.
class Arm {
 public:
  Arm(Settings s, const AbInputs* in, bool fresh, std::vector<std::string> worker_args)
      : settings_(std::move(s)), in_(in), fresh_(fresh), worker_args_(std::move(worker_args)) {}

  // Loads (again) this arm's instance in this process; the previous one is freed first.
  Status load() {
    if (fresh_) return Status();
    unload();
    LoadOptions lo = settings_.load;
    lo.max_waiting = std::max(lo.max_waiting, 1);
    POWER_ASSIGN_OR_RETURN(auto loaded, load_for(in_->model_path, lo));
    rt_ = std::move(loaded.first);
    model_ = std::move(loaded.second);
    return Status();
  }

  void unload() {
    model_.reset();
    rt_.reset();
  }

  Result<json> measure(const json& req) {
    if (!fresh_) return cli::measure(*rt_, *model_, *in_, req);
    return spawn(req);
  }

  const Settings& settings() const { return settings_; }
  std::string artifact_sha256() const { return model_ ? model_->info().sha256 : std::string(); }

 private:
  // Runs `power ab worker` with this arm's environment; its last stdout line is the record.
  Result<json> spawn(const json& req) {
    std::vector<std::string> args = {"/proc/self/exe", "ab", "worker"};
    args.insert(args.end(), worker_args_.begin(), worker_args_.end());
    args.push_back("--worker-settings");
    args.push_back(settings_.canonical.dump());
    args.push_back("--worker-request");
    args.push_back(req.dump());
    std::vector<std::string> env_strings;
    for (char** e = environ; *e; ++e) {
      const std::string kv(*e);
      const std::string name = kv.substr(0, kv.find('='));
      if (!settings_.env.count(name)) env_strings.push_back(kv);
    }
    for (const auto& [k, v] : settings_.env) env_strings.push_back(k + "=" + v);
    std::vector<char*> argv, envp;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    for (auto& e : env_strings) envp.push_back(e.data());
    envp.push_back(nullptr);
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) return Status(StatusCode::kIo, "pipe failed");
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fds[1], 1);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp.data());
    posix_spawn_file_actions_destroy(&fa);
    close(fds[1]);
    if (rc != 0) {
      close(fds[0]);
      return Status(StatusCode::kIo, "cannot start the measurement process").with("errno", rc);
    }
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      return Status(StatusCode::kInternal, "the measurement process failed (its error is above)")
          .with("exit", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    while (!out.empty() && out.back() == '\n') out.pop_back();
    const std::string last =
        out.substr(out.rfind('\n') == std::string::npos ? 0 : out.rfind('\n') + 1);
    json j = json::parse(last, nullptr, false);
    if (j.is_discarded())
      return Status(StatusCode::kInternal, "the measurement process printed no record");
    return j;
  }

  Settings settings_;
  const AbInputs* in_;
  bool fresh_;
  std::vector<std::string> worker_args_;
  std::unique_ptr<Runtime> rt_;
  std::optional<ModelHandle> model_;
};

Result<Settings> read_settings(const std::string& path) {
  POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(path));
  auto j = receipt::parse_json_strict(text);  // duplicate keys are an error
  if (!j.ok()) return Status(j.status()).with("path", path);
  auto s = validate::parse_settings(*j);
  if (!s.ok()) return Status(s.status()).with("path", path);
  return s;
}

// Drops the model file's cached pages (clean pages only: the next read comes from storage).
void drop_page_cache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

Status write_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f) return Status(StatusCode::kIo, "cannot write").with("path", tmp);
    f << text;
    if (!f.flush()) return Status(StatusCode::kIo, "write failed").with("path", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return Status(StatusCode::kIo, "cannot rename into place").with("path", path);
  }
  return Status();
}

Result<int> run_ab(const AbCli& o) {
  if (o.rounds < 1 || o.rounds > 1000) {
    return Status(StatusCode::kInvalidArgument, "--rounds must be 1..1000");
  }
  const int aa_rounds = o.aa_rounds < 0 ? o.rounds : o.aa_rounds;
  if (o.order != "abba" && o.order != "random") {
    return Status(StatusCode::kInvalidArgument, "--order must be abba or random");
  }
  if (o.cache != "warm" && o.cache != "cold") {
    return Status(StatusCode::kInvalidArgument, "--cache must be warm or cold");
  }
  if (o.process != "fresh" && o.process != "shared") {
    return Status(StatusCode::kInvalidArgument, "--process must be fresh or shared");
  }
  // The policy: the file's keys (strict JSON), then --equivalence over its value.
  json policy_json = json::object();
  if (!o.policy_path.empty()) {
    POWER_ASSIGN_OR_RETURN(std::string ptext, read_file_text(o.policy_path));
    auto pj = receipt::parse_json_strict(ptext);
    if (!pj.ok()) return Status(pj.status()).with("path", o.policy_path);
    policy_json = std::move(*pj);
  }
  if (!o.equivalence.empty() && policy_json.is_object()) {
    policy_json["equivalence"] = o.equivalence;
  }
  POWER_ASSIGN_OR_RETURN(validate::Policy policy, validate::policy_from_json(policy_json));
  POWER_ASSIGN_OR_RETURN(Settings base, read_settings(o.baseline_path));
  POWER_ASSIGN_OR_RETURN(Settings cand, read_settings(o.candidate_path));
  const bool fresh = o.process == "fresh";
  if (!fresh && (!base.env.empty() || !cand.env.empty())) {
    return Status(StatusCode::kInvalidArgument,
                  "settings with \"env\" need --process fresh (the environment is read when a "
                  "process starts)");
  }
  if (!fresh && o.cache == "cold") {
    return Status(StatusCode::kInvalidArgument, "--cache cold needs --process fresh");
  }
  AbInputs in;
  POWER_ASSIGN_OR_RETURN(in.model_path, resolve_model_path(o.model_path));
  POWER_ASSIGN_OR_RETURN(in.workload, validate::read_workload(o.workload_path));
  std::string text_sha, tasks_sha;
  if (policy.equivalence == "token-exact") {
    if (o.text_path.empty()) {
      return Status(StatusCode::kInvalidArgument,
                    "--equivalence token-exact needs --text FILE for the teacher-forced KL "
                    "divergence");
    }
    POWER_ASSIGN_OR_RETURN(in.text, read_file_text(o.text_path));
    text_sha = sha256_hex(in.text);
    in.text_ctx = o.text_ctx;
  }
  if (policy.equivalence == "lossy") {
    if (o.tasks_path.empty()) {
      return Status(StatusCode::kInvalidArgument, "--equivalence lossy needs --tasks FILE");
    }
    POWER_ASSIGN_OR_RETURN(in, read_tasks(o.tasks_path, std::move(in), &tasks_sha));
  }

  // Preflight: the artifact's digest, the hardware record, the machine's load.
  auto say = [&](const std::string& s) {
    if (!o.quiet) std::fprintf(stderr, "%s\n", s.c_str());
  };
  validate::HardwareOptions ho;
  ho.model_path = in.model_path;
  ho.threads = base.load.threads;
  json hardware = validate::hardware_record(ho);
  validate::IdleSampler pre;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  json preflight = pre.finish();
  preflight["window_s"] = 1;
  const bool busy_now = preflight["other_cpu_s"].get<double>() > policy.max_other_cpu_fraction;
  say(fmt::format("preflight: load {:.2f}, other processes {:.2f} CPU-s in 1 s{}",
                  preflight["load1"].get<double>(), preflight["other_cpu_s"].get<double>(),
                  busy_now ? " (busy)" : ""));
  if (busy_now && policy.idle_gate == "refuse") {
    return Status(StatusCode::kResourceExhausted,
                  "the machine is busy (idle gate: refuse); other processes used more CPU than "
                  "max_other_cpu_fraction")
        .with("other_cpu_s", preflight["other_cpu_s"].get<double>())
        .with("load1", preflight["load1"].get<double>());
  }

  std::vector<std::string> worker_args = {"-m", in.model_path, "--workload", o.workload_path};
  if (!o.text_path.empty() && !in.text.empty()) {
    worker_args.insert(worker_args.end(),
                       {"--text", o.text_path, "--text-ctx", std::to_string(in.text_ctx)});
  }
  if (!o.tasks_path.empty() && !in.tasks.empty()) {
    worker_args.insert(worker_args.end(), {"--tasks", o.tasks_path});
  }
  Arm arms[2] = {Arm(base, &in, fresh, worker_args), Arm(cand, &in, fresh, worker_args)};
  for (Arm& a : arms) POWER_RETURN_IF_ERROR(a.load());
  // The artifact's digest: shared arms hashed the file as they loaded it (and must agree);
  // fresh ones load in their own processes, so it is hashed here. Every run then reports the
  // digest of what it loaded and must match.
  std::string artifact_sha;
  if (fresh) {
    POWER_ASSIGN_OR_RETURN(Sha256Digest digest, sha256_file(in.model_path));
    artifact_sha = to_hex(digest);
  } else {
    artifact_sha = arms[0].artifact_sha256();
    if (arms[1].artifact_sha256() != artifact_sha) {
      return Status(StatusCode::kIntegrity, "the model file changed between the two loads");
    }
  }
  if (!o.model_sha256.empty() && o.model_sha256 != artifact_sha) {
    return Status(StatusCode::kIntegrity, "the model file's SHA-256 is not --model-sha256")
        .with("file", artifact_sha)
        .with("expected", o.model_sha256);
  }
  const bool probe = policy.equivalence == "bit-exact";

  // Untimed reference pass of each setting (also the warm-up of --cache warm).
  json reference;
  for (int side = 0; side < 2; ++side) {
    POWER_ASSIGN_OR_RETURN(json r, arms[side].measure({{"kind", "run"}, {"logits_probe", probe}}));
    reference[side == 0 ? "baseline" : "candidate"] = {{"token_digest", r["token_digest"]},
                                                       {"logits_digest", r["logits_digest"]}};
  }

  json runs = json::array();
  validate::SplitMix64 rng(o.seed);
  // Shared processes reload both instances every round: where the weights' copies, KV pool
  // and workspace land in memory moves a model's speed by 10-20 % on the VMs measured
  // (docs/VALIDATION.md), a bias that would otherwise follow one instance through every round.
  // Both are freed before either loads, and a seeded coin of its own picks which loads first
  // (freed last, the other instance's memory is what the allocator hands out first): an
  // instance reloaded straight after its own release took back the pages it had just given
  // up, and its bias followed it through every round all the same. Reloaded this way, the
  // bias varies round to round, and the A/A control (two instances of the baseline) and the
  // bootstrap see it as the noise it is. Which instance loads first is counterbalanced: each
  // loads first in half of a phase's rounds (the odd round by a coin), in a seeded shuffled
  // order. With a coin per round, one instance loaded first in 3 or 4 of 4 rounds with chance
  // 5/8 (in 7 of the A/A test's 10 seeds), and in CI an A/A comparison whose candidate loaded
  // first in 3 of its 4 A/B rounds was selected (order medians 1.045 / 1.044, 95 % interval
  // [1.017, 1.052]).
  validate::SplitMix64 load_rng(o.seed ^ 0x6c6f6164ULL);
  auto do_phase = [&](const char* phase, int n_rounds, Arm& a, Arm& b) -> Status {
    std::vector<char> a_first_in(static_cast<size_t>(n_rounds), 0);
    for (int i = 0; i < n_rounds / 2; ++i) a_first_in[static_cast<size_t>(i)] = 1;
    if (n_rounds % 2 == 1) a_first_in.back() = load_rng.below(2) == 0;
    for (int i = n_rounds - 1; i > 0; --i)  // Fisher-Yates, seeded
      std::swap(a_first_in[static_cast<size_t>(i)],
                a_first_in[static_cast<size_t>(load_rng.below(static_cast<uint64_t>(i) + 1))]);
    for (int round = 0; round < n_rounds; ++round) {
      json reload = nullptr;  // shared processes: how this round's instances were loaded
      if (!fresh) {
        const bool a_first = a_first_in[static_cast<size_t>(round)] != 0;
        reload = {{"loaded_first", a_first ? "A" : "B"}, {"warmed_up", o.cache == "warm"}};
        Arm& first = a_first ? a : b;
        Arm& second = a_first ? b : a;
        first.unload();
        second.unload();
        POWER_RETURN_IF_ERROR(first.load());
        POWER_RETURN_IF_ERROR(second.load());
        // --cache warm: an untimed run of each fresh instance first. The first run after a
        // load faults in its KV pool and workspace and ran some 12 % slower than the next
        // (both instances alike, so unbiased, but it made the order that came first in a
        // round look like a different machine).
        if (o.cache == "warm") {
          for (Arm* arm : {&first, &second}) {
            POWER_RETURN_IF_ERROR(
                arm->measure({{"kind", "run"}, {"logits_probe", false}}).status());
          }
        }
      }
      // ABBA: AB then BA; random: a coin per round decides which order goes first.
      const bool ab_first = o.order == "abba" || rng.below(2) == 0;
      for (int k = 0; k < 2; ++k) {
        const bool ab = (k == 0) == ab_first;
        for (int pos = 0; pos < 2; ++pos) {
          const bool is_a = (pos == 0) == ab;
          if (o.cache == "cold") drop_page_cache(in.model_path);
          POWER_ASSIGN_OR_RETURN(
              json r, (is_a ? a : b).measure({{"kind", "run"}, {"logits_probe", probe}}));
          if (r.value("artifact_sha256", "") != artifact_sha) {
            return Status(StatusCode::kIntegrity, "the model file changed during the A/B run");
          }
          r["index"] = static_cast<int64_t>(runs.size());
          r["phase"] = phase;
          r["round"] = round;
          r["order"] = ab ? "AB" : "BA";
          r["arm"] = is_a ? "A" : "B";
          r["settings"] = (&(is_a ? a : b) == &arms[1]) ? "candidate" : "baseline";
          r["reload"] = reload;
          say(fmt::format("{} round {} {} {}: {:.2f} tok/s", phase, round + 1, ab ? "AB" : "BA",
                          is_a ? "A" : "B",
                          r["completion_tokens"].get<double>() / r["wall_s"].get<double>()));
          runs.push_back(std::move(r));
        }
      }
    }
    return Status();
  };
  {
    Arm copy(base, &in, fresh, worker_args);  // the A/A control's second baseline instance
    arms[1].unload();
    POWER_RETURN_IF_ERROR(do_phase("aa", aa_rounds, arms[0], copy));
  }
  POWER_RETURN_IF_ERROR(do_phase("ab", o.rounds, arms[0], arms[1]));

  json quality = json::object();
  if (policy.equivalence == "token-exact") {
    char tmpl[] = "/tmp/power-ab-XXXXXX";
    const int fd = mkstemp(tmpl);
    if (fd < 0) return Status(StatusCode::kIo, "cannot make a temporary file");
    close(fd);
    const std::string base_file = tmpl;
    auto b = arms[0].measure({{"kind", "ppl"}, {"save", base_file}});
    Result<json> c =
        b.ok() ? arms[1].measure({{"kind", "ppl"}, {"base", base_file}}) : Result<json>(b.status());
    std::remove(base_file.c_str());
    if (!c.ok()) return c.status();
    const json& k = (*c)["kld"];
    quality["teacher_forced"] = {
        {"text_sha256", text_sha},      {"n_ctx", in.text_ctx},
        {"positions", k["count"]},      {"ppl_baseline", (*b)["ppl"]},
        {"ppl_candidate", (*c)["ppl"]}, {"mean_kld", k["mean_kld"]},
        {"p99_kld", k["p99_kld"]},      {"same_top1_pct", k["same_top1_pct"]}};
  } else if (policy.equivalence == "lossy") {
    POWER_ASSIGN_OR_RETURN(json b, arms[0].measure({{"kind", "tasks"}}));
    POWER_ASSIGN_OR_RETURN(json c, arms[1].measure({{"kind", "tasks"}}));
    quality["tasks"] = {
        {"tasks_sha256", tasks_sha}, {"baseline", b["correct"]}, {"candidate", c["correct"]}};
  }

  json ev;
  ev["schema"] = "power.ab-evidence.v1";
  ev["created"] = utc_now();
  ev["binding"] = {
      {"hardware", hardware},
      {"artifact", {{"path", in.model_path}, {"sha256", artifact_sha}}},
      {"baseline", {{"settings", base.canonical}, {"sha256", base.sha256}}},
      {"candidate", {{"settings", cand.canonical}, {"sha256", cand.sha256}}},
      {"workload", {{"sha256", in.workload.sha256}, {"requests", in.workload.items.size()}}},
      {"options",
       {{"rounds", o.rounds},
        {"aa_rounds", aa_rounds},
        {"order", o.order},
        {"seed", std::to_string(o.seed)},
        {"cache", o.cache},
        {"process", o.process}}}};
  ev["preflight"] = preflight;
  ev["policy"] = validate::policy_to_json(policy);
  ev["reference"] = reference;
  ev["runs"] = runs;
  ev["quality"] = quality;
  POWER_ASSIGN_OR_RETURN(json d, validate::derive(ev));
  ev["derived"] = d["derived"];
  ev["decision"] = d["decision"];
  POWER_ASSIGN_OR_RETURN(auto key,
                         receipt::SigningKey::load_or_create(receipt::SigningKey::default_dir()));
  POWER_ASSIGN_OR_RETURN(std::string text, validate::sign_evidence(ev, *key));
  POWER_RETURN_IF_ERROR(write_atomically(o.out_path, text + "\n"));

  const json& sp = ev["derived"]["speed"];
  const std::string result = ev["decision"]["result"];
  std::printf(
      "speed: order medians %.4f (AB) %.4f (BA), score %.4f, %.0f%% interval [%.4f, "
      "%.4f], A/A noise floor %.4f\n",
      sp["median_ab"].get<double>(), sp["median_ba"].get<double>(), sp["score"].get<double>(),
      policy.ci_level * 100, sp["ci_low"].get<double>(), sp["ci_high"].get<double>(),
      ev["derived"]["aa"]["noise_floor"].get<double>());
  std::printf("decision: %s\n", result.c_str());
  for (const auto& r : ev["decision"]["reasons"]) {
    std::printf("  %s: %s\n", r["code"].get<std::string>().c_str(),
                r["detail"].get<std::string>().c_str());
  }
  std::printf("evidence: %s\n", o.out_path.c_str());
  if (!o.apply_path.empty()) {
    if (result == "candidate-selected") {
      POWER_ASSIGN_OR_RETURN(std::string c, receipt::canonical_json(cand.canonical));
      POWER_RETURN_IF_ERROR(write_atomically(o.apply_path, c + "\n"));
      std::printf("applied: %s\n", o.apply_path.c_str());
    } else {
      std::printf("not applied: %s unchanged\n", o.apply_path.c_str());
    }
  }
  return result == "candidate-selected" ? 0 : result == "baseline-retained" ? 2 : 3;
}

Result<json> run_worker(const AbCli& o) {
  json sj = json::parse(o.worker_settings, nullptr, false);
  json req = json::parse(o.worker_request, nullptr, false);
  if (sj.is_discarded() || req.is_discarded()) {
    return Status(StatusCode::kInvalidArgument, "worker: bad settings or request JSON");
  }
  POWER_ASSIGN_OR_RETURN(Settings s, validate::parse_settings(sj));
  AbInputs in;
  in.model_path = o.model_path;
  POWER_ASSIGN_OR_RETURN(in.workload, validate::read_workload(o.workload_path));
  if (!o.text_path.empty()) {
    POWER_ASSIGN_OR_RETURN(in.text, read_file_text(o.text_path));
    in.text_ctx = o.text_ctx;
  }
  if (!o.tasks_path.empty()) {
    std::string sha;
    POWER_ASSIGN_OR_RETURN(in, read_tasks(o.tasks_path, std::move(in), &sha));
  }
  LoadOptions lo = s.load;
  lo.max_waiting = std::max(lo.max_waiting, 1);
  POWER_ASSIGN_OR_RETURN(auto loaded, load_for(in.model_path, lo));
  POWER_ASSIGN_OR_RETURN(json record, measure(*loaded.first, loaded.second, in, req));
  if (!s.env.empty()) {
    // What this process saw of the arm's environment (the evidence shows it took effect).
    json seen = json::object();
    for (const auto& [name, value] : s.env) {
      const char* v = std::getenv(name.c_str());
      seen[name] = v ? json(v) : json(nullptr);
    }
    record["env_seen"] = seen;
  }
  return record;
}

}  // namespace

void add_validate_commands(CLI::App& app) {
  static PerplexityCli p;
  auto* ppl = app.add_subcommand(
      "perplexity", "Perplexity of a text, and KL divergence against a base model's saved logits");
  add_model_lib_option(ppl);
  ppl->add_option("-m,--model", p.model_path, "GGUF model file or store name")->required();
  ppl->add_option("-f,--file", p.text_path, "Text file")->required();
  ppl->add_option("-c,--ctx", p.n_ctx, "Tokens per chunk (the second half of each is scored)");
  ppl->add_option("--chunks", p.chunks, "Score at most this many chunks (-1: all)");
  ppl->add_option("-t,--threads", p.threads, "Compute threads (0: all cores)");
  ppl->add_option("--kv-type", p.kv_type, "KV cache type: f16 or f32");
  ppl->add_option("--save-logits", p.save_path,
                  "Write this model's log-probabilities (the base of a later KL comparison)");
  ppl->add_option("--kl-divergence-base", p.base_path,
                  "Compare with log-probabilities saved by --save-logits");
  ppl->add_flag("--json", p.json_out, "One JSON object instead of text");
  ppl->callback([] { run_perplexity(p); });

  static HardwareCli h;
  auto* hw = app.add_subcommand("hardware", "Print the hardware record (JSON)");
  hw->add_option("-m,--model", h.model_path, "Also probe the storage this file lives on");
  hw->add_option("-t,--threads", h.threads, "Threads a measurement would use");
  hw->add_flag("--no-probes", h.no_probes, "Skip the read-rate and DRAM-bandwidth probes");
  hw->callback([] { run_hardware(h); });

  static AbCli a;
  auto* ab = app.add_subcommand("ab", "Two-order A/B validation of two settings");
  ab->require_subcommand(0, 1);
  add_model_lib_option(ab);
  ab->add_option("-m,--model", a.model_path, "GGUF model file or store name");
  ab->add_option("--baseline", a.baseline_path, "Baseline settings (JSON)");
  ab->add_option("--candidate", a.candidate_path, "Candidate settings (JSON)");
  ab->add_option("--workload", a.workload_path, "Requests, one JSON object per line");
  ab->add_option("--rounds", a.rounds, "A/B rounds; each runs both orders");
  ab->add_option("--aa-rounds", a.aa_rounds, "A/A control rounds (default: --rounds)");
  ab->add_option("--order", a.order, "abba, or random (a seeded coin per round)");
  ab->add_option("--seed", a.seed, "Seed of --order random");
  ab->add_option("--equivalence", a.equivalence, "bit-exact, token-exact (default) or lossy");
  ab->add_option("--text", a.text_path, "Text for the teacher-forced KL check (token-exact)");
  ab->add_option("--text-ctx", a.text_ctx, "Chunk size of the teacher-forced pass");
  ab->add_option("--tasks", a.tasks_path, "Task set, JSONL {prompt, answer} (lossy)");
  ab->add_option("--cache", a.cache, "warm (default) or cold (page cache dropped per run)");
  ab->add_option("--process", a.process, "shared (default) or fresh (a process per run)");
  ab->add_option("--policy", a.policy_path, "Gate thresholds (JSON; docs/VALIDATION.md)");
  ab->add_option("--model-sha256", a.model_sha256, "Refuse unless the model file has this hash");
  ab->add_option("--out", a.out_path, "Evidence file to write");
  ab->add_option("--apply", a.apply_path, "Write the candidate's settings here when selected");
  ab->add_flag("-q,--quiet", a.quiet, "No per-run progress on stderr");
  ab->callback([ab] {
    if (ab->got_subcommand("verify") || ab->got_subcommand("worker")) return;
    if (a.model_path.empty() || a.baseline_path.empty() || a.candidate_path.empty() ||
        a.workload_path.empty()) {
      return report_error(Status(StatusCode::kInvalidArgument,
                                 "power ab needs -m, --baseline, --candidate and --workload"));
    }
    auto rc = run_ab(a);
    if (!rc.ok()) return report_error(rc.status());
    set_exit_code(*rc);
  });

  auto* verify = ab->add_subcommand("verify", "Re-derive an evidence file and check its signature");
  verify->add_option("file", a.verify_path, "Evidence file")->required();
  verify->add_option("--public-key", a.public_key, "Also require this signer (64 hex digits)");
  verify->callback([] {
    auto text = read_file_text(a.verify_path);
    if (!text.ok()) return report_error(text.status());
    Status st = validate::verify_evidence(*text, a.public_key);
    if (!st.ok()) return report_error(st);
    std::printf("ok: signature valid, every derived figure and the decision re-derived\n");
  });

  auto* worker = ab->add_subcommand("worker", "");  // hidden: one measurement of --process fresh
  worker->group("");
  worker->add_option("-m,--model", a.model_path)->required();
  worker->add_option("--workload", a.workload_path)->required();
  worker->add_option("--text", a.text_path);
  worker->add_option("--text-ctx", a.text_ctx);
  worker->add_option("--tasks", a.tasks_path);
  worker->add_option("--worker-settings", a.worker_settings)->required();
  worker->add_option("--worker-request", a.worker_request)->required();
  worker->callback([] {
    auto r = run_worker(a);
    if (!r.ok()) return report_error(r.status());
    std::printf("%s\n", r->dump().c_str());
  });
}

}  // namespace power::cli
