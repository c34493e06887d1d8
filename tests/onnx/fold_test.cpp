// Folding at load. BatchNormalization into the preceding Conv (graph.cpp fold_batch_norms): the
// node disappears and the outputs equal BatchNormalization(Conv(x)) computed here by hand; a
// Conv output that something else also reads is left unfolded. Constants (fold_constants):
// nodes whose inputs are all constants run once at load, also inside If branches that read the
// enclosing graph's weights; the outputs are the same bits as with LoadOptions::fold_constants
// off, equal to the arithmetic done here, and Expand (whose size its inputs do not bound) and a
// node that makes a graph output stay nodes. Stacked inputs (LoadOptions::batch_inputs): the
// input's first dimension becomes free and Reshapes of computed values to constant shapes that
// start with 1 follow it, while a Reshape of a weight, one with allowzero and a model that
// fixes another batch size stay as they are; onnx::Service stacks a classifier only when its
// load-time check finds each row's result independent of the batch.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <utility>

#include <unistd.h>

#include "onnx/graph.h"
#include "onnx/service.h"

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

// An opset-15 model whose graph has one float input "x" of shape dims.
::onnx::ModelProto model_with_input(std::initializer_list<int64_t> dims) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(15);
  auto* in = m.mutable_graph()->add_input();
  in->set_name("x");
  auto* tt = in->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(1);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

// x [1,2,1,3] -> Conv 1x1 (2 -> 2 channels, bias b) -> BN -> y; optionally the Conv output
// "c" is also a graph output.
::onnx::ModelProto conv_bn(bool conv_output_too) {
  ::onnx::ModelProto m = model_with_input({1, 2, 1, 3});
  auto* g = m.mutable_graph();
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

void add_i64(::onnx::GraphProto* g, const std::string& name, const std::vector<int64_t>& v) {
  auto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(7);
  t->add_dims(static_cast<int64_t>(v.size()));
  for (int64_t x : v) t->add_int64_data(x);
}

::onnx::NodeProto* add_node(::onnx::GraphProto* g, const std::string& op,
                            std::initializer_list<const char*> in, const std::string& out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(out);
  for (const char* s : in) n->add_input(s);
  n->add_output(out);
  return n;
}

// x [1,4,1,2] -> ConvTranspose (group 2: W [4, 2, 1, 2], so input channels 0-1 feed output
// channels 0-1 and 2-3 feed 2-3; kernel 1x2 at stride 2, bias b) -> BN (4 channels) -> Relu ->
// y [1,4,1,4]. The BN folds into the ConvTranspose's weights and bias, then the Relu becomes
// its epilogue.
TEST(OnnxFold, ConvTransposeThenBatchNormAndReluBecomeOneNode) {
  ::onnx::ModelProto m = model_with_input({1, 4, 1, 2});
  auto* g = m.mutable_graph();
  const std::vector<float> W = {1.0f,  2.0f, -1.0f, 0.5f,  0.25f, -2.0f, 3.0f,  1.5f,
                                -0.5f, 1.0f, 2.0f,  -3.0f, 0.75f, 0.5f,  -1.0f, 2.5f};
  const std::vector<float> b = {0.25f, -1.0f, 0.5f, 2.0f}, scale = {2.0f, 0.5f, -1.0f, 1.5f},
                           beta = {0.1f, -0.2f, 0.3f, -0.4f}, mean = {1.0f, -3.0f, 0.5f, 0.0f},
                           var = {4.0f, 0.25f, 1.0f, 2.0f};
  add_init(g, "W", {4, 2, 1, 2}, W);
  add_init(g, "b", {4}, b);
  add_init(g, "scale", {4}, scale);
  add_init(g, "beta", {4}, beta);
  add_init(g, "mean", {4}, mean);
  add_init(g, "var", {4}, var);
  auto* c = add_node(g, "ConvTranspose", {"x", "W", "b"}, "c");
  auto* gr = c->add_attribute();
  gr->set_name("group");
  gr->set_type(::onnx::AttributeProto::INT);
  gr->set_i(2);
  auto* st = c->add_attribute();
  st->set_name("strides");
  st->set_type(::onnx::AttributeProto::INTS);
  st->add_ints(1);
  st->add_ints(2);
  add_node(g, "BatchNormalization", {"c", "scale", "beta", "mean", "var"}, "n");
  add_node(g, "Relu", {"n"}, "y");
  g->add_output()->set_name("y");
  std::string bytes = m.SerializeAsString();
  auto model = Model::load_bytes(bytes.data(), bytes.size());
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto ops = (*model)->op_counts();
  EXPECT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops["ConvTranspose"], 1);
  EXPECT_EQ((*model)->fused_counts()["Relu"], 1);
  const std::vector<float> x = {0.5f, -1.0f, 2.0f, 3.0f, 0.0f, -0.5f, 1.5f, -2.0f};
  auto out = (*model)->run({make_f32({1, 4, 1, 2}, x)});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ((*out)[0].shape, (Shape{1, 4, 1, 4}));
  // Output channel o = 2 * grp + j, column 2 * iw + kx: the group's two input channels ci times
  // W[ci][j][0][kx], plus b[o]; then BN (epsilon 1e-5) and Relu.
  for (int o = 0; o < 4; ++o)
    for (int col = 0; col < 4; ++col) {
      const int grp = o / 2, j = o % 2, iw = col / 2, kx = col % 2;
      double v = b[o];
      for (int ci = 2 * grp; ci < 2 * grp + 2; ++ci) v += x[ci * 2 + iw] * W[(ci * 2 + j) * 2 + kx];
      v = (v - mean[o]) / std::sqrt(var[o] + 1e-5) * scale[o] + beta[o];
      const double want = std::max(v, 0.0);
      EXPECT_NEAR((*out)[0].data<float>()[o * 4 + col], want, 1e-5 * (1 + std::fabs(want)))
          << "channel " << o << " column " << col;
    }
}

