// MNIST (mnist-8.onnx, ONNX model zoo) against onnxruntime's logits in ../shared; the model
// loaded for stacked images (LoadOptions::batch_inputs) against its solo runs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "base/thread_pool.h"
#include "onnx/graph.h"
#include "onnx/media.h"
#include "onnx/models/mnist.h"
#include "onnx_test_util.h"

namespace power::onnx {
namespace {

using power::testing::shared_dir;

TEST(OnnxMnist, LogitsMatchOnnxruntime) {
  POWER_REQUIRE_SHARED();
  std::string dir = shared_dir() + "/models/vision/";
  auto model = Model::load_file(dir + "mnist-8.onnx");
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto img = load_image(dir + "mnist_nine.bmp", 1);
  ASSERT_TRUE(img.ok()) << img.status().to_string();
  auto r = mnist_classify(**model, *img);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  std::ifstream f(dir + "expected_mnist-8_mnist_nine_ort1.30.0.json");
  auto expected = nlohmann::json::parse(f);
  EXPECT_EQ(r->digit, 9);
  EXPECT_EQ(r->digit, expected["argmax"].get<int>());
  ASSERT_EQ(r->logits.size(), 10u);
  for (int i = 0; i < 10; ++i) {
    double want = expected["logits"][i].get<double>();
    EXPECT_LE(std::fabs(r->logits[i] - want), 1e-3 * std::fabs(want))
        << "logit " << i << " got " << r->logits[i];
  }
}

TEST(OnnxMnist, PlannedPeakEqualsMeasuredPeak) {
  POWER_REQUIRE_SHARED();
  std::string dir = shared_dir() + "/models/vision/";
  for (bool fuse : {true, false}) {
    LoadOptions options;
    options.fuse_elementwise = fuse;
    auto model = Model::load_file(dir + "mnist-8.onnx", options);
    ASSERT_TRUE(model.ok());
    auto plan = (*model)->plan_memory({{1, 1, 28, 28}});
    ASSERT_TRUE(plan.ok()) << plan.status().to_string();
    EXPECT_TRUE(plan->complete());
    // By hand: conv1 out 8x28x28 f32 = 25088 B. Unfused, its +bias and relu are 25088 each and
    // the largest moment holds two such buffers (input and output of an elementwise node):
    // 50176 B. Fused, the Add and Relu run on the Conv's output, and the largest moment is that
    // output with the 8x14x14 MaxPool output (6272 B): 31360 B.
    EXPECT_EQ(plan->peak_bytes, fuse ? 8 * 28 * 28 * 4 + 8 * 14 * 14 * 4 : 2 * 8 * 28 * 28 * 4);
    RunStats stats;
    std::vector<float> zeros(28 * 28, 0.0f);
    auto out = (*model)->run({make_f32({1, 1, 28, 28}, zeros)}, nullptr, &stats);
    ASSERT_TRUE(out.ok());
    EXPECT_EQ(stats.peak_bytes, plan->peak_bytes);
  }
}

// Runs reuse the buffers of earlier runs (BufferPool): a run after another input's run gives
// the same bits as the first run of a freshly loaded model.
TEST(OnnxMnist, RecycledBuffersDoNotChangeResults) {
  POWER_REQUIRE_SHARED();
  std::string dir = shared_dir() + "/models/vision/";
  auto model = Model::load_file(dir + "mnist-8.onnx");
  ASSERT_TRUE(model.ok());
  std::vector<float> ramp(28 * 28), ones(28 * 28, 1.0f);
  for (size_t i = 0; i < ramp.size(); ++i) ramp[i] = static_cast<float>(i % 29) / 28.0f;
  auto run = [](const Model& m, const std::vector<float>& px) {
    auto out = m.run({make_f32({1, 1, 28, 28}, px)});
    EXPECT_TRUE(out.ok());
    const float* v = (*out)[0].data<float>();
    return std::vector<float>(v, v + (*out)[0].numel());
  };
  const std::vector<float> first = run(**model, ramp);
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> other = run(**model, ones);
    EXPECT_EQ(run(**model, ramp), first) << "round " << i;
    auto fresh = Model::load_file(dir + "mnist-8.onnx");
    ASSERT_TRUE(fresh.ok());
    EXPECT_EQ(run(**fresh, ones), other) << "round " << i;
  }
  EXPECT_GT((*model)->held_buffer_bytes(), 0);
}

// mnist-8 fixes batch 1 twice: its input is [1, 1, 28, 28] and a Reshape flattens the pooled
// [1, 16, 4, 4] to the constant [1, 256]. Loaded with batch_inputs, the input's first dimension
// is free and that Reshape copies it ([B, 256]); the Reshape of the weight Parameter193 to
// [256, 10] (a constant) stays. Every image of a batch gets the bits it gets alone from the
// model as published, at batch sizes 2 to 33 and with two threads; the nine still reads as 9.
TEST(OnnxMnist, StackedImagesGetTheirSoloBits) {
  POWER_REQUIRE_SHARED();
  std::string dir = shared_dir() + "/models/vision/";
  auto solo = Model::load_file(dir + "mnist-8.onnx");
  ASSERT_TRUE(solo.ok());
  LoadOptions lo;
  lo.batch_inputs = true;
  auto stacked = Model::load_file(dir + "mnist-8.onnx", lo);
  ASSERT_TRUE(stacked.ok()) << stacked.status().to_string();
  EXPECT_EQ((*stacked)->batch_reshapes(), 1);
  EXPECT_EQ((*solo)->batch_reshapes(), 0);
  // The published model refuses a stack.
  auto refused = (*solo)->run({make_f32({2, 1, 28, 28}, std::vector<float>(2 * 784))});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("must have shape"), std::string::npos);

