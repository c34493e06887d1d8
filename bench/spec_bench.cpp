// spec_bench: request-wide tokens/s of speculative decoding against plain decoding, in the
// same process and run (docs/SPECULATIVE.md). Out of CI.
//
//   spec_bench TARGET.gguf [DRAFT.gguf] [--n N] [--k K] [--s S1,S2,...] [--threads T]
//              [--reps R] [--prompt TEXT] [--modes plain,ngram,draft,mtp] [--fixed-k]
//              [--bias-prompt B]
//
// --s (models with recurrent layers): each speculative mode runs once per snapshot count,
// named MODE/sS, and prints its restores and replays. --bias-prompt B adds a logit bias of B
// to every distinct token of the prompt: the output is then made of the prompt's tokens in an
// order the model decides (text that repeats its input, as extraction or code edits do), which
// gives n-gram drafts something to find on random-weight files.
//
// For each configuration (plain, ngram, draft when DRAFT is given, mtp when the target has
// MTP layers) it runs one greedy request of N tokens (ignore_eos) on the same loaded model and
// reports wall time from submit to completion, tokens/s, the speed-up over plain, acceptance
// and tokens per target pass, and whether the output equals plain decoding token for token.
// The configurations run back to back, R rounds (default 3); every run is printed, then the
// median tokens/s per mode and the median of the per-round speed-ups (spec / plain of the same
// round), with the load average before and after (the machine may be shared).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <sys/resource.h>

#include "power/runtime.h"

namespace {

struct Args {
  std::string target, draft, prompt, modes = "plain,ngram,draft,mtp";
  int n = 128, k = 4, threads = 0, reps = 3;
  std::vector<int> s;  // snapshot counts (empty: the default)
  bool fixed_k = false;
  float bias_prompt = 0;
};

struct Row {
  std::string name;
  double seconds = 0;
  double cpu_seconds = 0;  // user + system time of the process's threads during the run
  power::Completion c;
};

double cpu_now() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_utime.tv_sec + u.ru_stime.tv_sec + 1e-6 * (u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

std::string loadavg() {
  std::ifstream f("/proc/loadavg");
  std::string a, b, c;
  f >> a >> b >> c;
  return a + " " + b + " " + c;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n == 0 ? 0.0 : (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]));
}

}  // namespace