// x [1,2] -> MatMul with W' -> y, where W' [2,2] is the weight W [4,2] (a Constant node) with its
// two row pairs swapped: Concat(Slice(W, 2:4), Slice(W, 0:2)) then Slice to rows 0:2. Also
// e = Expand(c, [3]) of a one-element constant (a second output), and k = Neg(W) (a third
// output: a graph output computed from constants only).
::onnx::ModelProto plumbing() {
  ::onnx::ModelProto m = model_with_input({1, 2});
  auto* g = m.mutable_graph();
  auto* c = add_node(g, "Constant", {}, "W");
  auto* a = c->add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  auto* t = a->mutable_t();
  t->set_data_type(1);
  t->add_dims(4);
  t->add_dims(2);
  for (float f : {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f, 8.0f}) t->add_float_data(f);
  add_i64(g, "zero", {0});
  add_i64(g, "two", {2});
  add_i64(g, "four", {4});
  add_i64(g, "three", {3});
  add_init(g, "c", {1}, {0.5f});
  add_node(g, "Slice", {"W", "two", "four"}, "hi");
  add_node(g, "Slice", {"W", "zero", "two"}, "lo");
  auto* cat = add_node(g, "Concat", {"hi", "lo"}, "swapped");
  auto* ax = cat->add_attribute();
  ax->set_name("axis");
  ax->set_type(::onnx::AttributeProto::INT);
  ax->set_i(0);
  add_node(g, "Slice", {"swapped", "zero", "two"}, "Wp");
  add_node(g, "MatMul", {"x", "Wp"}, "y");
  add_node(g, "Expand", {"c", "three"}, "e");
  add_node(g, "Neg", {"W"}, "k");
  for (const char* o : {"y", "e", "k"}) g->add_output()->set_name(o);
  return m;
}

// The model loaded with constant folding on and off (nulls after a failed load).
std::pair<std::shared_ptr<const Model>, std::shared_ptr<const Model>> load_both(
    const ::onnx::ModelProto& m) {
  const std::string bytes = m.SerializeAsString();
  LoadOptions off;
  off.fold_constants = false;
  auto folded = Model::load_bytes(bytes.data(), bytes.size());
  auto plain = Model::load_bytes(bytes.data(), bytes.size(), off);
  EXPECT_TRUE(folded.ok()) << folded.status().to_string();
  EXPECT_TRUE(plain.ok()) << plain.status().to_string();
  if (!folded.ok() || !plain.ok()) return {};
  return {*folded, *plain};
}

