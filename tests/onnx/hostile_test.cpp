// Malformed ONNX files, tensors, images and audio: each is a clear error, never a crash.
// Built under ASan+UBSan by scripts/test.sh (label "hostile").
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <random>

#include "base/file.h"
#include "onnx/graph.h"
#include "onnx/media.h"
#include "test_util.h"

namespace power::onnx {
namespace {

// An opset-13 model whose graph has one float input "x" of shape dims (nodes to be added).
::onnx::ModelProto model_with_input(const std::vector<int64_t>& dims) {
  ::onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(13);
  auto* in = m.mutable_graph()->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  for (int64_t d : dims)
    in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(d);
  return m;
}

::onnx::ModelProto tiny_model(const std::string& op) {
  ::onnx::ModelProto m = model_with_input({4});
  auto* g = m.mutable_graph();
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name("the_node");
  n->add_input("x");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

Result<std::shared_ptr<const Model>> load(const ::onnx::ModelProto& m) {
  std::string bytes = m.SerializeAsString();
  return Model::load_bytes(bytes.data(), bytes.size());
}

TEST(OnnxHostile, GarbageBytesAreCorrupt) {
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint8_t> b(rng() % 512);
    for (auto& c : b) c = static_cast<uint8_t>(rng());
    auto m = Model::load_bytes(b.data(), b.size());
    if (!m.ok()) EXPECT_NE(m.status().code(), StatusCode::kInternal) << m.status().to_string();
  }
  auto empty = Model::load_bytes("", 0);
  ASSERT_FALSE(empty.ok());
  EXPECT_EQ(empty.status().code(), StatusCode::kCorrupt);
}

TEST(OnnxHostile, UnsupportedOperatorNamesNodeAndOpAtLoad) {
  auto m = load(tiny_model("NonMaxSuppression"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(m.status().message().find("NonMaxSuppression"), std::string::npos);
  EXPECT_NE(m.status().message().find("the_node"), std::string::npos);
}

TEST(OnnxHostile, SupportedOperatorLoadsAndRuns) {
  auto m = load(tiny_model("Relu"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto out = (*m)->run({make_f32({4}, {-1, 2, -3, 4})});
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0].data<float>()[0], 0.0f);
  EXPECT_EQ((*out)[0].data<float>()[3], 4.0f);
  // Wrong element type and wrong shape at run time: errors naming the input.
  auto bad = (*m)->run({make_i64({4}, {1, 2, 3, 4})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'x'"), std::string::npos);
  auto bad2 = (*m)->run({make_f32({5}, {1, 2, 3, 4, 5})});
  ASSERT_FALSE(bad2.ok());
  auto none = (*m)->run({});
  ASSERT_FALSE(none.ok());
}

TEST(OnnxHostile, UndefinedAndDuplicateValuesAreErrors) {
  auto m = tiny_model("Relu");
  m.mutable_graph()->mutable_node(0)->set_input(0, "nowhere");
  auto r = load(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("nowhere"), std::string::npos);
  auto d = tiny_model("Relu");
  auto* n2 = d.mutable_graph()->add_node();
  n2->set_op_type("Relu");
  n2->add_input("x");
  n2->add_output("y");  // redefines y
  auto r2 = load(d);
  ASSERT_FALSE(r2.ok());
  EXPECT_NE(r2.status().message().find("redefines"), std::string::npos);
}

TEST(OnnxHostile, NodeWithoutOutputsIsAnError) {
  // Found by onnx_fuzz: a Transpose whose output list is empty once crashed the executor.
  auto m = tiny_model("Transpose");
  m.mutable_graph()->mutable_node(0)->clear_output();
  m.mutable_graph()->mutable_output(0)->set_name("x");
  auto r = load(m);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no outputs"), std::string::npos) << r.status().to_string();
}

TEST(OnnxHostile, BadInitializersAreCorrupt) {
  auto m = tiny_model("Add");
  m.mutable_graph()->mutable_node(0)->add_input("w");
  auto* w = m.mutable_graph()->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(4);
  w->set_raw_data(std::string(15, '\0'));  // 4 floats need 16 bytes
  auto r = load(m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kCorrupt);
  w->clear_raw_data();
  w->clear_dims();
  for (int i = 0; i < 4; ++i) w->add_dims(int64_t{1} << 20);  // 2^80 elements
  auto r2 = load(m);
  ASSERT_FALSE(r2.ok());
  w->clear_dims();
  w->add_dims(-3);
  auto r3 = load(m);
  ASSERT_FALSE(r3.ok());
  w->clear_dims();
  w->add_dims(4);
  w->set_data_type(8);  // string
  auto r4 = load(m);
  ASSERT_FALSE(r4.ok());
  EXPECT_EQ(r4.status().code(), StatusCode::kUnsupported);
  w->set_data_type(1);
  w->set_data_location(::onnx::TensorProto::EXTERNAL);
  auto r5 = load(m);
  ASSERT_FALSE(r5.ok());
  EXPECT_NE(r5.status().message().find("external"), std::string::npos);
}

TEST(OnnxHostile, BadAttributesAreRejectedAtLoad) {
  auto m = tiny_model("Resize");
  auto* a = m.mutable_graph()->mutable_node(0)->add_attribute();
  a->set_name("mode");
  a->set_type(::onnx::AttributeProto::STRING);
  a->set_s("cubic");
  auto r = load(m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(r.status().message().find("cubic"), std::string::npos);
  auto c = tiny_model("Cast");
  auto* to = c.mutable_graph()->mutable_node(0)->add_attribute();
  to->set_name("to");
  to->set_type(::onnx::AttributeProto::INT);
  to->set_i(10);  // float16
  auto rc = load(c);
  ASSERT_FALSE(rc.ok());
  EXPECT_EQ(rc.status().code(), StatusCode::kUnsupported);
}

// A Conv or ConvTranspose with an empty weight, or a group that does not divide its channels
// (zero, negative, huge), followed by BatchNormalization and Relu (what the loader folds and
// fuses): loading and running give a result or an error, never a division by zero or an
// overflow.
TEST(OnnxHostile, BadConvolutionWeightsBeforeFoldingAndFusion) {
  for (const char* op : {"Conv", "ConvTranspose"}) {
    for (const std::vector<int64_t>& wdims :
         {std::vector<int64_t>{0, 2, 1, 1}, {2, 0, 1, 1}, {2, 2, 0, 1}, {2, 2, 1, 1}}) {
      for (int64_t group : {int64_t{1}, int64_t{0}, int64_t{-3}, int64_t{1} << 62}) {
        SCOPED_TRACE(::testing::Message() << op << " W dims " << wdims[0] << "x" << wdims[1] << "x"
                                          << wdims[2] << " group " << group);
        ::onnx::ModelProto m = model_with_input({1, 2, 2, 2});
        auto* g = m.mutable_graph();
        auto init = [&](const std::string& name, const std::vector<int64_t>& dims) {
          auto* t = g->add_initializer();
          t->set_name(name);
          t->set_data_type(1);
          int64_t n = 1;
          for (int64_t d : dims) {
            t->add_dims(d);
            n *= d;
          }
          for (int64_t i = 0; i < n; ++i) t->add_float_data(0.5f);
        };
        init("W", wdims);
        for (const char* p : {"scale", "beta", "mean", "var"}) init(p, {2});
        auto* c = g->add_node();
        c->set_op_type(op);
        c->add_input("x");
        c->add_input("W");
        c->add_output("c");
        auto* a = c->add_attribute();
        a->set_name("group");
        a->set_type(::onnx::AttributeProto::INT);
        a->set_i(group);
        auto* bn = g->add_node();
        bn->set_op_type("BatchNormalization");
        for (const char* s : {"c", "scale", "beta", "mean", "var"}) bn->add_input(s);
        bn->add_output("n");
        auto* relu = g->add_node();
        relu->set_op_type("Relu");
        relu->add_input("n");
        relu->add_output("y");
        g->add_output()->set_name("y");
        auto r = load(m);
        if (!r.ok()) continue;
        auto out = (*r)->run({make_f32({1, 2, 2, 2}, std::vector<float>(8, 1.0f))});
        if (out.ok()) EXPECT_EQ((*out)[0].dtype, DType::kF32);
      }
    }
  }
}

TEST(OnnxHostile, RuntimeShapeErrorsAreClear) {
  auto m = tiny_model("Reshape");
  m.mutable_graph()->mutable_node(0)->add_input("s");
  auto* s = m.mutable_graph()->add_initializer();
  s->set_name("s");
  s->set_data_type(7);
  s->add_dims(1);
  s->add_int64_data(5);  // 4 elements cannot become 5
  auto r = load(m);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  auto out = (*r)->run({make_f32({4}, {1, 2, 3, 4})});
  ASSERT_FALSE(out.ok());
  EXPECT_NE(out.status().to_string().find("Reshape"), std::string::npos);
}

// Resize of an input with an empty axis to a non-empty size has no pixel to read: an error,
// not a read past the input (nearest and linear, rank 4 and rank 2).
TEST(OnnxHostile, ResizeOfAnEmptyInputIsAnError) {
  for (const char* mode : {"nearest", "linear"}) {
    for (Shape xs : {Shape{1, 1, 0, 2}, Shape{0, 3}}) {
      auto m = tiny_model("Resize");
      auto* node = m.mutable_graph()->mutable_node(0);
      node->add_input("");
      node->add_input("");
      node->add_input("sizes");
      auto* a = node->add_attribute();
      a->set_name("mode");
      a->set_type(::onnx::AttributeProto::STRING);
      a->set_s(mode);
      auto* s = m.mutable_graph()->add_initializer();
      s->set_name("sizes");
      s->set_data_type(7);
      s->add_dims(static_cast<int64_t>(xs.size()));
      for (size_t d = 0; d < xs.size(); ++d) s->add_int64_data(d + 2 >= xs.size() ? 4 : xs[d]);
      auto* dims = m.mutable_graph()->mutable_input(0)->mutable_type()->mutable_tensor_type();
      dims->mutable_shape()->clear_dim();
      for (int64_t d : xs) dims->mutable_shape()->add_dim()->set_dim_value(d);
      auto r = load(m);
      ASSERT_TRUE(r.ok()) << r.status().to_string();
      auto out = (*r)->run({make_f32(xs, {})});
      ASSERT_FALSE(out.ok()) << mode;
      EXPECT_NE(out.status().to_string().find("empty input"), std::string::npos)
          << out.status().to_string();
    }
  }
}

TEST(OnnxHostile, DeeplyNestedSubgraphsAreRefused) {
  ::onnx::ModelProto m = tiny_model("Relu");
  ::onnx::GraphProto inner;
  auto* n = inner.add_node();
  n->set_op_type("Relu");
  n->add_input("x");
  n->add_output("z");
  inner.add_output()->set_name("z");
  for (int depth = 0; depth < 9; ++depth) {
    ::onnx::GraphProto outer;
    auto* ifn = outer.add_node();
    ifn->set_op_type("If");
    ifn->add_input("x");
    ifn->add_output("z");
    for (const char* b : {"then_branch", "else_branch"}) {
      auto* a = ifn->add_attribute();
      a->set_name(b);
      a->set_type(::onnx::AttributeProto::GRAPH);
      *a->mutable_g() = inner;
    }
    outer.add_output()->set_name("z");
    inner = outer;
  }
  auto* ifn = m.mutable_graph()->add_node();
  *ifn = inner.node(0);
  ifn->set_input(0, "x");
  ifn->set_output(0, "w");
  auto r = load(m);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kUnsupported);
}

TEST(OnnxHostile, BadImagesAndAudioAreErrors) {
  const uint8_t junk[] = {0x42, 0x4d, 0xff, 0xff, 0x00, 0x01, 0x02};  // "BM" then nonsense
  auto img = decode_image(junk, sizeof(junk), 1);
  ASSERT_FALSE(img.ok());
  EXPECT_EQ(img.status().code(), StatusCode::kCorrupt);
  const uint8_t tiff[] = {'I', 'I', 42, 0, 0xff, 0xff, 0xff, 0x7f};  // IFD offset past the end
  auto t = decode_image(tiff, sizeof(tiff), 3);
  ASSERT_FALSE(t.ok());
  auto empty = decode_image(junk, 0, 3);
  ASSERT_FALSE(empty.ok());
  const uint8_t wav[] = {'R', 'I', 'F', 'F', 4, 0, 0, 0, 'W', 'A', 'V', 'E', 'f', 'm', 't', ' '};
  auto a = decode_audio(wav, sizeof(wav));
  ASSERT_FALSE(a.ok());
  auto missing = load_image("/nonexistent/image.png", 3);
  ASSERT_FALSE(missing.ok());
  if (power::testing::shared_available()) {
    // A real model and a real image, truncated at many points.
    auto bytes = read_file(power::testing::shared_dir() + "/models/vision/mnist-8.onnx");
    ASSERT_TRUE(bytes.ok());
    for (size_t cut = 0; cut < bytes->size(); cut += 97) {
      auto m = Model::load_bytes(bytes->data(), cut);
      if (m.ok()) {
        auto out = (*m)->run({make_f32({1, 1, 28, 28}, std::vector<float>(784, 0.0f))});
        (void)out;
      }
    }
    auto bmp = read_file(power::testing::shared_dir() + "/models/vision/mnist_nine.bmp");
    ASSERT_TRUE(bmp.ok());
    for (size_t cut = 0; cut < bmp->size(); cut += 13) (void)decode_image(bmp->data(), cut, 1);
    auto tif = read_file(power::testing::shared_dir() + "/models/ocr/phototest.tif");
    ASSERT_TRUE(tif.ok());
    for (size_t cut = 0; cut < tif->size(); cut += tif->size() / 37 + 1)
      (void)decode_image(tif->data(), cut, 3);
    auto w = read_file(power::testing::shared_dir() + "/models/audio/jfk.wav");
    ASSERT_TRUE(w.ok());
    for (size_t cut = 0; cut < 4096; cut += 7) (void)decode_audio(w->data(), cut);
  }
}

TEST(OnnxHostile, BadTensorProtoFiles) {
  auto t = parse_tensor_proto("\xff\xff\xff", 3);
  ASSERT_FALSE(t.ok());
  ::onnx::TensorProto p;
  p.set_data_type(1);
  p.add_dims(3);
  p.add_float_data(1.0f);  // 1 value for 3 elements
  std::string s = p.SerializeAsString();
  auto t2 = parse_tensor_proto(s.data(), s.size());
  ASSERT_FALSE(t2.ok());
  EXPECT_EQ(t2.status().code(), StatusCode::kCorrupt);
}

}  // namespace
}  // namespace power::onnx