int main(int argc, char** argv) {
  Args a;
  a.prompt =
      "The list: alpha beta gamma delta, alpha beta gamma delta, alpha beta gamma delta, alpha";
  std::vector<std::string> pos;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", s.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "--n") {
      a.n = std::atoi(next().c_str());
    } else if (s == "--k") {
      a.k = std::atoi(next().c_str());
    } else if (s == "--s") {
      std::stringstream ss(next());
      for (std::string v; std::getline(ss, v, ',');) a.s.push_back(std::atoi(v.c_str()));
    } else if (s == "--bias-prompt") {
      a.bias_prompt = static_cast<float>(std::atof(next().c_str()));
    } else if (s == "--fixed-k") {
      a.fixed_k = true;
    } else if (s == "--threads") {
      a.threads = std::atoi(next().c_str());
    } else if (s == "--reps") {
      a.reps = std::max(1, std::atoi(next().c_str()));
    } else if (s == "--modes") {
      a.modes = next();
    } else if (s == "--prompt") {
      a.prompt = next();
    } else {
      pos.push_back(s);
    }
  }
  if (pos.empty() || pos.size() > 2) {
    std::fprintf(stderr,
                 "usage: spec_bench TARGET.gguf [DRAFT.gguf] [--n N] [--k K] [--s S1,S2,...] "
                 "[--threads T] [--reps R] [--prompt TEXT] [--modes plain,ngram,draft,mtp] "
                 "[--fixed-k] [--bias-prompt B]\n");
    return 2;
  }
  a.target = pos[0];
  if (pos.size() == 2) a.draft = pos[1];

  auto rt = power::Runtime::create({});
  if (!rt.ok()) {
    std::fprintf(stderr, "%s\n", rt.status().to_string().c_str());
    return 1;
  }
  power::LoadOptions lo;
  lo.n_ctx = 1024;
  lo.max_running = 1;
  lo.threads = a.threads;
  lo.draft_model = a.draft;
  if (!a.s.empty()) lo.speculative.s = *std::max_element(a.s.begin(), a.s.end());
  auto m = (*rt)->load(a.target, lo);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
    return 1;
  }
  auto run = [&](const std::string& name, const std::string& mode, int snapshots) {
    Row row;
    row.name = name;
    power::GenerateRequest req;
    req.prompt = a.prompt;
    req.max_tokens = a.n;
    req.ignore_eos = true;
    req.sampling.temperature = 0;
    if (a.bias_prompt != 0) {
      std::vector<int32_t> ids = m->tokenize(a.prompt, /*add_bos=*/false);
      std::sort(ids.begin(), ids.end());
      ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
      for (int32_t id : ids) req.sampling.logit_bias.emplace_back(id, a.bias_prompt);
    }
    if (mode != "off") {
      power::SpeculativeOptions so;
      so.mode = mode;
      so.k = a.k;
      so.s = snapshots;
      so.adaptive = !a.fixed_k;
      req.speculative = so;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    auto h = (*rt)->submit(*m, std::move(req));
    if (!h.ok()) {
      row.c.status = h.status();
      return row;
    }
    row.c = h->wait();
    row.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    row.cpu_seconds = cpu_now() - c0;
    return row;
  };
  struct Config {
    std::string name, mode;
    int s = 0;
  };
  std::vector<Config> configs;
  std::stringstream ms(a.modes);
  for (std::string mode; std::getline(ms, mode, ',');) {
    if (mode == "draft" && a.draft.empty()) continue;
    if (mode == "plain") {
      configs.push_back({mode, "off", 0});
    } else if (a.s.empty()) {
      configs.push_back({mode, mode, 0});
    } else {
      for (int sv : a.s) configs.push_back({mode + "/s" + std::to_string(sv), mode, sv});
    }
  }
  std::printf("target %s%s%s, %d tokens, k %d (%s), threads %d, %d rounds\n", a.target.c_str(),
              a.draft.empty() ? "" : ", draft ", a.draft.c_str(), a.n, a.k,
              a.fixed_k ? "fixed" : "adaptive", m->info().threads, a.reps);
  std::printf("load average before: %s\n", loadavg().c_str());
  std::printf("%-5s %-9s %9s %9s %8s %8s %8s %9s %9s %10s %s\n", "round", "mode", "seconds",
              "tok/s", "speedup", "cpu-s", "cpu-spd", "drafted", "accepted", "tok/pass",
              "identical");
  std::map<std::string, std::vector<double>> tps, speedup, cpu_speedup;
  std::map<std::string, Row> last;
  bool all_identical = true;
  for (int rep = 0; rep < a.reps; ++rep) {
    double plain_tps = 0, plain_cpu = 0;
    std::vector<int32_t> plain_tokens;
    for (const auto& [name, mode, snapshots] : configs) {
      Row r = run(name, mode, snapshots);
      if (!r.c.status.ok()) {
        if (rep == 0) {
          std::printf("%-5d %-9s skipped: %s\n", rep, name.c_str(), r.c.status.to_string().c_str());
        }
        continue;
      }
      const double t = r.c.tokens.size() / r.seconds;
      // Tokens per CPU-second: the work a run costs, less sensitive than wall time to other
      // jobs on a shared machine (spinning threads count, bounded by the pool's spin time).
      const double tc = r.c.tokens.size() / r.cpu_seconds;
      if (name == "plain") {
        plain_tps = t;
        plain_cpu = tc;
        plain_tokens = r.c.tokens;
      }
      const bool same = plain_tokens.empty() || r.c.tokens == plain_tokens;
      all_identical = all_identical && same;
      tps[name].push_back(t);
      if (plain_tps > 0) speedup[name].push_back(t / plain_tps);
      if (plain_cpu > 0) cpu_speedup[name].push_back(tc / plain_cpu);
      std::printf("%-5d %-9s %9.3f %9.2f %7.2fx %8.2f %7.2fx %9lld %9lld %10.2f %s\n", rep,
                  name.c_str(), r.seconds, t, plain_tps > 0 ? t / plain_tps : 0.0, r.cpu_seconds,
                  plain_cpu > 0 ? tc / plain_cpu : 0.0,
                  static_cast<long long>(r.c.speculative.drafted),
                  static_cast<long long>(r.c.speculative.accepted), r.c.speculative.tokens_per_pass,
                  plain_tokens.empty() ? "-"
                  : same               ? "yes"
                                       : "NO");
      std::fflush(stdout);
      last[name] = std::move(r);
    }
  }
  std::printf("load average after: %s\n", loadavg().c_str());
  std::printf("median over %d rounds:\n", a.reps);
  for (const auto& [name, mode, snapshots] : configs) {
    if (tps[name].empty()) continue;
    const auto& u = last[name].c.speculative;
    std::printf(
        "  %-9s %8.2f tok/s  speed-up %5.2fx (cpu time %5.2fx)  acceptance %5.1f%%  tokens/pass "
        "%5.2f  restores %lld  replays %lld (%lld tokens)\n",
        name.c_str(), median(tps[name]), median(speedup[name]), median(cpu_speedup[name]),
        100.0 * u.acceptance_rate, u.tokens_per_pass, static_cast<long long>(u.restores),
        static_cast<long long>(u.replays), static_cast<long long>(u.replayed_tokens));
  }
  std::printf("every output identical to plain: %s\n", all_identical ? "yes" : "NO");
  return 0;
}