TEST(OnnxFold, ConstantPlumbingRunsOnceAtLoad) {
  auto [folded, plain] = load_both(plumbing());
  ASSERT_TRUE(folded && plain);
  // Constant, three Slices and the Concat ran at load; MatMul reads x, Expand is unbounded, Neg
  // makes a graph output.
  EXPECT_EQ(folded->folded_nodes(), 5);
  EXPECT_EQ(folded->op_counts(),
            (std::map<std::string, int>{{"Expand", 1}, {"MatMul", 1}, {"Neg", 1}}));
  EXPECT_EQ(plain->folded_nodes(), 0);
  EXPECT_EQ(
      plain->op_counts(),
      (std::map<std::string, int>{
          {"Concat", 1}, {"Constant", 1}, {"Expand", 1}, {"MatMul", 1}, {"Neg", 1}, {"Slice", 3}}));
  const std::vector<float> x = {0.25f, -2.0f};
  auto a = folded->run({make_f32({1, 2}, x)});
  auto b = plain->run({make_f32({1, 2}, x)});
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  ASSERT_TRUE(b.ok()) << b.status().to_string();
  // W' = [[5, 6], [7, 8]]: y = [0.25 * 5 - 2 * 7, 0.25 * 6 - 2 * 8] (exact in float).
  ASSERT_EQ((*a)[0].shape, (Shape{1, 2}));
  EXPECT_EQ((*a)[0].data<float>()[0], -12.75f);
  EXPECT_EQ((*a)[0].data<float>()[1], -14.5f);
  for (size_t o = 0; o < 3; ++o) {
    ASSERT_EQ((*a)[o].shape, (*b)[o].shape) << o;
    ASSERT_EQ((*a)[o].nbytes(), (*b)[o].nbytes()) << o;
    EXPECT_EQ(std::memcmp((*a)[o].buf->data(), (*b)[o].buf->data(), (*a)[o].nbytes()), 0) << o;
  }
  EXPECT_EQ((*a)[1].shape, (Shape{3}));
  EXPECT_EQ((*a)[2].data<float>()[7], -8.0f);
}

// The same plumbing inside both branches of an If, on a weight of the enclosing graph: the
// branches fold it, and the enclosing graph then holds only the folded copies.
TEST(OnnxFold, IfBranchesFoldTheEnclosingGraphsWeights) {
  ::onnx::ModelProto m = model_with_input({1, 2});
  auto* g = m.mutable_graph();
  auto* cond = g->add_input();
  cond->set_name("cond");
  cond->mutable_type()->mutable_tensor_type()->set_elem_type(9);  // bool scalar
  cond->mutable_type()->mutable_tensor_type()->mutable_shape();
  add_init(g, "W", {4, 2}, {1, 2, 3, 4, 5, 6, 7, 8});
  add_i64(g, "zero", {0});
  add_i64(g, "two", {2});
  add_i64(g, "four", {4});
  auto* node = add_node(g, "If", {"cond"}, "y");
  for (const char* branch : {"then_branch", "else_branch"}) {
    auto* a = node->add_attribute();
    a->set_name(branch);
    a->set_type(::onnx::AttributeProto::GRAPH);
    auto* b = a->mutable_g();
    b->set_name(branch);
    const bool then = branch[0] == 't';
    add_node(b, "Slice", {"W", then ? "two" : "zero", then ? "four" : "two"}, "part");
    add_node(b, "MatMul", {"x", "part"}, "out");
    b->add_output()->set_name("out");
  }
  g->add_output()->set_name("y");
  auto [folded, plain] = load_both(m);
  ASSERT_TRUE(folded && plain);
  EXPECT_EQ(folded->folded_nodes(), 2);
  EXPECT_EQ(folded->op_counts(), (std::map<std::string, int>{{"If", 1}, {"MatMul", 2}}));
  // W and the slice bounds are read by nobody any more: only the two 2x2 halves are kept.
  EXPECT_EQ(folded->weight_bytes(), 2 * 4 * 4);
  EXPECT_EQ(plain->weight_bytes(), 8 * 4 + 3 * 8);
  for (bool c : {true, false}) {
    Tensor cond;
    cond.dtype = DType::kBool;
    cond.shape = {};
    cond.buf = std::make_shared<Bytes>(1);
    cond.buf->data()[0] = c ? 1 : 0;
    const std::vector<Tensor> in = {make_f32({1, 2}, {0.25f, -2.0f}), cond};
    auto a = folded->run(in);
    auto b = plain->run(in);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    // then: rows [[5, 6], [7, 8]]; else: [[1, 2], [3, 4]].
    const float want0 = c ? 0.25f * 5 - 2 * 7 : 0.25f * 1 - 2 * 3;
    const float want1 = c ? 0.25f * 6 - 2 * 8 : 0.25f * 2 - 2 * 4;
    EXPECT_EQ((*a)[0].data<float>()[0], want0) << c;
    EXPECT_EQ((*a)[0].data<float>()[1], want1) << c;
    EXPECT_EQ(std::memcmp((*a)[0].buf->data(), (*b)[0].buf->data(), 8), 0) << c;
  }
}

