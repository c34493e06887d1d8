// PaddleOCR PP-OCRv4 (detection: DBNet on MobileNetV3; recognition: SVTR-LCNet with greedy CTC).
//
// Detection pre-processing follows PaddleOCR's DetResizeForTest (longest side limited to
// 960 px, both sides rounded to multiples of 32) and NormalizeImage (BGR, ImageNet mean/std);
// DBNet post-processing binarizes the probability map at 0.3, takes 8-connected regions, fits
// each a minimum-area rectangle (convex hull + rotating calipers), scores it by the mean
// probability inside (drop < 0.6), expands it by area * 1.5 / perimeter on every side (the
// "unclip"), and maps it back to image coordinates. Lines are sorted top to bottom, then left
// to right within 10 px. Each box is cut out with bilinear sampling (edges replicated), resized
// to height 48 and recognized; lines whose mean character score is below 0.5 are dropped.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "onnx/graph.h"
#include "onnx/media.h"

namespace power::onnx {

struct OcrLine {
  std::string text;
  float score = 0;                          // mean probability of the kept characters
  std::array<std::array<float, 2>, 4> box;  // clockwise from top-left, image pixels
};

struct OcrOptions {
  int det_limit_side = 960;
  float det_threshold = 0.3f;
  float box_threshold = 0.6f;
  float unclip_ratio = 1.5f;
  float drop_score = 0.5f;
};

class PaddleOcr {
 public:
  // det may be null (recognition only). keys: ppocr_keys_v1.txt, one character per line.
  static Result<PaddleOcr> load(const std::string& det_path, const std::string& rec_path,
                                const std::string& keys_path, const LoadOptions& options = {});

  // Recognizes one text line image (any height; resized to 48).
  Result<OcrLine> recognize(const Image& rgb, ThreadPool* pool = nullptr) const;
  // Raw recognizer input exactly as given: rgb must already be 48 px high.
  Result<OcrLine> recognize_h48(const Image& rgb, ThreadPool* pool = nullptr) const;
  // Full page: detection, crops, recognition.
  Result<std::vector<OcrLine>> run(const Image& rgb, const OcrOptions& opt = {},
                                   ThreadPool* pool = nullptr) const;
  // Detection only: boxes in image coordinates with their scores.
  Result<std::vector<OcrLine>> detect(const Image& rgb, const OcrOptions& opt = {},
                                      ThreadPool* pool = nullptr) const;

  // The stages of run() for callers that recognize the lines themselves (the server stacks the
  // lines of concurrent requests): after detect(), the recognizer's input [1, 3, 48, W] for one
  // detected box of the same RGB image (W >= 320: narrower lines are padded, so they share
  // W = 320).
  Result<Tensor> box_input(const Image& rgb, const std::array<std::array<float, 2>, 4>& box) const;
  // Recognizes lines of one width as one [B, 3, 48, W] run of `stacked` (the recognizer
  // loaded with LoadOptions::batch_inputs; a single line runs on the recognizer as loaded) and
  // decodes each; a line's result is box-less (its input's rectangle) as from recognize().
  Result<std::vector<OcrLine>> recognize_lines(const std::vector<const Tensor*>& inputs,
                                               const Model* stacked,
                                               ThreadPool* pool = nullptr) const;
  // The same recognizer loaded for stacked lines (LoadOptions::batch_inputs).
  Result<std::shared_ptr<const Model>> load_stacked_recognizer() const;
  // True when run() keeps `line`: it has text and its score is not below opt.drop_score.
  static bool keep(const OcrLine& line, const OcrOptions& opt) {
    return !(line.score < opt.drop_score) && !line.text.empty();
  }

  const Model* det_model() const { return det_.get(); }
  const Model& rec_model() const { return *rec_; }

 private:
  // Runs the recognizer on its input [1, 3, 48, W] and decodes the classes (greedy CTC).
  Result<OcrLine> recognize_input(const Tensor& x, ThreadPool* pool) const;
  // The recognizer's input of a line image (any height; resized to 48, padded to 320).
  Result<Tensor> line_input(const Image& rgb) const;
  // Greedy CTC over rows [0, T) of one line's class scores [T, C].
  Result<OcrLine> decode(const float* scores, int64_t T, int64_t C, int64_t W) const;

  std::shared_ptr<const Model> det_;
  std::shared_ptr<const Model> rec_;
  std::string rec_path_;
  std::vector<std::string> keys_;  // index 1.. of the classifier; the last class is ' '
};

// Character error rate: Levenshtein distance over Unicode code points / reference length.
double character_error_rate(const std::string& hypothesis, const std::string& reference);

}  // namespace power::onnx
