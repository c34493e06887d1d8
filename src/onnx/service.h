// The ONNX models behind `power serve` (POST /v1/audio/vad, /v1/ocr, /v1/classify) and the
// `power vad|ocr|classify --receipt` commands: loaded models by id, admission, receipts.
//
// Models are configured as "[ID=]FILE_OR_STORE_NAME" (the id defaults to the file's stem) for
// Silero VAD and MNIST-style classifiers, and as one det/rec/keys triple for PaddleOCR.
// Admission: each execution's memory is known before it runs — the graph's planned peak of
// intermediates (Model::plan_memory for the actual input shapes: MNIST [1,1,28,28], Silero's
// window, OCR detection at the resized image size, OCR recognition at its widest line
// 3072 px, the larger of the two phases) plus the decoded input and the result buffers. That
// reservation is taken from a byte budget (runtime::Admission, the generation path's
// bookkeeping), then the execution takes one of `max_running` compute slots. A request that
// can never fit is kDoesNotFit; one that does not fit now, or finds every slot taken, waits (at
// most `max_waiting` waiters, else kQueueFull) until its deadline, then kDeadlineExceeded.
// Microbatching (max_batch > 1): admitted VAD requests are streams; a request whose stream is
// ready takes a free slot and runs the next window of up to max_batch ready streams of its
// sample rate as one batch (SileroVad::step), then puts them back, so windows of concurrent
// requests share model runs while each request's probabilities stay bit-identical to running
// alone. A classify request is a one-step item of the same kind: its image runs stacked with
// up to max_batch - 1 other ready images on the classifier loaded with
// LoadOptions::batch_inputs. That stacked model is checked at load: at batch sizes 2-16, the
// powers of two and max_batch, every image of a batch of distinct images must get the bits of
// its solo run, else the classifier runs unbatched (ServiceModelInfo::batch_note says why).
// With ocr_max_batch > 1 (off by default: on a CPU it does not pay, docs/ONNX.md "OCR lines"),
// an OCR request's detection is a one-item step in the same queue, then each of its lines in
// turn is an item stacked with the ready lines of other requests that have the same padded
// width (every line narrower than 320 px is padded to 320), at most 4 x 320 px of lines per
// run, on the recognizer loaded with batch_inputs and checked at load the same way (random
// lines 320 and 416 px wide).
// An item's reservation covers its share of a full batch's peak (measured at load).
// Receipts: power.receipt.v1 with model.format "onnx" (docs/RECEIPTS.md "ONNX executions"):
// model files' SHA-256, configuration, device, input digest (the exact request bytes) and
// output digest (the canonical JSON of the result), signed with the runtime key.
// Thread-safety: execute() and stats() may be called from any thread at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/status.h"
#include "onnx/models/paddleocr.h"
#include "onnx/models/silero_vad.h"

namespace power::onnx {

enum class Task { kVad, kOcr, kClassify };
const char* task_name(Task t);  // "vad", "ocr", "classify"

struct ServiceOptions {
  std::vector<std::string> vad_models;       // "[ID=]FILE"
  std::vector<std::string> classify_models;  // "[ID=]FILE"
  std::string ocr_det, ocr_rec, ocr_keys;    // all three, or none
  std::string ocr_id = "paddleocr";
  int max_running = 2;        // executions at once
  int max_waiting = 64;       // executions waiting for memory before kQueueFull
  uint64_t budget_bytes = 0;  // for intermediates and inputs; 0: the device budget
                              // (default_memory_budget_bytes()) less the loaded weights
  int threads = 1;            // compute threads per execution
  int max_batch = 32;         // VAD windows or classify images of concurrent requests stacked
                              // into one execution (1: each request runs alone)
  int ocr_max_batch = 1;      // OCR lines of concurrent requests stacked into one recognizer
                              // run (1: each line alone; see "Microbatching" above)
  int batch_wait_us = 0;      // with max_batch > 1: how long a run short of a full batch
                              // waits, from when its oldest item became ready, for more
  uint64_t max_input_bytes = 64ull << 20;
  std::string keys_dir;  // receipt key; empty: SigningKey::default_dir()
  bool any() const {
    return !vad_models.empty() || !classify_models.empty() || !ocr_det.empty() ||
           !ocr_rec.empty() || !ocr_keys.empty();
  }
};

// A config-file key of `power serve` for these options ("vad_model", "classify_model",
// "ocr_det", "ocr_rec", "ocr_keys", "ocr_id", "onnx_max_running", "onnx_max_waiting",
// "onnx_budget_bytes", "onnx_threads", "onnx_max_batch", "onnx_ocr_max_batch",
// "onnx_batch_wait_us"); *handled false when the key is not one of them.
Status apply_config_key(const std::string& key, const nlohmann::json& value, ServiceOptions* o,
                        bool* handled);

struct ExecRequest {
  Task task = Task::kVad;
  std::string model;       // id; empty: the only model of the task
  std::string_view input;  // WAV bytes (vad) or image bytes (ocr, classify)
  bool want_receipt = false;
  std::optional<std::chrono::steady_clock::time_point> deadline;  // for waiting on memory
  VadOptions vad;
};

struct ExecResult {
  nlohmann::json result;  // {"probs","segments"} | {"lines"} | {"class","scores"}
  std::string receipt;    // canonical JSON text when asked for
  std::string model;      // the id that ran
  uint64_t reserved_bytes = 0;
};

struct ServiceModelInfo {
  std::string id;
  Task task;
  std::vector<std::string> files;  // paths
  int64_t weight_bytes = 0;
  int max_batch = 1;       // the most requests' items one run stacks (1: unbatched)
  std::string batch_note;  // why a classifier or the OCR recognizer runs unbatched
};

struct ServiceStats {
  struct PerModel {
    uint64_t executions = 0;  // finished with a result
    uint64_t failures = 0;    // admitted, then failed (bad input found while running)
    std::map<std::string, uint64_t> rejections;  // "does_not_fit", "queue_full", "deadline",
                                                 // "invalid_input"
    // Model runs by the number of VAD windows, classify images or OCR lines (recognizer runs)
    // they stacked (1 when an item ran alone).
    std::map<int, uint64_t> batch_sizes;
  };
  std::map<std::string, PerModel> models;
  int running = 0;  // executions on a compute slot (a batched step counts once)
  int waiting = 0;  // executions waiting for memory or a compute slot
  int streams = 0;  // VAD requests being stepped in batches
  uint64_t reserved_bytes = 0;
  uint64_t budget_bytes = 0;
};

class Service {
 public:
  // Loads and checks every model (resolve maps a store name or path to a file path).
  static Result<std::unique_ptr<Service>> create(
      const ServiceOptions& options,
      const std::function<Result<std::string>(const std::string&)>& resolve);
  ~Service();

  // kNotFound (unknown model), kInvalidArgument (bad input), kDoesNotFit, kQueueFull,
  // kDeadlineExceeded, kPolicyRefused never (no policies here).
  Result<ExecResult> execute(const ExecRequest& req);

  std::vector<ServiceModelInfo> models() const;
  ServiceStats stats() const;

  struct Impl;

 private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// The JSON results, shared with the CLI so `power vad --json` and the HTTP answer agree.
nlohmann::json vad_json(const std::vector<float>& probs, const std::vector<SpeechSegment>& segs,
                        int sample_rate);
nlohmann::json ocr_json(const std::vector<OcrLine>& lines);
nlohmann::json classify_json(int digit, const std::vector<float>& scores);

}  // namespace power::onnx