// x [1,2,3] -> r = Relu(x); y = Reshape(r, s) and w = Reshape(W, s) with one shape
// initializer s = [1, 6] (W a [2,3] weight); z = y + w; q = Reshape(r, c) with c = [1, -1] a
// Constant node. Outputs z and q.
::onnx::ModelProto reshapes() {
  ::onnx::ModelProto m = model_with_input({1, 2, 3});
  auto* g = m.mutable_graph();
  add_init(g, "W", {2, 3}, {0.5f, -1.0f, 2.0f, 0.25f, 4.0f, -8.0f});
  add_i64(g, "s", {1, 6});
  auto* c = add_node(g, "Constant", {}, "c");
  auto* a = c->add_attribute();
  a->set_name("value");
  a->set_type(::onnx::AttributeProto::TENSOR);
  a->mutable_t()->set_data_type(7);
  a->mutable_t()->add_dims(2);
  a->mutable_t()->add_int64_data(1);
  a->mutable_t()->add_int64_data(-1);
  add_node(g, "Relu", {"x"}, "r");
  add_node(g, "Reshape", {"r", "s"}, "y");
  add_node(g, "Reshape", {"W", "s"}, "w");
  add_node(g, "Add", {"y", "w"}, "z");
  add_node(g, "Reshape", {"r", "c"}, "q");
  for (const char* o : {"z", "q"}) g->add_output()->set_name(o);
  return m;
}

TEST(OnnxBatchInputs, ReshapesOfComputedValuesFollowTheBatch) {
  const std::string bytes = reshapes().SerializeAsString();
  LoadOptions lo;
  lo.batch_inputs = true;
  auto plain = Model::load_bytes(bytes.data(), bytes.size());
  auto stacked = Model::load_bytes(bytes.data(), bytes.size(), lo);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  ASSERT_TRUE(stacked.ok()) << stacked.status().to_string();
  EXPECT_EQ((*stacked)->batch_reshapes(), 2);  // y's and q's; w's reshapes a weight
  const std::vector<float> x = {1.0f,  -2.0f, 3.0f,  0.5f, -0.25f, 6.0f,  -1.0f, 2.0f, 0.0f,
                                -3.0f, 4.5f,  -0.5f, 7.0f, 8.0f,   -9.0f, 0.75f, 1.5f, -6.0f};
  auto refused = (*plain)->run({make_f32({3, 2, 3}, x)});
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("must have shape"), std::string::npos);
  auto out = (*stacked)->run({make_f32({3, 2, 3}, x)});
  ASSERT_TRUE(out.ok()) << out.status().to_string();
  ASSERT_EQ((*out)[0].shape, (Shape{3, 6}));
  ASSERT_EQ((*out)[1].shape, (Shape{3, 6}));
  const float W[6] = {0.5f, -1.0f, 2.0f, 0.25f, 4.0f, -8.0f};
  for (int b = 0; b < 3; ++b)
    for (int i = 0; i < 6; ++i) {
      const float relu = std::max(x[b * 6 + i], 0.0f);
      EXPECT_EQ((*out)[0].data<float>()[b * 6 + i], relu + W[i]) << b << "," << i;
      EXPECT_EQ((*out)[1].data<float>()[b * 6 + i], relu) << b << "," << i;
    }
  // Batch 1 still runs, with the published model's bits.
  const std::vector<float> x1(x.begin(), x.begin() + 6);
  auto one = (*stacked)->run({make_f32({1, 2, 3}, x1)});
  auto want = (*plain)->run({make_f32({1, 2, 3}, x1)});
  ASSERT_TRUE(one.ok() && want.ok());
  EXPECT_EQ(std::memcmp((*one)[0].buf->data(), (*want)[0].buf->data(), 6 * sizeof(float)), 0);
  // The planner follows the rewritten shapes: z, q and r are [B,6]-sized.
  auto plan = (*stacked)->plan_memory({{5, 2, 3}});
  ASSERT_TRUE(plan.ok()) << plan.status().to_string();
  EXPECT_TRUE(plan->complete());
}

