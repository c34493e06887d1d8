// `power bench`: prefill (pp<N>) and decode (tg<N>) throughput of a model file, reported as
// llama-bench reports them: random token ids, an empty F16 KV cache per repetition, one
// warm-up run, then the median and spread of -r repetitions per thread count.
//   pp<N>: one forward pass over N prompt tokens (logits of the last one).
//   tg<N>: N forward passes of one token each, from an empty cache.
// Text output is a table; --json prints one JSON object per line and test, each with the
// hardware record (validate/hardware.h).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/cpu.h"
#include "base/huge_pages.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "host/model.h"
#include "kernels/cpu/isa.h"
#include "validate/hardware.h"

namespace power::cli {
namespace {

struct BenchOptions {
  std::string model_path;
  int64_t n_prompt = 512;
  int64_t n_gen = 128;
  std::string threads = "";
  int reps = 5;
  bool json = false;
};

Result<std::vector<int>> parse_threads(const std::string& text) {
  std::vector<int> out;
  if (text.empty()) {
    out.push_back(cpu_features().logical_cores);
    return out;
  }
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      const int v = std::stoi(item, &used);
      if (used != item.size() || v < 1 || v > 1024) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      return Status(StatusCode::kInvalidArgument, "-t takes thread counts like 1,2")
          .with("value", item);
    }
  }
  if (out.empty()) return Status(StatusCode::kInvalidArgument, "-t names no thread count");
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double stddev(const std::vector<double>& v) {
  if (v.size() < 2) return 0.0;
  double mean = 0.0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double ss = 0.0;
  for (double x : v) ss += (x - mean) * (x - mean);
  return std::sqrt(ss / static_cast<double>(v.size() - 1));
}

// One timed run of a test; returns seconds.
// Models with recurrent layers: `rec` holds the sequence's state slot (zeroed each run).
Result<double> run_once(const Model& model, Workspace& ws, KvCache& kv,
                        std::unique_ptr<RecurrentState>& rec, const std::vector<int32_t>& tokens,
                        bool prefill, float* logits) {
  KvSequence seq(&kv);
  POWER_RETURN_IF_ERROR(model.attach_state(seq, rec));
  const auto start = std::chrono::steady_clock::now();
  if (prefill) {
    ForwardChunk chunk{&seq, tokens, false};
    POWER_RETURN_IF_ERROR(model.forward(ws, std::span<const ForwardChunk>(&chunk, 1), logits));
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) {
      ForwardChunk chunk{&seq, std::span<const int32_t>(&tokens[i], 1), false};
      POWER_RETURN_IF_ERROR(model.forward(ws, std::span<const ForwardChunk>(&chunk, 1), logits));
    }
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

void run_bench(const BenchOptions& o) {
  auto threads = parse_threads(o.threads);
  if (!threads.ok()) return report_error(threads.status());
  if (o.reps < 1 || o.n_prompt < 0 || o.n_gen < 0) {
    return report_error(Status(StatusCode::kInvalidArgument, "-r must be >= 1, -p and -n >= 0"));
  }
  auto file = GgufFile::open(o.model_path);
  if (!file.ok()) return report_error(file.status());
  std::shared_ptr<const GgufFile> shared(std::move(*file));
  auto model_or = load_model(shared);
  if (!model_or.ok()) return report_error(model_or.status());
  const Model& model = **model_or;
  const ModelHparams& hp = model.hparams();
  const int64_t n_ctx = std::max<int64_t>(1, std::max(o.n_prompt, o.n_gen));
  auto kv = KvCache::create(model.kv_config(n_ctx, 1, GgmlType::F16));
  if (!kv.ok()) return report_error(kv.status());
  std::unique_ptr<RecurrentState> rec;  // declared before the sequences run_once makes
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(hp.n_vocab - 1));
  std::vector<float> logits(static_cast<size_t>(hp.n_vocab));
  const std::string isa(cpu_isa_name(cpu_isa()));
  // --json: the hardware record (docs/VALIDATION.md) once, on every line, so each line names
  // what it was measured on.
  nlohmann::json hardware;
  if (o.json) {
    validate::HardwareOptions ho;
    ho.model_path = o.model_path;
    hardware = validate::hardware_record(ho);
  }
  if (!o.json) {
    std::printf("model: %s (%s, %lld layers, n_embd %lld), isa %s\n", o.model_path.c_str(),
                hp.arch.c_str(), static_cast<long long>(hp.n_layer),
                static_cast<long long>(hp.n_embd), isa.c_str());
    std::printf("| %-8s | %7s | %16s | %10s |\n", "test", "threads", "tokens/s median", "stddev");
  }
  for (int t : *threads) {
    auto ws = model.make_workspace(std::max<int64_t>(1, o.n_prompt), n_ctx, t);
    if (!ws.ok()) return report_error(ws.status());
    for (int pass = 0; pass < 2; ++pass) {
      const bool prefill = pass == 0;
      const int64_t n = prefill ? o.n_prompt : o.n_gen;
      if (n == 0) continue;
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (auto& id : tokens) id = tok(rng);
      std::vector<double> rates;
      for (int rep = -1; rep < o.reps; ++rep) {  // rep -1: warm-up, not counted
        auto secs = run_once(model, **ws, **kv, rec, tokens, prefill, logits.data());
        if (!secs.ok()) return report_error(secs.status());
        if (rep >= 0) rates.push_back(static_cast<double>(n) / *secs);
      }
      const std::string name = (prefill ? "pp" : "tg") + std::to_string(n);
      const double med = median(rates), sd = stddev(rates);
      if (o.json) {
        nlohmann::ordered_json j;
        j["test"] = name;
        j["threads"] = t;
        j["tokens_per_s_median"] = med;
        j["tokens_per_s_stddev"] = sd;
        j["tokens_per_s"] = rates;
        j["isa"] = isa;
        j["model"] = o.model_path;
        // Where the weights live: packed copies (advised for huge pages) and what the kernel
        // maps with huge pages after the test (base/huge_pages.h).
        const HugePageUsage hu = process_huge_page_usage();
        j["packed_bytes"] = model.repacked().bytes();
        j["huge_pages"] = {{"thp", transparent_huge_page_mode()},
                           {"packed_advised_bytes", model.repacked().huge_advised_bytes()},
                           {"anon_bytes", hu.anon_bytes},
                           {"file_bytes", hu.file_bytes}};
        hardware["threads"] = t;
        j["hardware"] = hardware;
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("| %-8s | %7d | %16.2f | %10.2f |\n", name.c_str(), t, med, sd);
      }
      std::fflush(stdout);
    }
  }
  if (!o.json) {
    const HugePageUsage hu = process_huge_page_usage();
    const std::string thp = transparent_huge_page_mode();
    std::printf(
        "packed copies %.1f MB (%.1f MB advised for huge pages; THP %s); huge pages "
        "mapped: anonymous %.1f MB, file %.1f MB\n",
        static_cast<double>(model.repacked().bytes()) / 1e6,
        static_cast<double>(model.repacked().huge_advised_bytes()) / 1e6,
        thp.empty() ? "absent" : thp.c_str(), static_cast<double>(hu.anon_bytes) / 1e6,
        static_cast<double>(hu.file_bytes) / 1e6);
  }
}

}  // namespace

void add_bench_commands(CLI::App& app) {
  static BenchOptions o;
  auto* bench = app.add_subcommand("bench", "Prefill and decode tokens/s of a model file");
  add_model_lib_option(bench);
  bench->add_option("-m,--model", o.model_path, "GGUF model file")->required();
  bench->add_option("-p,--n-prompt", o.n_prompt, "Prompt tokens of the pp test (0: skip)");
  bench->add_option("-n,--n-gen", o.n_gen, "Generated tokens of the tg test (0: skip)");
  bench->add_option("-t,--threads", o.threads, "Comma-separated thread counts (default: all)");
  bench->add_option("-r,--repetitions", o.reps, "Timed repetitions after one warm-up");
  bench->add_flag("--json", o.json, "One JSON object per line and test");
  bench->callback([] { run_bench(o); });
}

}  // namespace power::cli
