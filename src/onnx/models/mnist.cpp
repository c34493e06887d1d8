#include "onnx/models/mnist.h"

#include <cstring>

namespace power::onnx {

Result<std::vector<float>> mnist_pixels(const Image& image) {
  if (image.width != 28 || image.height != 28) {
    return make_error(StatusCode::kInvalidArgument, "MNIST needs a 28x28 image, got {}x{}",
                      image.width, image.height);
  }
  std::vector<float> px(28 * 28);
  for (int i = 0; i < 28 * 28; ++i) {
    if (image.channels == 1) {
      px[i] = image.data[i];
    } else {
      const uint8_t* p = &image.data[i * image.channels];
      px[i] = static_cast<float>((p[0] * 77 + p[1] * 150 + p[2] * 29) >> 8);
    }
  }
  return px;
}

Result<std::vector<MnistResult>> mnist_classify_batch(
    const Model& model, const std::vector<const std::vector<float>*>& pixels, ThreadPool* pool,
    RunStats* stats) {
  const Graph& g = model.graph();
  if (g.inputs.size() != 1 || g.outputs.size() != 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "an MNIST model has one input and one output; this one has {} and {}",
                      g.inputs.size(), g.outputs.size());
  }
  const int64_t B = static_cast<int64_t>(pixels.size());
  if (B == 0) return std::vector<MnistResult>();
  constexpr size_t kPixels = 28 * 28;
  POWER_ASSIGN_OR_RETURN(Tensor x, make_tensor(DType::kF32, {B, 1, 28, 28}));
  for (int64_t b = 0; b < B; ++b) {
    if (pixels[b]->size() != kPixels) {
      return make_error(StatusCode::kInvalidArgument, "MNIST needs 784 pixels, got {}",
                        pixels[b]->size());
    }
    std::memcpy(x.mutable_data<float>() + b * kPixels, pixels[b]->data(), kPixels * sizeof(float));
  }
  POWER_ASSIGN_OR_RETURN(auto outs, model.run({std::move(x)}, pool, stats));
  const Tensor& y = outs[0];
  if (y.dtype != DType::kF32 || y.numel() != 10 * B) {
    return make_error(StatusCode::kInvalidArgument, "MNIST output must hold {} floats, got {}",
                      10 * B, shape_str(y.shape));
  }
  std::vector<MnistResult> rs(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    MnistResult& r = rs[b];
    r.logits.assign(y.data<float>() + b * 10, y.data<float>() + b * 10 + 10);
    r.digit = 0;
    for (int i = 1; i < 10; ++i)
      if (r.logits[i] > r.logits[r.digit]) r.digit = i;
  }
  return rs;
}

Result<MnistResult> mnist_classify(const Model& model, const Image& image, ThreadPool* pool) {
  POWER_ASSIGN_OR_RETURN(std::vector<float> px, mnist_pixels(image));
  POWER_ASSIGN_OR_RETURN(std::vector<MnistResult> rs, mnist_classify_batch(model, {&px}, pool));
  return std::move(rs[0]);
}

}  // namespace power::onnx
