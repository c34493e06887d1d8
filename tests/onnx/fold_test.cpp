// BatchNormalization folded into the preceding Conv at load (graph.cpp fold_batch_norms): the
// node disappears and the outputs equal BatchNormalization(Conv(x)) computed here by hand;
// a Conv output that something else also reads is left unfolded.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <cmath>

#include "onnx/graph.h"

namespace power::onnx {
namespace {

void add_init(::onnx::GraphProto* g, const std::string& name, std::vector<int64_t> dims,
              const std::vector<float>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(1);
  for (int64_t d : dims) t->add_dims(d);
  for (float f : v) t->add_float_data(f);
}

// x [1,2,1,3] -> Conv 1x1 (2 -> 2 channels, bias b) -> BN -> y; optionally the Conv output
// "c" is also a graph output.
::onnx::ModelProto conv_bn(bool conv_output_too) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(15);
  auto* g = m.mutable_graph();
  auto* in = g->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  for (int64_t d : {1, 2, 1, 3}) tt->mutable_shape()->add_dim()->set_dim_value(d);
  add_init(g, "W", {2, 2, 1, 1}, {1.0f, 2.0f, -1.0f, 0.5f});
  add_init(g, "b", {2}, {0.25f, -1.0f});
  add_init(g, "scale", {2}, {2.0f, 0.5f});
  add_init(g, "beta", {2}, {0.1f, -0.2f});
  add_init(g, "mean", {2}, {1.0f, -3.0f});
  add_init(g, "var", {2}, {4.0f, 0.25f});
  auto* c = g->add_node();
  c->set_op_type("Conv");
  c->set_name("conv");
  for (const char* s : {"x", "W", "b"}) c->add_input(s);
  c->add_output("c");
  auto* bn = g->add_node();
  bn->set_op_type("BatchNormalization");
  bn->set_name("bn");
  for (const char* s : {"c", "scale", "beta", "mean", "var"}) bn->add_input(s);
  bn->add_output("y");
  auto* eps = bn->add_attribute();
  eps->set_name("epsilon");
  eps->set_type(::onnx::AttributeProto::FLOAT);
  eps->set_f(1e-3f);
  g->add_output()->set_name("y");
  if (conv_output_too) g->add_output()->set_name("c");
  return m;
}

std::vector<float> by_hand(const std::vector<float>& x) {
  const float W[2][2] = {{1, 2}, {-1, 0.5f}}, b[2] = {0.25f, -1}, scale[2] = {2, 0.5f},
              beta[2] = {0.1f, -0.2f}, mean[2] = {1, -3}, var[2] = {4, 0.25f};
  std::vector<float> y(6);
  for (int o = 0; o < 2; ++o)
    for (int p = 0; p < 3; ++p) {
      const double conv = W[o][0] * x[p] + W[o][1] * x[3 + p] + b[o];
      y[o * 3 + p] =
          static_cast<float>((conv - mean[o]) / std::sqrt(var[o] + 1e-3) * scale[o] + beta[o]);
    }
  return y;
}

TEST(OnnxFold, ConvThenBatchNormBecomesOneConv) {
  for (bool shared : {false, true}) {
    std::string bytes = conv_bn(shared).SerializeAsString();
    auto m = Model::load_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    auto ops = (*m)->op_counts();
    EXPECT_EQ(ops["Conv"], 1);
    EXPECT_EQ(ops.count("BatchNormalization"), shared ? 1u : 0u) << "shared=" << shared;
    const std::vector<float> x = {0.5f, -1.0f, 2.0f, 3.0f, 0.0f, -0.5f};
    auto out = (*m)->run({make_f32({1, 2, 1, 3}, x)});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    const std::vector<float> want = by_hand(x);
    ASSERT_EQ((*out)[0].numel(), 6);
    for (int i = 0; i < 6; ++i) {
      EXPECT_NEAR((*out)[0].data<float>()[i], want[i], 1e-5 * (1 + std::fabs(want[i]))) << i;
    }
  }
}

}  // namespace
}  // namespace power::onnx