TEST(OnnxBatchInputs, WhatCannotBeStackedIsLeftOrRefused) {
  LoadOptions lo;
  lo.batch_inputs = true;
  {
    // Reshape with allowzero: its 0 would mean an empty dimension, so it is left; a stack then
    // fails in that Reshape with an error, and batch 1 runs.
    ::onnx::ModelProto m = model_with_input({1, 2, 3});
    auto* g = m.mutable_graph();
    add_i64(g, "s", {1, 6});
    auto* n = add_node(g, "Reshape", {"x", "s"}, "y");
    auto* a = n->add_attribute();
    a->set_name("allowzero");
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(1);
    g->add_output()->set_name("y");
    const std::string bytes = m.SerializeAsString();
    auto model = Model::load_bytes(bytes.data(), bytes.size(), lo);
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    EXPECT_EQ((*model)->batch_reshapes(), 0);
    auto bad = (*model)->run({make_f32({2, 2, 3}, std::vector<float>(12, 1.0f))});
    ASSERT_FALSE(bad.ok());
    EXPECT_NE(bad.status().message().find("Reshape"), std::string::npos)
        << bad.status().to_string();
    EXPECT_TRUE((*model)->run({make_f32({1, 2, 3}, std::vector<float>(6, 1.0f))}).ok());
  }
  {
    // A sequence input: nothing to stack along, refused at load.
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(15);
    auto* in = m.mutable_graph()->add_input();
    in->set_name("x");
    in->mutable_type()
        ->mutable_sequence_type()
        ->mutable_elem_type()
        ->mutable_tensor_type()
        ->set_elem_type(1);
    add_node(m.mutable_graph(), "Identity", {"x"}, "y");
    m.mutable_graph()->add_output()->set_name("y");
    const std::string bytes = m.SerializeAsString();
    auto model = Model::load_bytes(bytes.data(), bytes.size(), lo);
    ASSERT_FALSE(model.ok());
    EXPECT_NE(model.status().message().find("is not a tensor"), std::string::npos)
        << model.status().to_string();
  }
  {
    // An input whose first dimension is fixed at 2, and a scalar input: refused at load.
    for (const bool scalar : {false, true}) {
      ::onnx::ModelProto m = scalar ? model_with_input({}) : model_with_input({2, 3});
      add_node(m.mutable_graph(), "Relu", {"x"}, "y");
      m.mutable_graph()->add_output()->set_name("y");
      const std::string bytes = m.SerializeAsString();
      EXPECT_TRUE(Model::load_bytes(bytes.data(), bytes.size()).ok());
      auto model = Model::load_bytes(bytes.data(), bytes.size(), lo);
      ASSERT_FALSE(model.ok());
      EXPECT_EQ(model.status().code(), StatusCode::kUnsupported);
      EXPECT_NE(model.status().message().find(scalar ? "no leading dimension"
                                                     : "fixes its leading dimension at 2"),
                std::string::npos)
          << model.status().to_string();
    }
  }
}

// A classifier [1,1,28,28] -> Flatten -> MatMul W [784, 10] -> y, and optionally z = y -
// ReduceMean(y, axis 0): alone that is 0, stacked it mixes the batch's rows. onnx::Service's
// load-time check stacks the first (max_batch 32) and keeps the second unbatched, saying why.
TEST(OnnxBatchInputs, TheServiceStacksOnlyClassifiersThatKeepRowsApart) {
  for (const bool mixes : {false, true}) {
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.add_opset_import()->set_version(13);
    auto* g = m.mutable_graph();
    auto* in = g->add_input();
    in->set_name("x");
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(1);
    for (int64_t d : {1, 1, 28, 28}) tt->mutable_shape()->add_dim()->set_dim_value(d);
    std::vector<float> w(784 * 10);
    for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i % 13) / 64.0f - 0.09f;
    add_init(g, "W", {784, 10}, w);
    add_node(g, "Flatten", {"x"}, "f");
    add_node(g, "MatMul", {"f", "W"}, "y");
    if (mixes) {
      auto* r = add_node(g, "ReduceMean", {"y"}, "mean");
      auto* a = r->add_attribute();
      a->set_name("axes");
      a->set_type(::onnx::AttributeProto::INTS);
      a->add_ints(0);
      add_node(g, "Sub", {"y", "mean"}, "z");
    }
    g->add_output()->set_name(mixes ? "z" : "y");
    const auto path =
        std::filesystem::temp_directory_path() /
        ("power-batch-check-" + std::to_string(::getpid()) + "-" + std::to_string(mixes) + ".onnx");
    {
      std::ofstream f(path, std::ios::binary);
      f << m.SerializeAsString();
    }
    ServiceOptions o;
    o.classify_models = {"c=" + path.string()};
    auto svc = Service::create(o, nullptr);
    std::filesystem::remove(path);
    ASSERT_TRUE(svc.ok()) << svc.status().to_string();
    const auto models = (*svc)->models();
    ASSERT_EQ(models.size(), 1u);
    EXPECT_EQ(models[0].max_batch, mixes ? 1 : 32) << models[0].batch_note;
    if (mixes) {
      EXPECT_NE(models[0].batch_note.find("does not get the scores it gets alone"),
                std::string::npos)
          << models[0].batch_note;
    } else {
      EXPECT_TRUE(models[0].batch_note.empty()) << models[0].batch_note;
    }
  }
}

}  // namespace
}  // namespace power::onnx
