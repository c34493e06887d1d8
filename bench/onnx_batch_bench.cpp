// Throughput of the ONNX service (onnx::Service, the code behind POST /v1/audio/vad) under
// concurrent VAD callers, with microbatching (--onnx-max-batch, default 32) against without
// (max_batch 1), in alternating rounds; prints windows per second of each round and the
// median of the same-round ratios (docs/ONNX.md "Microbatching").
//   onnx_batch_bench SILERO_ONNX WAV [callers=32] [requests_per_caller=4] [rounds=5]
//                    [max_running=2] [threads=1]
// Every caller sends the same WAV `requests_per_caller` times, one request after another;
// all callers start together. Each request's answer is compared with the solo answer.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "onnx/service.h"

using namespace power::onnx;

namespace {

std::string slurp(const char* path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Round {
  double windows_per_s = 0;
  bool same = true;
};

[[noreturn]] void die(const power::Status& st) {
  std::fprintf(stderr, "%s\n", st.to_string().c_str());
  std::exit(1);
}

std::unique_ptr<Service> make_service(const std::string& model, int max_batch, int max_running,
                                      int threads) {
  ServiceOptions o;
  o.vad_models = {model};
  o.max_batch = max_batch;
  o.max_running = max_running;
  o.threads = threads;
  o.max_waiting = 1 << 20;
  auto svc = Service::create(o, nullptr);
  if (!svc.ok()) die(svc.status());
  return std::move(*svc);
}

// One VAD request's result object.
nlohmann::json vad_once(Service& svc, const std::string& wav) {
  ExecRequest req;
  req.task = Task::kVad;
  req.input = wav;
  auto res = svc.execute(req);
  if (!res.ok()) die(res.status());
  return std::move(res->result);
}

Round run(const std::string& model, const std::string& wav, int max_batch, int callers,
          int requests, int max_running, int threads, const std::string& want) {
  const std::unique_ptr<Service> svc = make_service(model, max_batch, max_running, threads);
  std::atomic<int> ready{0};
  std::atomic<bool> same{true};
  std::atomic<size_t> windows{0};
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < callers; ++c) {
    ts.emplace_back([&] {
      ready++;
      while (ready.load() < callers) std::this_thread::yield();
      for (int r = 0; r < requests; ++r) {
        const nlohmann::json result = vad_once(*svc, wav);
        windows += result["probs"].size();
        if (result.dump() != want) same = false;
      }
    });
  }
  for (auto& t : ts) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {static_cast<double>(windows.load()) / s, same.load()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: onnx_batch_bench SILERO_ONNX WAV [callers] [requests] [rounds] "
                 "[max_running] [threads]\n");
    return 2;
  }
  const std::string model = argv[1], wav = slurp(argv[2]);
  const int callers = argc > 3 ? std::atoi(argv[3]) : 32;
  const int requests = argc > 4 ? std::atoi(argv[4]) : 4;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 5;
  const int max_running = argc > 6 ? std::atoi(argv[6]) : 2;
  const int threads = argc > 7 ? std::atoi(argv[7]) : 1;
  // The solo answer, for the comparison.
  const std::string want = vad_once(*make_service(model, 1, 1, 1), wav).dump();
  std::printf("%d callers x %d requests, max_running %d, threads %d\n", callers, requests,
              max_running, threads);
  std::vector<double> ratios;
  bool all_same = true;
  for (int i = 0; i < rounds; ++i) {
    // Alternate which goes first.
    Round solo, batched;
    if (i % 2 == 0) {
      solo = run(model, wav, 1, callers, requests, max_running, threads, want);
      batched = run(model, wav, 32, callers, requests, max_running, threads, want);
    } else {
      batched = run(model, wav, 32, callers, requests, max_running, threads, want);
      solo = run(model, wav, 1, callers, requests, max_running, threads, want);
    }
    all_same = all_same && solo.same && batched.same;
    ratios.push_back(batched.windows_per_s / solo.windows_per_s);
    std::printf("round %d: max_batch 1 %.0f windows/s, max_batch 32 %.0f windows/s, %.2fx\n", i,
                solo.windows_per_s, batched.windows_per_s, ratios.back());
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median batched / unbatched: %.2fx; answers %s the solo answer\n",
              ratios[ratios.size() / 2], all_same ? "all identical to" : "DIFFER from");
  return all_same ? 0 : 1;
}
