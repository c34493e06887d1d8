#include "validate/ab_run.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "base/file.h"
#include "base/sha256.h"
#include "kernels/cpu/isa.h"
#include "validate/stats.h"

namespace power::validate {
namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// Busy CPU seconds of the whole machine since boot (all fields of the "cpu" line except idle
// and iowait).
double machine_busy_s() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  in >> cpu;
  if (cpu != "cpu") return 0;
  double v[10] = {};
  for (double& x : v) in >> x;
  const double busy =
      v[0] + v[1] + v[2] + v[5] + v[6] + v[7];  // user nice system irq softirq steal
  const long hz = sysconf(_SC_CLK_TCK);
  return hz > 0 ? busy / static_cast<double>(hz) : 0;
}

double own_cpu_s() {
  double s = 0;
  for (int who : {RUSAGE_SELF, RUSAGE_CHILDREN}) {
    struct rusage ru {};
    if (getrusage(who, &ru) != 0) continue;
    s += static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
  }
  return s;
}

double load1() {
  std::ifstream in("/proc/loadavg");
  double l = 0;
  in >> l;
  return l;
}

}  // namespace

Result<Workload> read_workload(const std::string& path) {
  POWER_ASSIGN_OR_RETURN(std::string text, read_file_text(path));
  Workload w;
  w.sha256 = sha256_hex(text);
  std::istringstream in(text);
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    auto err = [&](const std::string& why) {
      return Status(StatusCode::kInvalidArgument, fmt::format("workload line {}: {}", line_no, why))
          .with("path", path);
    };
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object()) return err("not a JSON object");
    WorkItem item;
    for (const auto& [key, v] : j.items()) {
      if (key == "prompt" && v.is_string()) {
        item.prompt = v.get<std::string>();
      } else if (key == "max_tokens" && v.is_number_integer() && v.get<int64_t>() >= 1 &&
                 v.get<int64_t>() <= 1 << 20) {
        item.max_tokens = v.get<int32_t>();
      } else if (key == "temperature" && v.is_number() && v.get<double>() >= 0) {
        item.temperature = v.get<float>();
      } else if (key == "seed" && v.is_number_unsigned()) {
        item.seed = v.get<uint64_t>();
      } else if (key == "ignore_eos" && v.is_boolean()) {
        item.ignore_eos = v.get<bool>();
      } else {
        return err(fmt::format("bad or unknown field '{}'", key));
      }
    }
    if (item.prompt.empty()) return err("needs a non-empty \"prompt\"");
    w.items.push_back(std::move(item));
  }
  if (w.items.empty()) {
    return Status(StatusCode::kInvalidArgument, "the workload has no requests").with("path", path);
  }
  return w;
}

IdleSampler::IdleSampler() : busy0_(machine_busy_s()), own0_(own_cpu_s()), load1_(load1()) {}

json IdleSampler::finish() const {
  const double own = own_cpu_s() - own0_;
  const double other = std::max(0.0, machine_busy_s() - busy0_ - own);
  return {{"load1", load1_}, {"other_cpu_s", other}, {"own_cpu_s", own}};
}

Result<json> run_workload(Runtime& rt, const ModelHandle& model, const Workload& w,
                          bool logits_probe) {
  Sha256 token_hash;
  std::vector<double> gaps, ttfts;
  int64_t completion = 0, prompt = 0, cached = 0;
  std::vector<int32_t> first_output;
  IdleSampler idle;
  const auto start = Clock::now();
  for (size_t i = 0; i < w.items.size(); ++i) {
    const WorkItem& item = w.items[i];
    GenerateRequest req;
    req.prompt = item.prompt;
    req.max_tokens = item.max_tokens;
    req.ignore_eos = item.ignore_eos;
    req.sampling.temperature = item.temperature;
    req.sampling.seed = item.seed;
    const auto submitted = Clock::now();
    auto last = submitted;
    bool first = true;
    req.on_stream = [&](const StreamEvent& e) {
      if (e.token < 0) return true;
      const auto now = Clock::now();
      if (first) {
        ttfts.push_back(ms_between(submitted, now));
        first = false;
      } else {
        gaps.push_back(ms_between(last, now));
      }
      last = now;
      return true;
    };
    POWER_ASSIGN_OR_RETURN(RequestHandle h, rt.submit(model, std::move(req)));
    Completion c = h.wait();
    if (!c.status.ok()) return c.status;
    const uint32_t n = static_cast<uint32_t>(c.tokens.size());
    token_hash.update(&n, sizeof(n));
    token_hash.update(c.tokens.data(), c.tokens.size() * sizeof(int32_t));
    completion += c.usage.completion_tokens;
    prompt += c.usage.prompt_tokens;
    cached += c.usage.cached_prompt_tokens;
    if (i == 0) first_output = c.tokens;
  }
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();
  json run;
  run["completion_tokens"] = completion;
  run["prompt_tokens"] = prompt;
  run["cached_prompt_tokens"] = cached;
  run["wall_s"] = wall;
  run["ttft_median_ms"] = median(ttfts);
  run["token_latency_p50_ms"] = percentile(gaps, 50);
  run["token_latency_p99_ms"] = percentile(gaps, 99);
  run["token_digest"] = to_hex(token_hash.finish());
  run["idle"] = idle.finish();
  run["artifact_sha256"] = model.info().sha256;
  run["kernel_isa"] = std::string(cpu_isa_name(cpu_isa()));
  run["threads"] = model.info().threads;
  run["logits_digest"] = nullptr;
  if (logits_probe) {
    std::vector<int32_t> probe = model.tokenize(w.items[0].prompt, true);
    probe.insert(probe.end(), first_output.begin(), first_output.end());
    if (static_cast<int64_t>(probe.size()) > model.info().n_ctx) {
      probe.resize(static_cast<size_t>(model.info().n_ctx));
    }
    POWER_ASSIGN_OR_RETURN(std::vector<float> logits, rt.logits(model, probe));
    run["logits_digest"] = to_hex(sha256(logits.data(), logits.size() * sizeof(float)));
  }
  return run;
}

}  // namespace power::validate