  auto nine = load_image(dir + "mnist_nine.bmp", 1);
  ASSERT_TRUE(nine.ok());
  auto nine_px = mnist_pixels(*nine);
  ASSERT_TRUE(nine_px.ok());
  // 40 distinct images: the nine shifted right by k % 5 columns, scaled by (k + 1) / 40, with a
  // ramp added to a quarter of them.
  std::vector<std::vector<float>> images;
  for (int k = 0; k < 40; ++k) {
    std::vector<float> px(784, 0.0f);
    for (int y = 0; y < 28; ++y)
      for (int x = k % 5; x < 28; ++x) {
        px[y * 28 + x] = std::floor((*nine_px)[y * 28 + x - k % 5] * (k + 1) / 40.0f);
        if (k % 4 == 3) px[y * 28 + x] += static_cast<float>((x + y) % 17);
      }
    images.push_back(std::move(px));
  }
  std::vector<std::vector<float>> alone;
  for (const auto& px : images) {
    auto r = mnist_classify_batch(**solo, {&px});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    alone.push_back((*r)[0].logits);
  }
  ThreadPool pool(2);
  for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
    for (int b = 2; b <= 33; ++b) {
      std::vector<const std::vector<float>*> px;
      std::vector<size_t> which;
      for (int i = 0; i < b; ++i) {
        which.push_back((static_cast<size_t>(b) * 3 + i) % images.size());
        px.push_back(&images[which.back()]);
      }
      auto r = mnist_classify_batch(**stacked, px, p);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      ASSERT_EQ(r->size(), static_cast<size_t>(b));
      for (int i = 0; i < b; ++i) {
        ASSERT_EQ((*r)[i].logits.size(), 10u);
        EXPECT_EQ(std::memcmp((*r)[i].logits.data(), alone[which[i]].data(), 10 * sizeof(float)), 0)
            << "batch " << b << ", image " << i << (p ? ", two threads" : "");
      }
    }
  }
  // The nine itself, in a stack of three, against onnxruntime's class.
  const std::vector<float> ones(784, 1.0f);
  auto r = mnist_classify_batch(**stacked, {&ones, &*nine_px, &images[7]});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ((*r)[1].digit, 9);
  // Planned peak by hand: B times the solo peak (8x28x28 + 8x14x14 floats), as measured.
  auto plan = (*stacked)->plan_memory({{4, 1, 28, 28}});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_TRUE(plan->complete());
  EXPECT_EQ(plan->peak_bytes, 4 * (8 * 28 * 28 * 4 + 8 * 14 * 14 * 4));
  RunStats stats;
  auto out =
      (*stacked)->run({make_f32({4, 1, 28, 28}, std::vector<float>(4 * 784))}, nullptr, &stats);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].shape, (Shape{4, 10}));
  EXPECT_EQ(stats.peak_bytes, plan->peak_bytes);
}

TEST(OnnxMnist, WrongImageSizeIsAnError) {
  POWER_REQUIRE_SHARED();
  auto model = Model::load_file(shared_dir() + "/models/vision/mnist-8.onnx");
  ASSERT_TRUE(model.ok());
  Image img;
  img.width = img.height = 27;
  img.channels = 1;
  img.data.assign(27 * 27, 0);
  auto r = mnist_classify(**model, img);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("28x28"), std::string::npos);
  // Wrong input shape straight into the graph: a clear error, not a crash.
  auto out = (*model)->run({make_f32({1, 1, 28, 27}, std::vector<float>(28 * 27))});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().message().find("Input3"), std::string::npos) << out.status().to_string();
}

}  // namespace
}  // namespace power::onnx
