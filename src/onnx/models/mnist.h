// MNIST digit classifier (ONNX model zoo mnist-8): a 28x28 gray image -> 10 logits.
// Pre-processing as the model was trained: raw 0..255 pixel values, top-down rows, no scaling.
#pragma once

#include <memory>
#include <vector>

#include "onnx/graph.h"
#include "onnx/media.h"

namespace power::onnx {

struct MnistResult {
  int digit = -1;
  std::vector<float> logits;  // 10 scores (unnormalized)
};

// The image must be 28x28 (gray or RGB; RGB is converted to gray by the decoder's weights).
Result<MnistResult> mnist_classify(const Model& model, const Image& image,
                                   ThreadPool* pool = nullptr);

// The model's input for one image: 28x28 gray values, 0..255.
Result<std::vector<float>> mnist_pixels(const Image& image);

// Several images (their mnist_pixels) in one run of a [B, 1, 28, 28] input, one result per
// image. Above one image the model must take a stacked batch (LoadOptions::batch_inputs).
// mnist_classify is this with one image. stats, when given, gets the run's (Model::run).
Result<std::vector<MnistResult>> mnist_classify_batch(
    const Model& model, const std::vector<const std::vector<float>*>& pixels,
    ThreadPool* pool = nullptr, RunStats* stats = nullptr);

}  // namespace power::onnx
