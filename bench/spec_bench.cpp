// spec_bench: request-wide tokens/s of speculative decoding against plain decoding, in the
// same process and run (docs/SPECULATIVE.md). Out of CI.
//
//   spec_bench TARGET.gguf [DRAFT.gguf] [--n N] [--k K] [--threads T] [--prompt TEXT]
//
// For each configuration (plain, ngram, and draft when DRAFT is given) it runs one greedy
// request of N tokens (ignore_eos) on the same loaded model and reports wall time from
// submit to completion, tokens/s, the speed-up over plain, acceptance and tokens per target
// pass, and whether the output equals plain decoding token for token. Each configuration
// runs twice; the faster run is reported (the machine is shared).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "power/runtime.h"

namespace {

struct Args {
  std::string target, draft, prompt;
  int n = 128, k = 4, threads = 0;
};

struct Row {
  std::string name;
  double seconds = 0;
  power::Completion c;
};

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
    } else if (s == "--threads") {
      a.threads = std::atoi(next().c_str());
    } else if (s == "--prompt") {
      a.prompt = next();
    } else {
      pos.push_back(s);
    }
  }
  if (pos.empty() || pos.size() > 2) {
    std::fprintf(stderr,
                 "usage: spec_bench TARGET.gguf [DRAFT.gguf] [--n N] [--k K] [--threads T] "
                 "[--prompt TEXT]\n");
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
  auto m = (*rt)->load(a.target, lo);
  if (!m.ok()) {
    std::fprintf(stderr, "%s\n", m.status().to_string().c_str());
    return 1;
  }
  auto run = [&](const char* name, std::optional<power::SpeculativeOptions> spec) {
    Row best;
    best.name = name;
    for (int rep = 0; rep < 2; ++rep) {
      power::GenerateRequest req;
      req.prompt = a.prompt;
      req.max_tokens = a.n;
      req.ignore_eos = true;
      req.sampling.temperature = 0;
      req.speculative = spec;
      const auto t0 = std::chrono::steady_clock::now();
      auto h = (*rt)->submit(*m, std::move(req));
      if (!h.ok()) {
        std::fprintf(stderr, "%s: %s\n", name, h.status().to_string().c_str());
        std::exit(1);
      }
      power::Completion c = h->wait();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep == 0 || s < best.seconds) {
        best.seconds = s;
        best.c = std::move(c);
      }
    }
    return best;
  };
  std::vector<Row> rows;
  rows.push_back(run("plain", std::nullopt));
  power::SpeculativeOptions ng;
  ng.mode = "ngram";
  ng.k = a.k;
  rows.push_back(run("ngram", ng));
  if (!a.draft.empty()) {
    power::SpeculativeOptions dr;
    dr.mode = "draft";
    dr.k = a.k;
    rows.push_back(run("draft", dr));
  }
  std::printf("target %s%s%s, %d tokens, k %d (adaptive), threads %d\n", a.target.c_str(),
              a.draft.empty() ? "" : ", draft ", a.draft.c_str(), a.n, a.k, m->info().threads);
  std::printf("%-6s %9s %9s %8s %9s %9s %10s %s\n", "mode", "seconds", "tok/s", "speedup",
              "drafted", "accepted", "tok/pass", "identical");
  const Row& plain = rows.front();
  for (const Row& r : rows) {
    const double tps = r.c.tokens.size() / r.seconds;
    const double plain_tps = plain.c.tokens.size() / plain.seconds;
    std::printf("%-6s %9.3f %9.2f %7.2fx %9lld %9lld %10.2f %s\n", r.name.c_str(), r.seconds, tps,
                tps / plain_tps, static_cast<long long>(r.c.speculative.drafted),
                static_cast<long long>(r.c.speculative.accepted), r.c.speculative.tokens_per_pass,
                r.c.tokens == plain.c.tokens ? "yes" : "NO");
  }
  return 0;
}
