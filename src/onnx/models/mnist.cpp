#include "onnx/models/mnist.h"

namespace power::onnx {

Result<MnistResult> mnist_classify(const Model& model, const Image& image, ThreadPool* pool) {
  const Graph& g = model.graph();
  if (g.inputs.size() != 1 || g.outputs.size() != 1) {
    return make_error(StatusCode::kInvalidArgument,
                      "an MNIST model has one input and one output; this one has {} and {}",
                      g.inputs.size(), g.outputs.size());
  }
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
  POWER_ASSIGN_OR_RETURN(auto outs, model.run({make_f32({1, 1, 28, 28}, px)}, pool));
  const Tensor& y = outs[0];
  if (y.dtype != DType::kF32 || y.numel() != 10) {
    return make_error(StatusCode::kInvalidArgument, "MNIST output must hold 10 floats, got {}",
                      shape_str(y.shape));
  }
  MnistResult r;
  r.logits.assign(y.data<float>(), y.data<float>() + 10);
  r.digit = 0;
  for (int i = 1; i < 10; ++i)
    if (r.logits[i] > r.logits[r.digit]) r.digit = i;
  return r;
}

}  // namespace power::onnx
