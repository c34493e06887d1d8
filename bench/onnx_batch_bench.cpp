// Throughput of the ONNX service (onnx::Service, the code behind POST /v1/audio/vad,
// /v1/classify and /v1/ocr) under concurrent callers, with microbatching (--onnx-max-batch 32,
// its default; for OCR --onnx-ocr-max-batch 32) against without (1), in alternating rounds;
// prints items (VAD windows, classified images or recognized OCR lines) per second of each
// round and the median of the same-round ratios (docs/ONNX.md "Microbatching").
//   onnx_batch_bench MODEL INPUT [callers=32] [requests_per_caller=4] [rounds=5]
//                    [max_running=2] [threads=1] [batch_wait_us=0]
// INPUT is a .wav file (MODEL is Silero VAD) or an image: MODEL is an MNIST classifier, or a
// directory with ch_PP-OCRv4_det_infer.onnx, ch_PP-OCRv4_rec_infer.onnx and ppocr_keys_v1.txt
// (OCR).
// Every caller sends INPUT `requests_per_caller` times, one request after another; all callers
// start together. Each request's answer is compared with the solo answer.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
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
  double items_per_s = 0;
  double mean_batch = 0;  // items per model run
  bool same = true;
};

[[noreturn]] void die(const power::Status& st) {
  std::fprintf(stderr, "%s\n", st.to_string().c_str());
  std::exit(1);
}

int g_batch_wait_us = 0;  // --onnx-batch-wait-us of the batched runs

std::unique_ptr<Service> make_service(Task task, const std::string& model, int max_batch,
                                      int max_running, int threads) {
  ServiceOptions o;
  o.batch_wait_us = max_batch > 1 ? g_batch_wait_us : 0;
  if (task == Task::kOcr) {
    o.ocr_det = model + "/ch_PP-OCRv4_det_infer.onnx";
    o.ocr_rec = model + "/ch_PP-OCRv4_rec_infer.onnx";
    o.ocr_keys = model + "/ppocr_keys_v1.txt";
    o.ocr_max_batch = max_batch;  // --onnx-ocr-max-batch
  } else {
    (task == Task::kVad ? o.vad_models : o.classify_models) = {model};
  }
  o.max_batch = max_batch;
  o.max_running = max_running;
  o.threads = threads;
  o.max_waiting = 1 << 20;
  auto svc = Service::create(o, nullptr);
  if (!svc.ok()) die(svc.status());
  return std::move(*svc);
}

// One request's result object.
nlohmann::json exec_once(Service& svc, Task task, const std::string& input) {
  ExecRequest req;
  req.task = task;
  req.input = input;
  auto res = svc.execute(req);
  if (!res.ok()) die(res.status());
  return std::move(res->result);
}

Round run(Task task, const std::string& model, const std::string& input, int max_batch, int callers,
          int requests, int max_running, int threads, const std::string& want) {
  const std::unique_ptr<Service> svc = make_service(task, model, max_batch, max_running, threads);
  std::atomic<int> ready{0};
  std::atomic<bool> same{true};
  std::atomic<size_t> items{0};
  std::vector<std::thread> ts;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < callers; ++c) {
    ts.emplace_back([&] {
      ready++;
      while (ready.load() < callers) std::this_thread::yield();
      for (int r = 0; r < requests; ++r) {
        const nlohmann::json result = exec_once(*svc, task, input);
        items += task == Task::kVad   ? result["probs"].size()
                 : task == Task::kOcr ? result["lines"].size()
                                      : 1;
        if (result.dump() != want) same = false;
      }
    });
  }
  for (auto& t : ts) t.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  uint64_t runs = 0, stacked = 0;
  for (const auto& [id, pm] : svc->stats().models)
    for (const auto& [size, n] : pm.batch_sizes) {
      runs += n;
      stacked += static_cast<uint64_t>(size) * n;
    }
  return {static_cast<double>(items.load()) / s,
          runs ? static_cast<double>(stacked) / static_cast<double>(runs) : 0.0, same.load()};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: onnx_batch_bench MODEL INPUT.wav|IMAGE [callers] [requests] [rounds] "
                 "[max_running] [threads] [batch_wait_us]\n");
    return 2;
  }
  const std::string model = argv[1], input_path = argv[2], input = slurp(argv[2]);
  const Task task = input_path.size() > 4 && input_path.substr(input_path.size() - 4) == ".wav"
                        ? Task::kVad
                    : std::filesystem::is_directory(model) ? Task::kOcr
                                                           : Task::kClassify;
  const char* unit = task == Task::kVad ? "windows" : task == Task::kOcr ? "lines" : "images";
  const int callers = argc > 3 ? std::atoi(argv[3]) : 32;
  const int requests = argc > 4 ? std::atoi(argv[4]) : 4;
  const int rounds = argc > 5 ? std::atoi(argv[5]) : 5;
  const int max_running = argc > 6 ? std::atoi(argv[6]) : 2;
  const int threads = argc > 7 ? std::atoi(argv[7]) : 1;
  g_batch_wait_us = argc > 8 ? std::atoi(argv[8]) : 0;
  // The solo answer, for the comparison.
  const std::string want = exec_once(*make_service(task, model, 1, 1, 1), task, input).dump();
  std::printf("%s: %d callers x %d requests, max_running %d, threads %d, batch wait %d us\n",
              task_name(task), callers, requests, max_running, threads, g_batch_wait_us);
  std::vector<double> ratios;
  bool all_same = true;
  for (int i = 0; i < rounds; ++i) {
    auto one = [&](int max_batch) {
      return run(task, model, input, max_batch, callers, requests, max_running, threads, want);
    };
    // Alternate which goes first.
    Round solo, batched;
    if (i % 2 == 0) {
      solo = one(1);
      batched = one(32);
    } else {
      batched = one(32);
      solo = one(1);
    }
    all_same = all_same && solo.same && batched.same;
    ratios.push_back(batched.items_per_s / solo.items_per_s);
    std::printf("round %d: max_batch 1 %.0f %s/s, max_batch 32 %.0f %s/s (%.1f per run), %.2fx\n",
                i, solo.items_per_s, unit, batched.items_per_s, unit, batched.mean_batch,
                ratios.back());
  }
  std::sort(ratios.begin(), ratios.end());
  std::printf("median batched / unbatched: %.2fx; answers %s the solo answer\n",
              ratios[ratios.size() / 2], all_same ? "all identical to" : "DIFFER from");
  return all_same ? 0 : 1;
}
