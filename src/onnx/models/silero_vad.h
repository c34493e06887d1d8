// Silero VAD (snakers4/silero-vad v5/v6 ONNX graphs): per-window speech probabilities and the
// speech segments that Silero's get_speech_timestamps derives from them with its default rules.
//
// Windows: 512 samples at 16 kHz (256 at 8 kHz), each preceded by the last 64 (32) samples of
// the previous window (zeros before the first), the last window zero-padded; the recurrent
// state [2, 1, 128] is carried from window to window. The model's inputs are named input, state
// and sr (int64 scalar); outputs output [1, 1] and stateN.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "onnx/graph.h"

namespace power::onnx {

struct VadOptions {
  float threshold = 0.5f;
  float neg_threshold = -1.0f;  // < 0: max(threshold - 0.15, 0.01)
  int min_speech_ms = 250;
  double max_speech_s = std::numeric_limits<double>::infinity();
  int min_silence_ms = 100;
  int speech_pad_ms = 30;
  double min_silence_at_max_speech_ms = 98;
  bool use_max_possible_silence_at_max_speech = true;
};

struct SpeechSegment {
  int64_t start = 0;  // samples
  int64_t end = 0;
};

// One audio stream's progress through the model (SileroVad::start, then SileroVad::step until
// finished): the next window's position, the last samples of the previous window, the
// recurrent state [2, 1, 128] and the probabilities so far.
struct VadStream {
  const std::vector<float>* samples = nullptr;  // not owned; outlives the stream
  int sample_rate = 16000;
  size_t pos = 0;
  std::vector<float> context;
  std::vector<float> state;
  std::vector<float> probs;
  bool finished() const { return pos >= samples->size(); }
};

class SileroVad {
 public:
  explicit SileroVad(std::shared_ptr<const Model> model) : model_(std::move(model)) {}
  // Checks the graph's inputs (input, state, sr) before any audio is run.
  static Result<SileroVad> load(const std::string& path, const LoadOptions& options = {});
  static Status validate(const Model& model);

  // One probability per window. sample_rate must be 16000 or 8000.
  Result<std::vector<float>> probabilities(const std::vector<float>& samples, int sample_rate,
                                           ThreadPool* pool = nullptr) const;
  // A stream at the start of `samples` (kept by pointer). sample_rate must be 16000 or 8000.
  static Result<VadStream> start(const std::vector<float>& samples, int sample_rate);
  // The next window of every stream as one batch ([B, context + window] input, [2, B, 128]
  // state): streams of one sample rate, none finished. Each stream's probability and state are
  // bit-identical to a step of that stream alone (the kernels' paths do not depend on the
  // batch: tests/onnx/silero_vad_test.cpp), so requests can be stacked.
  Status step(const std::vector<VadStream*>& streams, ThreadPool* pool = nullptr) const;
  static int window_size(int sample_rate) { return sample_rate == 16000 ? 512 : 256; }
  static int context_size(int sample_rate) { return sample_rate == 16000 ? 64 : 32; }
  const Model& model() const { return *model_; }

 private:
  std::shared_ptr<const Model> model_;
};

// Silero's segmentation over per-window probabilities (sample positions).
std::vector<SpeechSegment> speech_segments(const std::vector<float>& probs, int64_t n_samples,
                                           int sample_rate, const VadOptions& opt = {});

// Seconds rounded to milliseconds as get_speech_timestamps(return_seconds=True,
// time_resolution=3) reports them.
double samples_to_seconds(int64_t samples, int sample_rate);

}  // namespace power::onnx
