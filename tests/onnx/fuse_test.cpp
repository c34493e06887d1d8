// Elementwise chains fused into the Conv before them at load (graph.cpp fuse_epilogues): which
// nodes disappear, which stay, and that every fused graph gives the same bits as the same graph
// loaded with LoadOptions::fuse_elementwise off, on synthetic graphs that use every step kind
// and on PaddleOCR's detector and recognizer.
#include <gtest/gtest.h>

#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include "base/thread_pool.h"
#include "kernels/cpu/isa.h"
#include "onnx/graph.h"
#include "onnx/ops_internal.h"
#include "onnx_test_util.h"
#if defined(__x86_64__)
#include "kernels/cpu/sgemm_internal.h"
#endif

namespace power::onnx {
namespace {

using power::testing::ocr_asset;

class GraphBuilder {
 public:
  explicit GraphBuilder(int opset) {
    m_.set_ir_version(8);
    m_.add_opset_import()->set_version(opset);
    g_ = m_.mutable_graph();
  }
  void input(const std::string& name, std::vector<int64_t> dims) {
    auto* in = g_->add_input();
    in->set_name(name);
    auto* tt = in->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(1);
    for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  }
  void init(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
    auto* t = g_->add_initializer();
    t->set_name(name);
    t->set_data_type(1);
    for (int64_t d : dims) t->add_dims(d);
    for (float f : v) t->add_float_data(f);
  }
  // A scalar as a Constant node, the way paddle2onnx exports HardSwish's 3 and 6.
  void constant(const std::string& name, float v) {
    auto* n = g_->add_node();
    n->set_op_type("Constant");
    n->add_output(name);
    auto* a = n->add_attribute();
    a->set_name("value");
    a->set_type(::onnx::AttributeProto::TENSOR);
    a->mutable_t()->set_data_type(1);
    a->mutable_t()->add_float_data(v);
  }
  ::onnx::NodeProto* node(const std::string& op, std::vector<std::string> ins, std::string out) {
    auto* n = g_->add_node();
    n->set_op_type(op);
    n->set_name(out + "_" + op);
    for (const auto& s : ins) n->add_input(s);
    n->add_output(out);
    return n;
  }
  static void attr_f(::onnx::NodeProto* n, const std::string& name, float v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::FLOAT);
    a->set_f(v);
  }
  static void attr_i(::onnx::NodeProto* n, const std::string& name, int64_t v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INT);
    a->set_i(v);
  }
  static void attr_ints(::onnx::NodeProto* n, const std::string& name,
                        const std::vector<int64_t>& v) {
    auto* a = n->add_attribute();
    a->set_name(name);
    a->set_type(::onnx::AttributeProto::INTS);
    for (int64_t x : v) a->add_ints(x);
  }
  void output(const std::string& name) { g_->add_output()->set_name(name); }
  std::string bytes() const { return m_.SerializeAsString(); }

 private:
  ::onnx::ModelProto m_;
  ::onnx::GraphProto* g_;
};

std::vector<float> random_floats(size_t n, float lo, float hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& f : v) f = d(rng);
  return v;
}

// x [1,C,5,7] -> Conv (3x3 pad 1, or depthwise when `depthwise`) with bias -> y.
void conv(GraphBuilder& b, int64_t C, bool depthwise, const std::string& y) {
  b.input("x", {1, C, 5, 7});
  const int64_t per = depthwise ? 1 : C;
  b.init("W", {C, per, 3, 3}, random_floats(static_cast<size_t>(C * per * 9), -0.2f, 0.2f, 7));
  b.init("B", {C}, random_floats(static_cast<size_t>(C), 2.5f, 3.5f, 8));
  auto* n = b.node("Conv", {"x", "W", "B"}, y);
  auto* pads = n->add_attribute();
  pads->set_name("pads");
  pads->set_type(::onnx::AttributeProto::INTS);
  for (int i = 0; i < 4; ++i) pads->add_ints(1);
  if (depthwise) GraphBuilder::attr_i(n, "group", C);
}

struct Loaded {
  std::shared_ptr<const Model> fused, plain;
};

Loaded load_both(const std::string& bytes) {
  Loaded l;
  auto f = Model::load_bytes(bytes.data(), bytes.size());
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  LoadOptions off;
  off.fuse_elementwise = false;
  auto p = Model::load_bytes(bytes.data(), bytes.size(), off);
  EXPECT_TRUE(p.ok()) << p.status().to_string();
  if (f.ok()) l.fused = *f;
  if (p.ok()) l.plain = *p;
  return l;
}

// Runs both models on the same input, one thread and two, and requires identical bytes; the
// fused model's two-thread run must equal its one-thread run too (threads split conv columns,
// rows and elementwise ranges, never one element's sum).
void expect_same_bits(const Loaded& l, const Tensor& x) {
  ASSERT_TRUE(l.fused && l.plain);
  ThreadPool two(2);
  auto one = l.fused->run({x});
  auto both = l.fused->run({x}, &two);
  ASSERT_TRUE(one.ok() && both.ok());
  for (size_t i = 0; i < one->size(); ++i)
    EXPECT_EQ(std::memcmp((*one)[i].buf->data(), (*both)[i].buf->data(), (*one)[i].nbytes()), 0)
        << "output " << i << ": two threads differ from one";
  for (ThreadPool* pool : {static_cast<ThreadPool*>(nullptr), &two}) {
    auto a = l.fused->run({x}, pool);
    auto b = l.plain->run({x}, pool);
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    ASSERT_EQ(a->size(), b->size());
    for (size_t i = 0; i < a->size(); ++i) {
      ASSERT_EQ((*a)[i].shape, (*b)[i].shape);
      ASSERT_EQ((*a)[i].nbytes(), (*b)[i].nbytes());
      EXPECT_EQ(std::memcmp((*a)[i].buf->data(), (*b)[i].buf->data(), (*a)[i].nbytes()), 0)
          << "output " << i << (pool ? " on two threads" : " on one thread");
    }
  }
}

Tensor input(int64_t C) {
  return make_f32({1, C, 5, 7}, random_floats(static_cast<size_t>(C * 35), -1.0f, 1.0f, 9));
}

// paddle2onnx's HardSwish after a Conv and its exported BN scale/shift:
// v = y * 0.9 + 0.1; out = v * (clip(v + 3, 0, 6) / 6), Clip's bounds as Constant inputs.
std::string hard_swish_graph(bool depthwise) {
  GraphBuilder b(11);
  conv(b, 4, depthwise, "y");
  b.constant("k09", 0.9f);
  b.constant("k01", 0.1f);
  b.constant("k3", 3.0f);
  b.constant("k0", 0.0f);
  b.constant("k6", 6.0f);
  b.node("Mul", {"y", "k09"}, "s");
  b.node("Add", {"s", "k01"}, "v");
  b.node("Add", {"v", "k3"}, "a");
  b.node("Clip", {"a", "k0", "k6"}, "c");
  b.node("Div", {"c", "k6"}, "d");
  b.node("Mul", {"v", "d"}, "out");
  b.output("out");
  return b.bytes();
}

TEST(OnnxFuse, HardSwishChainBecomesTheConvsEpilogue) {
  for (bool depthwise : {false, true}) {
    const Loaded l = load_both(hard_swish_graph(depthwise));
    ASSERT_TRUE(l.fused && l.plain);
    auto ops = l.fused->op_counts();
    EXPECT_EQ(ops.size(), 1u) << "only the Conv is left";
    EXPECT_EQ(ops["Conv"], 1);
    auto fused = l.fused->fused_counts();
    EXPECT_EQ(fused["Mul"], 2);
    EXPECT_EQ(fused["Add"], 2);
    EXPECT_EQ(fused["Clip"], 1);
    EXPECT_EQ(fused["Div"], 1);
    EXPECT_EQ(l.plain->op_counts()["Clip"], 1);
    EXPECT_TRUE(l.plain->fused_counts().empty());
    const Tensor x = input(4);
    expect_same_bits(l, x);
    // And the arithmetic itself: out = v * clip(v + 3, 0, 6) / 6 of the unfused Conv output.
    GraphBuilder cb(11);
    conv(cb, 4, depthwise, "y");
    cb.output("y");
    std::string cbytes = cb.bytes();
    auto cm = Model::load_bytes(cbytes.data(), cbytes.size());
    ASSERT_TRUE(cm.ok());
    auto y = (*cm)->run({x});
    auto out = l.fused->run({x});
    ASSERT_TRUE(y.ok() && out.ok());
    for (int64_t i = 0; i < (*y)[0].numel(); ++i) {
      const double v = (*y)[0].data<float>()[i] * 0.9 + 0.1;
      const double want = v * std::min(std::max(v + 3, 0.0), 6.0) / 6;
      EXPECT_NEAR((*out)[0].data<float>()[i], want, 1e-5 * (1 + std::fabs(want))) << i;
    }
  }
}

TEST(OnnxFuse, EveryStepKindGivesTheSameBits) {
  // Constant operands on either side, then the register forms (y read by several nodes).
  GraphBuilder b(13);
  conv(b, 3, false, "y");
  b.init("half", {}, {0.5f});
  b.init("two", {1}, {2.0f});
  b.init("three", {}, {3.0f});
  b.node("Sub", {"y", "half"}, "t1");    // t - a
  b.node("Sub", {"two", "t1"}, "t2");    // a - t
  b.node("Mul", {"three", "t2"}, "t3");  // a * t
  b.node("Div", {"t3", "three"}, "t4");  // t / a
  b.node("Div", {"two", "t4"}, "t5");    // a / t
  b.node("Add", {"half", "t5"}, "t6");   // a + t
  auto* hs = b.node("HardSigmoid", {"t6"}, "t7");
  GraphBuilder::attr_f(hs, "alpha", 0.3f);
  GraphBuilder::attr_f(hs, "beta", 0.4f);
  b.node("Sigmoid", {"t7"}, "t8");
  b.node("Clip", {"t8", "half"}, "t9");  // min only
  b.node("Relu", {"t9"}, "u");
  // u is read four times below: the register holds it.
  b.node("Mul", {"u", "u"}, "r1");    // t * s with t == s
  b.node("Sub", {"r1", "u"}, "r2");   // t - s
  b.node("Sub", {"u", "r2"}, "r3");   // s - t
  b.node("Div", {"r3", "u"}, "r4");   // t / s
  b.node("Div", {"u", "r4"}, "r5");   // s / t
  b.node("Add", {"r5", "u"}, "out");  // t + s
  b.output("out");
  const Loaded l = load_both(b.bytes());
  ASSERT_TRUE(l.fused && l.plain);
  EXPECT_EQ(l.fused->op_counts().size(), 1u);
  auto fused = l.fused->fused_counts();
  EXPECT_EQ(fused["Sub"], 4);
  EXPECT_EQ(fused["Div"], 4);
  EXPECT_EQ(fused["Mul"], 2);
  EXPECT_EQ(fused["Add"], 2);
  expect_same_bits(l, input(3));

  // Per-channel operands ([1,C,1,1] and [C,1,1]) on either side.
  GraphBuilder pc(13);
  conv(pc, 3, false, "y");
  pc.init("shift", {1, 3, 1, 1}, {0.5f, -1.0f, 2.0f});
  pc.init("scale", {3, 1, 1}, {3.0f, -0.25f, 1.5f});
  pc.node("Add", {"shift", "y"}, "p1");
  pc.node("Div", {"scale", "p1"}, "p2");
  pc.node("Sub", {"p2", "shift"}, "p3");
  pc.node("Mul", {"p3", "scale"}, "out");
  pc.output("out");
  const Loaded pl = load_both(pc.bytes());
  ASSERT_TRUE(pl.fused);
  EXPECT_EQ(pl.fused->op_counts().size(), 1u);
  expect_same_bits(pl, input(3));

  // The Conv's own output read by the chain's last node (Swish: y * sigmoid(y)).
  GraphBuilder s(13);
  conv(s, 3, true, "y");
  s.node("Sigmoid", {"y"}, "g");
  s.node("Mul", {"y", "g"}, "out");
  s.output("out");
  const Loaded sl = load_both(s.bytes());
  ASSERT_TRUE(sl.fused);
  EXPECT_EQ(sl.fused->op_counts().size(), 1u);
  expect_same_bits(sl, input(3));
}

TEST(OnnxFuse, ValuesReadOutsideTheChainStayUnfused) {
  {
    // The Conv output is also a graph output: nothing is fused.
    GraphBuilder b(13);
    conv(b, 2, false, "y");
    b.node("Relu", {"y"}, "out");
    b.output("out");
    b.output("y");
    const Loaded l = load_both(b.bytes());
    ASSERT_TRUE(l.fused);
    EXPECT_EQ(l.fused->op_counts()["Relu"], 1);
    EXPECT_TRUE(l.fused->fused_counts().empty());
    expect_same_bits(l, input(2));
  }
  {
    // An intermediate read by a node outside the chain ends the chain there: Relu is fused,
    // the Sigmoid after it is not (its input feeds the Add too).
    GraphBuilder b(13);
    conv(b, 2, false, "y");
    b.init("W2", {2, 2, 1, 1}, {1, 0.5f, -0.5f, 1});
    b.node("Relu", {"y"}, "r");
    b.node("Sigmoid", {"r"}, "g");
    b.node("Conv", {"r", "W2"}, "side");
    b.node("Add", {"g", "side"}, "out");
    b.output("out");
    const Loaded l = load_both(b.bytes());
    ASSERT_TRUE(l.fused);
    auto ops = l.fused->op_counts();
    EXPECT_EQ(ops.count("Relu"), 0u);
    EXPECT_EQ(ops["Sigmoid"], 1);
    EXPECT_EQ(ops["Add"], 1);
    EXPECT_EQ(l.fused->fused_counts()["Relu"], 1);
    expect_same_bits(l, input(2));
  }
  {
    // An operand that varies along the width, and a Clip bound that is no constant, are not
    // fused.
    GraphBuilder b(13);
    conv(b, 2, false, "y");
    b.init("per_column", {1, 1, 1, 7}, {1.5f, -2.0f, 1, 2, 3, 4, 5});
    b.node("Mul", {"y", "per_column"}, "m");
    b.output("m");
    const Loaded l = load_both(b.bytes());
    ASSERT_TRUE(l.fused);
    EXPECT_EQ(l.fused->op_counts()["Mul"], 1);
    expect_same_bits(l, input(2));

    GraphBuilder c(13);
    conv(c, 2, false, "y");
    c.input("lo", {});
    c.node("Clip", {"y", "lo"}, "out");
    c.output("out");
    std::string bytes = c.bytes();
    auto m = Model::load_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(m.ok());
    EXPECT_EQ((*m)->op_counts()["Clip"], 1);
  }
}

// The epilogue itself, step kind by step kind, on special values (NaN, infinities, signed zeros,
// subnormals, Clip bounds, huge values) and a length with a partial last vector: the epilogue
// compiled for AVX2 (chosen under the AVX2 and AVX-512 ISAs) gives the portable
// (POWER_FORCE_ISA=scalar) build's bits, with scalar and per-channel operands, with and without
// the Conv bias. (A register-resident version of this pass, tried, measured no faster; the
// SGEMM tiles now apply the steps before their stores instead: the test after this one.)
TEST(OnnxFuse, EpilogueGivesThePortableBitsOnEveryIsa) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {nan,    -nan,  inf,   -inf, 0.0f,   -0.0f, 1e-45f, -1e-45f,
                          3.0f,   -3.0f, 6.0f,  0.5f, -0.5f,  1e30f, -1e30f, 3e38f,
                          -3e38f, 1.0f,  -1.0f, 2.5f, 1e-40f, 88.0f, -88.0f, 100.0f};
  const auto extra = random_floats(53, -8.0f, 8.0f, 11);
  x.insert(x.end(), extra.begin(), extra.end());  // 77 values: two 32-value groups and 13 more
  const CpuIsa saved = cpu_isa();
  int compared = 0;
  for (int kind = FusedStep::kSave; kind <= FusedStep::kHardSigmoid; ++kind) {
    for (bool per_channel : {false, true}) {
      FusedStep mul{FusedStep::kMul, -1.5f, 0, {}};
      FusedStep st{static_cast<FusedStep::Kind>(kind), 0.25f, 0.75f, {}};
      if (kind == FusedStep::kClip) st = {FusedStep::kClip, -0.5f, 0.5f, {}};
      if (kind == FusedStep::kHardSigmoid) st = {FusedStep::kHardSigmoid, 0.2f, 0.5f, {}};
      if (per_channel) st.channel = {9.0f, kind == FusedStep::kClip ? -0.0f : -0.25f, 2.0f};
      // Save first, so the register forms read the value before the Mul.
      const std::vector<FusedStep> steps = {FusedStep{FusedStep::kSave, 0, 0, {}}, mul, st};
      const float biases[] = {-0.0f, 1.25f};  // -0: keeps every value, signs of zero included
      for (const float* bias : {static_cast<const float*>(nullptr), &biases[0], &biases[1]}) {
        ASSERT_TRUE(set_cpu_isa_for_testing(CpuIsa::kScalar));
        std::vector<float> want = x;
        apply_epilogue(steps, bias, 1, want.data(), static_cast<int64_t>(want.size()));
        for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
          if (!set_cpu_isa_for_testing(isa)) continue;
          std::vector<float> got = x;
          apply_epilogue(steps, bias, 1, got.data(), static_cast<int64_t>(got.size()));
          ++compared;
          for (size_t i = 0; i < x.size(); ++i)
            EXPECT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                << cpu_isa_name(isa) << " kind " << kind << (per_channel ? " per channel" : "")
                << (bias ? " with bias" : "") << ": x=" << x[i] << " gives " << got[i]
                << ", portable " << want[i];
        }
      }
    }
  }
  set_cpu_isa_for_testing(saved);
  if (compared == 0) GTEST_SKIP() << "no AVX2 on this CPU: only the portable epilogue exists";
}

#if defined(__x86_64__)
// The chains the register epilogues are checked with: Save, Mul by -1.5 (so the register forms
// read the value before it), then one step of `kind` with scalar operands, or per-channel ones
// from `channel`.
std::vector<FusedStep> register_chain(int kind, bool per_channel,
                                      const std::vector<float>& channel) {
  FusedStep st{static_cast<FusedStep::Kind>(kind), 0.25f, 0.75f, {}};
  if (kind == FusedStep::kClip) st = {FusedStep::kClip, -0.5f, 0.5f, {}};
  if (kind == FusedStep::kHardSigmoid) st = {FusedStep::kHardSigmoid, 0.2f, 0.5f, {}};
  if (per_channel) st.channel = channel;
  return {FusedStep{FusedStep::kSave, 0, 0, {}}, FusedStep{FusedStep::kMul, -1.5f, 0, {}}, st};
}

// The epilogue applied in the SGEMM tiles (TileEpilogue: AVX2 6 x 16 and AVX-512 12 x 32 tiles,
// before each tile of the last K panel is stored) against the product stored first and
// apply_epilogue run over it, step kind by step kind (Sigmoid too: the tiles call the kernels
// layer's sigmoid, as the pass does), scalar and per-channel operands, with and without the
// bias. Two products:
// K = 1 with A = 1, so the tiles hold the special values of the test above (NaN, infinities,
// subnormals, huge values); and random values with K = 300, two K panels, where only the last
// may apply the steps. 13 rows and 45 columns leave partial row blocks and strips on both ISAs.
TEST(OnnxFuse, TileEpilogueGivesTheSeparatePassBits) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special = {nan,    -nan,   inf,     -inf,  0.0f,  1e-45f, -1e-45f,
                                      3.0f,   -3.0f,  6.0f,    0.5f,  -0.5f, 1e30f,  -1e30f,
                                      3e38f,  -3e38f, 1.0f,    -1.0f, 2.5f,  1e-40f, 88.0f,
                                      -88.0f, 100.0f, -1e-40f, 0.25f, -6.0f};
  const int64_t M = 13, N = 45;
  struct Product {
    int64_t K;
    std::vector<float> A, B;
  };
  std::vector<Product> products(2);
  products[0].K = 1;
  products[0].A.assign(M, 1.0f);
  for (int64_t j = 0; j < N; ++j)
    products[0].B.push_back(special[static_cast<size_t>(j) % special.size()]);
  products[1].K = 300;
  products[1].A = random_floats(static_cast<size_t>(M * 300), -1, 1, 21);
  products[1].B = random_floats(static_cast<size_t>(300 * N), -1, 1, 22);
  const CpuIsa saved = cpu_isa();
  const auto bias = random_floats(M, -2, 2, 23);
  auto channel = random_floats(M + 2, -3, 3, 24);
  channel[3] = -0.0f;
  int compared = 0;
  for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
    if (!set_cpu_isa_for_testing(isa)) continue;
    for (int kind = FusedStep::kSave; kind <= FusedStep::kHardSigmoid; ++kind) {
      for (bool per_channel : {false, true}) {
        const std::vector<FusedStep> steps = register_chain(kind, per_channel, channel);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          for (const Product& p : products) {
            std::vector<float> want(M * N), got(M * N, 7.0f);
            auto block = [&](float* c, const TileEpilogue* ep) {
              if (isa == CpuIsa::kAvx512) {
                kernels::gemm_block_avx512(0, M, 0, N, p.K, p.A.data(), p.K, p.B.data(), N, c, N,
                                           true, ep);
              } else {
                kernels::gemm_block_avx2(0, M, 0, N, p.K, p.A.data(), p.K, p.B.data(), N, c, N,
                                         true, ep);
              }
            };
            block(want.data(), nullptr);
            for (int64_t i = 0; i < M; ++i)  // channels 2.., as TileEpilogue::c = 2 says
              apply_epilogue(steps, b ? b + i : nullptr, 2 + i, want.data() + i * N, N);
            const TileEpilogue ep{&steps, b, 2};
            block(got.data(), &ep);
            ++compared;
            for (size_t i = 0; i < want.size(); ++i)
              ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                  << cpu_isa_name(isa) << " kind " << kind << (per_channel ? " per channel" : "")
                  << (b ? " with bias" : "") << " K=" << p.K << " at " << i << ": " << got[i]
                  << ", separate pass " << want[i];
          }
        }
      }
    }
  }
  set_cpu_isa_for_testing(saved);
  if (compared == 0) GTEST_SKIP() << "no AVX2 on this CPU: there are no tiles";
}

// The depthwise plane kernels (AVX2: two rows by up to 4 x 8 columns; AVX-512: up to 4 x 16)
// with the steps applied in registers against the plane stored first and apply_epilogue run
// over it, step kind by step kind as above, scalar and per-channel operands; and the AVX-512
// plane against the AVX2 plane without steps. The input planes hold the special values, and the
// geometries leave partial vectors and blocks, an odd last row, strides 1-3 and a dilation.
TEST(OnnxFuse, DepthwisePlaneEpilogueGivesTheSeparatePassBits) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> special = {nan,    -nan,   inf,    -inf,  0.0f,  -0.0f,
                                      1e-45f, 3.0f,   -3.0f,  6.0f,  0.5f,  1e30f,
                                      3e38f,  -3e38f, 1e-40f, 88.0f, -1.0f, 2.5f};
  // H, W, OH, OW, kh, kw, sh, sw, dh, dw, pt, pl (OH and OW from the pads below).
  auto geo = [](int64_t H, int64_t W, int64_t k, int64_t s, int64_t d, int64_t pad) {
    const int64_t OH = (H + 2 * pad - d * (k - 1) - 1) / s + 1;
    const int64_t OW = (W + 2 * pad - d * (k - 1) - 1) / s + 1;
    return DepthwiseGeo{H, W, OH, OW, k, k, s, s, d, d, pad, pad};
  };
  const DepthwiseGeo geos[] = {geo(9, 70, 3, 1, 1, 1), geo(7, 131, 5, 2, 1, 2),
                               geo(6, 100, 3, 3, 1, 1), geo(5, 17, 3, 1, 2, 2),
                               geo(3, 64, 3, 1, 1, 1)};
  const CpuIsa saved = cpu_isa();
  auto channel = random_floats(5, -3, 3, 31);
  channel[2] = -0.0f;
  int compared = 0;
  for (const DepthwiseGeo& g : geos) {
    SCOPED_TRACE(::testing::Message() << g.H << "x" << g.W << " k" << g.kh << " s" << g.sh << " d"
                                      << g.dh << " pad " << g.pt);
    std::vector<float> x = random_floats(static_cast<size_t>(g.H * g.W), -4, 4, 32);
    for (size_t i = 0; i < x.size(); i += 7) x[i] = special[(i / 7) % special.size()];
    const auto w = random_floats(static_cast<size_t>(g.kh * g.kw), -1, 1, 33);
    std::vector<float> scratch(static_cast<size_t>(kernels::depthwise_scratch_floats_simd(g)));
    const size_t n = static_cast<size_t>(g.OH * g.OW);
    std::vector<float> avx2_plane(n, 7.0f);
    if (set_cpu_isa_for_testing(CpuIsa::kAvx2))
      kernels::depthwise_plane_avx2(g, x.data(), w.data(), 0.5f, avx2_plane.data(), scratch.data());
    for (CpuIsa isa : {CpuIsa::kAvx2, CpuIsa::kAvx512}) {
      if (!set_cpu_isa_for_testing(isa)) continue;
      auto plane = [&](float* y, const std::vector<FusedStep>* steps) {
        if (isa == CpuIsa::kAvx512) {
          kernels::depthwise_plane_avx512(g, x.data(), w.data(), 0.5f, y, scratch.data(), steps, 2);
        } else {
          kernels::depthwise_plane_avx2(g, x.data(), w.data(), 0.5f, y, scratch.data(), steps, 2);
        }
      };
      std::vector<float> bare(n, 7.0f);
      plane(bare.data(), nullptr);
      ASSERT_EQ(std::memcmp(bare.data(), avx2_plane.data(), n * sizeof(float)), 0)
          << cpu_isa_name(isa) << " plane differs from the AVX2 plane";
      for (int kind = FusedStep::kSave; kind <= FusedStep::kHardSigmoid; ++kind) {
        for (bool per_channel : {false, true}) {
          const std::vector<FusedStep> steps = register_chain(kind, per_channel, channel);
          std::vector<float> want = bare, got(n, 7.0f);
          apply_epilogue(steps, nullptr, 2, want.data(), static_cast<int64_t>(n));
          plane(got.data(), &steps);
          ++compared;
          for (size_t i = 0; i < n; ++i)
            ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
                << cpu_isa_name(isa) << " kind " << kind << (per_channel ? " per channel" : "")
                << " at " << i << ": " << got[i] << ", separate pass " << want[i];
        }
      }
    }
  }
  set_cpu_isa_for_testing(saved);
  if (compared == 0) GTEST_SKIP() << "no AVX2 on this CPU: there are no plane kernels";
}
#endif

// x -> Conv(W, B) -> y with the given group, pads (top, left, bottom, right), dilation (both
// axes) and strides.
Result<std::shared_ptr<const Model>> conv_model(const Shape& x, const Shape& w_shape,
                                                const std::vector<float>& w,
                                                const std::vector<float>& bias, int64_t group,
                                                const std::vector<int64_t>& pads, int64_t dil,
                                                const std::vector<int64_t>& strides) {
  GraphBuilder b(13);
  b.input("x", x);
  b.init("W", w_shape, w);
  b.init("B", {w_shape[0]}, bias);
  auto* n = b.node("Conv", {"x", "W", "B"}, "y");
  GraphBuilder::attr_i(n, "group", group);
  GraphBuilder::attr_ints(n, "pads", pads);
  GraphBuilder::attr_ints(n, "dilations", {dil, dil});
  GraphBuilder::attr_ints(n, "strides", strides);
  b.output("y");
  std::string bytes = b.bytes();
  return Model::load_bytes(bytes.data(), bytes.size());
}

// A Conv's geometry for the float64 reference: C input and M output channels in `group`
// groups, an H x W input, a kh x kw kernel, pads (top, left, bottom, right), strides and one
// dilation for both axes.
struct ConvCase {
  int64_t C, M, group, H, W, kh, kw, pt, pl, pb, pr, sh, sw, dil;
  int64_t OH() const { return (H + pt + pb - (kh - 1) * dil - 1) / sh + 1; }
  int64_t OW() const { return (W + pl + pr - (kw - 1) * dil - 1) / sw + 1; }
};

// y (the Conv of x with weights w [M, C/group, kh, kw] and bias) against the sum in float64:
// each element within 2 (taps + 1) units of 2^-23 of its terms' magnitudes.
void expect_conv_reference(const ConvCase& q, const std::vector<float>& x,
                           const std::vector<float>& w, const std::vector<float>& bias,
                           const Tensor& y) {
  const int64_t OH = q.OH(), OW = q.OW(), cg = q.C / q.group, mg = q.M / q.group;
  ASSERT_EQ(y.shape, (Shape{1, q.M, OH, OW}));
  const int64_t taps = cg * q.kh * q.kw;
  for (int64_t oc = 0; oc < q.M; ++oc) {
    const int64_t gi = oc / mg;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double ref = bias[oc], mag = std::fabs(ref);
        for (int64_t c = 0; c < cg; ++c)
          for (int64_t i = 0; i < q.kh; ++i)
            for (int64_t j = 0; j < q.kw; ++j) {
              const int64_t ih = oh * q.sh - q.pt + i * q.dil;
              const int64_t iw = ow * q.sw - q.pl + j * q.dil;
              if (ih < 0 || ih >= q.H || iw < 0 || iw >= q.W) continue;
              const double p = static_cast<double>(w[((oc * cg + c) * q.kh + i) * q.kw + j]) *
                               x[((gi * cg + c) * q.H + ih) * q.W + iw];
              ref += p;
              mag += std::fabs(p);
            }
        ASSERT_NEAR(y.data<float>()[(oc * OH + oh) * OW + ow], ref,
                    2.0 * (taps + 1) * 0x1p-23 * mag)
            << "oc" << oc << " (" << oh << "," << ow << ")";
      }
  }
}

// Depthwise Conv (the AVX2 plane kernel when the CPU has it, else the portable one; run under
// POWER_FORCE_ISA=scalar too) against a float64 reference, over kernel sizes, pads (also
// asymmetric), dilations, strides 1-3 (the AVX2 kernel's phase split) and widths on both sides
// of the 32- and 8-column register blocks.
TEST(OnnxFuse, DepthwiseConvMatchesFloat64Reference) {
  struct Geo {
    int64_t k, pad, dil, stride_h, stride_w, H, W;
    int64_t pad_end = -1;  // bottom and right pads; -1: the same as `pad`
  };
  const Geo geos[] = {
      {3, 1, 1, 1, 1, 5, 7},     {3, 1, 1, 1, 1, 9, 70},   {5, 2, 1, 1, 1, 6, 41},
      {5, 2, 1, 2, 1, 11, 33},   {3, 2, 2, 1, 1, 8, 45},   {3, 0, 1, 1, 1, 4, 3},
      {5, 0, 1, 1, 1, 5, 5},     {3, 1, 1, 2, 2, 9, 40},   {3, 3, 1, 1, 1, 3, 2},
      {1, 0, 1, 1, 1, 2, 67},    {3, 1, 1, 2, 2, 20, 131}, {5, 2, 1, 2, 2, 9, 81},
      {3, 1, 2, 2, 2, 10, 77},   {3, 1, 1, 3, 3, 10, 100}, {3, 0, 1, 2, 2, 7, 66, 1},
      {5, 2, 1, 1, 1, 6, 45, 0}, {3, 1, 1, 1, 2, 5, 2},    {7, 3, 1, 2, 2, 4, 5}};
  const int64_t C = 3;
  for (const Geo& q : geos) {
    SCOPED_TRACE(::testing::Message()
                 << "k" << q.k << " pad" << q.pad << " dil" << q.dil << " s" << q.stride_h << "x"
                 << q.stride_w << " " << q.H << "x" << q.W);
    const auto w = random_floats(static_cast<size_t>(C * q.k * q.k), -1, 1, 3);
    const auto bias = random_floats(C, -1, 1, 4);
    const int64_t pe = q.pad_end < 0 ? q.pad : q.pad_end;
    auto m = conv_model({1, C, q.H, q.W}, {C, 1, q.k, q.k}, w, bias, C, {q.pad, q.pad, pe, pe},
                        q.dil, {q.stride_h, q.stride_w});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const auto xv = random_floats(static_cast<size_t>(C * q.H * q.W), -1, 1, 5);
    auto out = (*m)->run({make_f32({1, C, q.H, q.W}, xv)});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    expect_conv_reference(
        {C, C, C, q.H, q.W, q.k, q.k, q.pad, q.pad, pe, pe, q.stride_h, q.stride_w, q.dil}, xv, w,
        bias, (*out)[0]);
  }
}

// Dense and grouped Conv against a float64 reference. Stride-1 convolutions read their input
// planes in place (zero-padded once) and compute wide output rows, whose first OW columns are
// copied out; strided ones build im2col rows. The geometries cover both, with pads on any side
// (also none, and asymmetric), dilations, non-square and 1-D kernels, groups, more output
// channels than a 12-row register tile, rows across the 32-column strips, and outputs of several
// chunks (whole output rows each); a two-thread run must give the one-thread bits.
TEST(OnnxFuse, ConvMatchesFloat64Reference) {
  struct Geo {
    int64_t kh, kw, pt, pl, pb, pr, dil, stride, H, W, C, M, group;
  };
  const Geo geos[] = {
      {5, 5, 2, 2, 2, 2, 1, 1, 28, 28, 1, 8, 1}, {5, 5, 2, 2, 2, 2, 1, 1, 14, 14, 8, 16, 1},
      {3, 3, 1, 1, 1, 1, 1, 1, 9, 70, 6, 13, 1}, {3, 3, 0, 0, 0, 0, 1, 1, 7, 33, 5, 4, 1},
      {3, 3, 0, 1, 2, 0, 1, 1, 6, 40, 4, 7, 1},  {3, 3, 2, 2, 2, 2, 2, 1, 10, 45, 3, 5, 1},
      {1, 7, 0, 3, 0, 3, 1, 1, 5, 64, 4, 6, 1},  {3, 1, 1, 0, 1, 0, 1, 1, 12, 31, 4, 6, 1},
      {3, 3, 1, 1, 1, 1, 1, 1, 8, 20, 8, 12, 2}, {3, 3, 1, 1, 1, 1, 1, 1, 200, 90, 4, 8, 1},
      {3, 3, 1, 1, 1, 1, 1, 2, 17, 41, 5, 9, 1}, {5, 5, 2, 2, 2, 2, 1, 2, 20, 20, 3, 6, 1},
      {1, 5, 0, 2, 0, 2, 1, 1, 1, 300, 6, 10, 1}};
  for (const Geo& q : geos) {
    SCOPED_TRACE(::testing::Message()
                 << q.kh << "x" << q.kw << " pads " << q.pt << q.pl << q.pb << q.pr << " dil"
                 << q.dil << " s" << q.stride << " " << q.H << "x" << q.W << " C" << q.C << " M"
                 << q.M << " g" << q.group);
    const int64_t cg = q.C / q.group;
    const auto w = random_floats(static_cast<size_t>(q.M * cg * q.kh * q.kw), -1, 1, 3);
    const auto bias = random_floats(static_cast<size_t>(q.M), -1, 1, 4);
    auto m = conv_model({1, q.C, q.H, q.W}, {q.M, cg, q.kh, q.kw}, w, bias, q.group,
                        {q.pt, q.pl, q.pb, q.pr}, q.dil, {q.stride, q.stride});
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const auto xv = random_floats(static_cast<size_t>(q.C * q.H * q.W), -1, 1, 5);
    const Tensor x = make_f32({1, q.C, q.H, q.W}, xv);
    ThreadPool two(2);
    auto out = (*m)->run({x});
    auto out2 = (*m)->run({x}, &two);
    ASSERT_TRUE(out.ok() && out2.ok());
    ASSERT_EQ((*out2)[0].shape, (*out)[0].shape);
    EXPECT_EQ(std::memcmp((*out)[0].data<float>(), (*out2)[0].data<float>(),
                          (*out)[0].numel() * sizeof(float)),
              0);
    expect_conv_reference({q.C, q.M, q.group, q.H, q.W, q.kh, q.kw, q.pt, q.pl, q.pb, q.pr,
                           q.stride, q.stride, q.dil},
                          xv, w, bias, (*out)[0]);
  }
}

// ConvTranspose takes an elementwise chain too (the OCR detector's head: ConvTranspose, a
// folded BatchNormalization, Relu): the bias and the steps go on each output plane after the
// scatter, with the separate nodes' bits. Here a per-channel Mul, a scalar Add, a
// BatchNormalization (which cannot fold into the weights after the Add: it becomes two
// per-channel steps) and a Sigmoid (group 2, 2x2 kernel at stride 2, pads), one and two threads.
TEST(OnnxFuse, ConvTransposeTakesTheChainAfterIt) {
  GraphBuilder b(13);
  b.input("x", {1, 4, 5, 7});
  b.init("W", {4, 3, 2, 2}, random_floats(48, -1, 1, 11));
  b.init("B", {6}, random_floats(6, -1, 1, 12));
  b.init("s", {6, 1, 1}, random_floats(6, 0.5f, 2.0f, 13));
  b.init("k", {}, {0.25f});
  auto* n = b.node("ConvTranspose", {"x", "W", "B"}, "y");
  GraphBuilder::attr_i(n, "group", 2);
  GraphBuilder::attr_ints(n, "strides", {2, 2});
  GraphBuilder::attr_ints(n, "pads", {1, 0, 0, 1});
  b.node("Mul", {"y", "s"}, "m");
  b.node("Add", {"m", "k"}, "a");
  b.init("g", {6}, random_floats(6, 0.5f, 2.0f, 14));
  b.init("beta", {6}, random_floats(6, -1, 1, 15));
  b.init("mean", {6}, random_floats(6, -1, 1, 16));
  b.init("var", {6}, random_floats(6, 0.1f, 2.0f, 17));
  b.node("BatchNormalization", {"a", "g", "beta", "mean", "var"}, "n");
  b.node("Sigmoid", {"n"}, "out");
  b.output("out");
  const Loaded l = load_both(b.bytes());
  ASSERT_TRUE(l.fused && l.plain);
  using Counts = std::map<std::string, int>;
  EXPECT_EQ(l.fused->op_counts(), (Counts{{"ConvTranspose", 1}}));
  EXPECT_EQ(l.fused->fused_counts(),
            (Counts{{"Add", 1}, {"BatchNormalization", 1}, {"Mul", 1}, {"Sigmoid", 1}}));
  EXPECT_EQ(l.plain->op_counts(), (Counts{{"Add", 1},
                                          {"BatchNormalization", 1},
                                          {"ConvTranspose", 1},
                                          {"Mul", 1},
                                          {"Sigmoid", 1}}));
  expect_same_bits(l, input(4));
}

// No input channels: the product has K = 0 and the output is the bias (then the epilogue);
// no output channels: an empty output. Neither may divide by zero or read unwritten bytes.
// A ConvTranspose whose taps tile the output (kernel = stride, no pads or dilation: the OCR
// detector's 2x2 stride-2 upsampling) writes each output once, row by row, with the bias and
// steps applied per row. Against a float64 reference (group 1 and 2, square and non-square
// kernels, one and two threads), and the detector head's one-channel tail: the Add of a [1,1,1]
// constant and the Sigmoid fuse (a shape of ones leaves the output shape as it is) with the
// separate nodes' bits.
TEST(OnnxFuse, ConvTransposeThatTilesItsOutputMatchesFloat64Reference) {
  struct Geo {
    int64_t kh, kw, C, M, group, H, W;
  };
  for (const Geo& q :
       {Geo{2, 2, 4, 6, 1, 5, 7}, Geo{3, 2, 4, 4, 2, 3, 9}, Geo{2, 3, 6, 2, 2, 4, 33}}) {
    SCOPED_TRACE(::testing::Message() << q.kh << "x" << q.kw << " C" << q.C << " M" << q.M << " g"
                                      << q.group << " " << q.H << "x" << q.W);
    const int64_t mg = q.M / q.group, cg = q.C / q.group;
    const auto w = random_floats(static_cast<size_t>(q.C * mg * q.kh * q.kw), -1, 1, 41);
    const auto bias = random_floats(static_cast<size_t>(q.M), -1, 1, 42);
    const auto xv = random_floats(static_cast<size_t>(q.C * q.H * q.W), -1, 1, 43);
    GraphBuilder b(13);
    b.input("x", {1, q.C, q.H, q.W});
    b.init("W", {q.C, mg, q.kh, q.kw}, w);
    b.init("B", {q.M}, bias);
    auto* n = b.node("ConvTranspose", {"x", "W", "B"}, "y");
    GraphBuilder::attr_i(n, "group", q.group);
    GraphBuilder::attr_ints(n, "strides", {q.kh, q.kw});
    b.output("y");
    const std::string bytes = b.bytes();
    auto m = Model::load_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    const Tensor x = make_f32({1, q.C, q.H, q.W}, xv);
    ThreadPool two(2);
    auto one = (*m)->run({x});
    auto both = (*m)->run({x}, &two);
    ASSERT_TRUE(one.ok() && both.ok());
    const Tensor& y = (*one)[0];
    ASSERT_EQ(y.shape, (Shape{1, q.M, q.H * q.kh, q.W * q.kw}));
    EXPECT_EQ(std::memcmp(y.data<float>(), (*both)[0].data<float>(), y.nbytes()), 0);
    for (int64_t oc = 0; oc < q.M; ++oc)
      for (int64_t oh = 0; oh < q.H * q.kh; ++oh)
        for (int64_t ow = 0; ow < q.W * q.kw; ++ow) {
          const int64_t gi = oc / mg, m_in = oc % mg, ih = oh / q.kh, iw = ow / q.kw;
          double ref = bias[oc], mag = std::fabs(bias[oc]);
          for (int64_t c = gi * cg; c < (gi + 1) * cg; ++c) {
            const double p = static_cast<double>(xv[(c * q.H + ih) * q.W + iw]) *
                             w[((c * mg + m_in) * q.kh + oh % q.kh) * q.kw + ow % q.kw];
            ref += p;
            mag += std::fabs(p);
          }
          ASSERT_NEAR(y.data<float>()[(oc * q.H * q.kh + oh) * q.W * q.kw + ow], ref,
                      2.0 * (cg + 1) * 0x1p-23 * mag)
              << "oc" << oc << " (" << oh << "," << ow << ")";
        }
  }
  GraphBuilder b(13);
  b.input("x", {1, 4, 5, 7});
  b.init("W", {4, 1, 2, 2}, random_floats(16, -1, 1, 44));
  b.init("b", {1, 1, 1}, {-0.375f});
  auto* n = b.node("ConvTranspose", {"x", "W"}, "y");
  GraphBuilder::attr_ints(n, "strides", {2, 2});
  b.node("Add", {"y", "b"}, "a");
  b.node("Sigmoid", {"a"}, "out");
  b.output("out");
  const Loaded l = load_both(b.bytes());
  ASSERT_TRUE(l.fused && l.plain);
  using Counts = std::map<std::string, int>;
  EXPECT_EQ(l.fused->op_counts(), (Counts{{"ConvTranspose", 1}}));
  EXPECT_EQ(l.fused->fused_counts(), (Counts{{"Add", 1}, {"Sigmoid", 1}}));
  expect_same_bits(l, input(4));
}

// Concat copies large outputs (from 1 MiB) and the global pools reduce large inputs with the
// pool's threads: two threads give one thread's bytes, the Concat is the inputs' bytes in order
// (on the channel axis, one piece per input, and on the height axis, one piece per input and
// channel), GlobalMaxPool each plane's maximum and GlobalAveragePool its mean.
TEST(OnnxFuse, LargeConcatAndGlobalPoolsSplitAcrossThreads) {
  const int64_t H = 64, W = 96;
  const int64_t Cs[] = {16, 8, 24};
  for (int64_t axis : {1, 2}) {
    SCOPED_TRACE(::testing::Message() << "axis " << axis);
    GraphBuilder b(13);
    std::vector<Tensor> xs;
    std::vector<std::string> names;
    for (int i = 0; i < 3; ++i) {
      const Shape shape = axis == 1 ? Shape{1, Cs[i], H, W} : Shape{1, 16, Cs[i] * 4, W};
      const std::string name = "x" + std::to_string(i);
      b.input(name, shape);
      names.push_back(name);
      int64_t numel = 1;
      for (int64_t d : shape) numel *= d;
      xs.push_back(make_f32(shape, random_floats(static_cast<size_t>(numel), -4, 4, 50 + i)));
    }
    auto* c = b.node("Concat", names, "cat");
    GraphBuilder::attr_i(c, "axis", axis);
    b.node("GlobalMaxPool", {"cat"}, "mx");
    b.node("GlobalAveragePool", {"cat"}, "avg");
    b.output("cat");
    b.output("mx");
    b.output("avg");
    const std::string bytes = b.bytes();
    auto m = Model::load_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ThreadPool two(2);
    auto one = (*m)->run(xs);
    auto both = (*m)->run(xs, &two);
    ASSERT_TRUE(one.ok() && both.ok());
    for (size_t o = 0; o < 3; ++o)
      EXPECT_EQ(std::memcmp((*one)[o].buf->data(), (*both)[o].buf->data(), (*one)[o].nbytes()), 0)
          << "output " << o;
    const Tensor& cat = (*one)[0];
    ASSERT_GE(cat.nbytes(), size_t{1} << 20);
    const int64_t C = cat.shape[1], plane = cat.shape[2] * cat.shape[3];
    // The reference concatenation, element by element.
    for (int64_t ch = 0; ch < C; ++ch)
      for (int64_t y = 0; y < cat.shape[2]; ++y)
        for (int64_t x = 0; x < W; ++x) {
          int64_t i = 0, at = axis == 1 ? ch : y;
          while (at >= xs[static_cast<size_t>(i)].shape[static_cast<size_t>(axis)])
            at -= xs[static_cast<size_t>(i++)].shape[static_cast<size_t>(axis)];
          const Tensor& t = xs[static_cast<size_t>(i)];
          const float want = axis == 1 ? t.data<float>()[(at * H + y) * W + x]
                                       : t.data<float>()[(ch * t.shape[2] + at) * W + x];
          ASSERT_EQ(cat.data<float>()[(ch * cat.shape[2] + y) * W + x], want) << ch << " " << y;
        }
    for (int64_t ch = 0; ch < C; ++ch) {
      const float* p = cat.data<float>() + ch * plane;
      double sum = 0, mag = 0;
      float mx = -INFINITY;
      for (int64_t i = 0; i < plane; ++i) {
        sum += p[i];
        mag += std::fabs(p[i]);
        mx = std::max(mx, p[i]);
      }
      EXPECT_EQ((*one)[1].data<float>()[ch], mx);
      EXPECT_NEAR((*one)[2].data<float>()[ch], sum / plane, 1e-6 * (1 + mag / plane));
    }
  }
}

TEST(OnnxFuse, ConvWithoutChannelsIsBiasOrEmpty) {
  for (int threads : {1, 2}) {
    GraphBuilder b(13);
    b.input("x", {1, 0, 5, 5});
    b.init("W", {2, 0, 3, 3}, {});
    b.init("B", {2}, {-1.5f, 2.5f});
    b.node("Conv", {"x", "W", "B"}, "y");
    b.node("Relu", {"y"}, "out");
    b.output("out");
    std::string bytes = b.bytes();
    auto m = Model::load_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ThreadPool pool(threads);
    auto out = (*m)->run({make_f32({1, 0, 5, 5}, {})}, &pool);
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    ASSERT_EQ((*out)[0].shape, (Shape{1, 2, 3, 3}));
    for (int i = 0; i < 18; ++i) EXPECT_EQ((*out)[0].data<float>()[i], i < 9 ? 0.0f : 2.5f) << i;

    GraphBuilder e(13);
    e.input("x", {1, 2, 5, 5});
    e.init("W", {0, 2, 3, 3}, {});
    e.node("Conv", {"x", "W"}, "y");
    e.output("y");
    bytes = e.bytes();
    auto em = Model::load_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(em.ok()) << em.status().to_string();
    auto eout = (*em)->run({make_f32({1, 2, 5, 5}, std::vector<float>(50, 1.0f))}, &pool);
    ASSERT_TRUE(eout.ok()) << eout.status().to_string();
    EXPECT_EQ((*eout)[0].numel(), 0);
  }
}

// The real exports: every Conv epilogue of PP-OCRv4's detector and recognizer, Silero VAD's
// encoder and MNIST, on a random input, gives the same bits as the unfused graph.
void expect_model_fuses(const std::string& path, const Shape& shape, int at_least) {
  SCOPED_TRACE(path);
  LoadOptions off;
  off.fuse_elementwise = false;
  auto fused = Model::load_file(path);
  auto plain = Model::load_file(path, off);
  ASSERT_TRUE(fused.ok() && plain.ok());
  int n = 0;
  for (const auto& [op, k] : (*fused)->fused_counts()) n += k;
  EXPECT_GE(n, at_least);
  EXPECT_LE((*fused)->graph().nodes.size() + n, (*plain)->graph().nodes.size());
  if (shape.empty()) return;
  expect_same_bits(
      {*fused, *plain},
      make_f32(shape, random_floats(static_cast<size_t>(shape_numel(shape)), -1, 1, 11)));
}

TEST(OnnxFuse, PaddleOcrModelsGiveTheSameBits) {
  POWER_REQUIRE_NPM_MODEL(ocr_asset("ch_PP-OCRv4_det_infer.onnx"));
  // 28 HardSwish chains (4 nodes each) and the exported BN Mul/Add pairs in each model.
  expect_model_fuses(ocr_asset("ch_PP-OCRv4_det_infer.onnx"), {1, 3, 96, 128}, 200);
  expect_model_fuses(ocr_asset("ch_PP-OCRv4_rec_infer.onnx"), {1, 3, 48, 160}, 200);
}

TEST(OnnxFuse, MnistAndSileroGiveTheSameBits) {
  POWER_REQUIRE_SHARED();
  // Conv -> Add [8,1,1] -> Relu, twice.
  expect_model_fuses(power::testing::shared_dir() + "/models/vision/mnist-8.onnx", {1, 1, 28, 28},
                     4);
  // Silero's encoder Convs and their Relus sit inside If branches; the test runs no branch
  // itself (silero_vad_test compares the probabilities), only counts what was fused.
  POWER_REQUIRE_NPM_MODEL(power::testing::silero_model());
  expect_model_fuses(power::testing::silero_model(), {}, 4);
}

// Pad copies each row's inside run at once and fills the padding around it: against an index
// by index reference (numpy.pad's rules) for the three modes, on 1-D to 3-D shapes with pads of
// -1 to 3 on each side (negative pads crop), including rows that are all padding.
TEST(OnnxPad, RowCopiesMatchAnIndexByIndexReference) {
  std::mt19937 rng(17);
  const std::vector<std::vector<int64_t>> shapes = {{7}, {4, 6}, {1, 5}, {2, 3, 5}, {3, 1, 4}};
  for (const std::string mode : {"constant", "edge", "reflect"}) {
    for (const auto& shape : shapes) {
      for (int trial = 0; trial < 6; ++trial) {
        const int64_t r = static_cast<int64_t>(shape.size());
        std::vector<int64_t> pads(static_cast<size_t>(2 * r));
        for (int64_t d = 0; d < 2 * r; ++d) {
          const int64_t dim = shape[static_cast<size_t>(d % r)];
          const int64_t hi = mode == "reflect" ? std::min<int64_t>(3, dim - 1) : 3;
          const int64_t lo = mode == "constant" && dim >= 3 ? -1 : 0;
          pads[d] = std::uniform_int_distribution<int64_t>(lo, std::max(lo, hi))(rng);
        }
        SCOPED_TRACE(mode + " trial " + std::to_string(trial) + " rank " + std::to_string(r));
        int64_t n = 1;
        for (int64_t v : shape) n *= v;
        GraphBuilder b(2);
        b.input("x", shape);
        auto* node = b.node("Pad", {"x"}, "y");
        GraphBuilder::attr_ints(node, "pads", pads);
        GraphBuilder::attr_f(node, "value", 2.5f);
        auto* m = node->add_attribute();
        m->set_name("mode");
        m->set_type(::onnx::AttributeProto::STRING);
        m->set_s(mode);
        b.output("y");
        const std::string bytes = b.bytes();
        auto model = Model::load_bytes(bytes.data(), bytes.size());
        ASSERT_TRUE(model.ok()) << model.status().to_string();
        const std::vector<float> x = random_floats(static_cast<size_t>(n), -1.0f, 1.0f, 3);
        auto out = (*model)->run({make_f32(Shape(shape.begin(), shape.end()), x)});
        ASSERT_TRUE(out.ok()) << out.status().to_string();
        Shape os(static_cast<size_t>(r));
        for (int64_t d = 0; d < r; ++d) os[d] = shape[d] + pads[d] + pads[d + r];
        ASSERT_EQ((*out)[0].shape, os);
        int64_t total = 1;
        for (int64_t v : os) total *= v;
        const float* y = (*out)[0].data<float>();
        std::vector<int64_t> idx(static_cast<size_t>(r), 0);
        for (int64_t o = 0; o < total; ++o) {
          int64_t off = 0;
          bool inside = true;
          for (int64_t d = 0; d < r; ++d) {
            const int64_t dim = shape[d];
            int64_t i = idx[d] - pads[d];
            if (i < 0 || i >= dim) {
              if (mode == "constant") inside = false;
              if (mode == "edge") i = i < 0 ? 0 : dim - 1;
              if (mode == "reflect") i = i < 0 ? -i : 2 * (dim - 1) - i;
            }
            off = off * dim + i;
          }
          ASSERT_EQ(y[o], inside ? x[static_cast<size_t>(off)] : 2.5f) << "element " << o;
          for (int64_t d = r - 1; d >= 0; --d) {
            if (++idx[d] < os[d]) break;
            idx[d] = 0;
          }
        }
      }
    }
  }
}

// MaxPool against a reference that folds each window's taps in (row, column) order with
// std::max(acc, tap) from -inf, over geometries with strides 1-4 (strides 2-4 take the
// contiguous-span path), pads, dilation and ceil_mode, on inputs holding NaNs, infinities and
// zeros of both signs (the first of equal zeros wins; NaN taps are skipped): the same bits.
TEST(OnnxPool, MaxPoolMatchesTheTapOrderReference) {
  struct Geo {
    int64_t H, W, kh, kw, sh, sw, pt, pl, pb, pr, dh, dw;
    bool ceil;
  };
  const std::vector<Geo> geos = {
      {28, 28, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, false},  // MNIST's first pool
      {14, 14, 3, 3, 3, 3, 0, 0, 0, 0, 1, 1, false},  // and its second
      {9, 11, 3, 3, 2, 2, 1, 1, 1, 1, 1, 1, false},
      {7, 10, 2, 3, 1, 3, 0, 1, 0, 2, 1, 1, true},
      {8, 13, 3, 2, 2, 4, 1, 0, 2, 1, 2, 2, false},
      {5, 6, 2, 2, 2, 2, 0, 0, 0, 0, 1, 1, true},
      {6, 17, 1, 5, 1, 3, 0, 2, 0, 2, 1, 1, true},
      {4, 9, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, false},
      // Windows that tile the columns (folded window by window): rows overlapping, a width
      // the windows do not fill, the generic width, ceil_mode where the windows fit.
      {10, 11, 3, 2, 1, 2, 0, 0, 0, 0, 1, 1, false},
      {12, 17, 4, 4, 4, 4, 0, 0, 0, 0, 1, 1, false},
      {9, 9, 3, 3, 3, 3, 0, 0, 0, 0, 1, 1, true},
  };
  std::mt19937 rng(5);
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), INFINITY, -INFINITY, 0.0f,
                            -0.0f};
  for (const Geo& g : geos) {
    SCOPED_TRACE(::testing::Message() << "H " << g.H << " W " << g.W << " k " << g.kh << "x" << g.kw
                                      << " s " << g.sh << "x" << g.sw << (g.ceil ? " ceil" : ""));
    const int64_t N = 2, C = 3;
    GraphBuilder b(12);
    b.input("x", {N, C, g.H, g.W});
    auto* node = b.node("MaxPool", {"x"}, "y");
    GraphBuilder::attr_ints(node, "kernel_shape", {g.kh, g.kw});
    GraphBuilder::attr_ints(node, "strides", {g.sh, g.sw});
    GraphBuilder::attr_ints(node, "pads", {g.pt, g.pl, g.pb, g.pr});
    GraphBuilder::attr_ints(node, "dilations", {g.dh, g.dw});
    GraphBuilder::attr_i(node, "ceil_mode", g.ceil ? 1 : 0);
    b.output("y");
    const std::string bytes = b.bytes();
    auto model = Model::load_bytes(bytes.data(), bytes.size());
    ASSERT_TRUE(model.ok()) << model.status().to_string();
    std::vector<float> x = random_floats(static_cast<size_t>(N * C * g.H * g.W), -1.0f, 1.0f, 9);
    // Zeros of both signs in runs, so that windows hold ties; a sprinkle of specials.
    for (size_t i = 0; i < x.size(); ++i) {
      if (i % 7 < 3) x[i] = (i / 7) % 2 ? 0.0f : -0.0f;
      if (rng() % 11 == 0) x[i] = specials[rng() % 5];
    }
    auto out = (*model)->run({make_f32({N, C, g.H, g.W}, x)});
    ASSERT_TRUE(out.ok()) << out.status().to_string();
    auto size = [&](int64_t in, int64_t k, int64_t st, int64_t p0, int64_t p1, int64_t d) {
      const int64_t span = in + p0 + p1 - ((k - 1) * d + 1);
      int64_t o = (g.ceil ? (span + st - 1) / st : span / st) + 1;
      // With ceil_mode, a last window that would start in the end padding is dropped.
      if (g.ceil && (o - 1) * st >= in + p0) --o;
      return o;
    };
    const int64_t OH = size(g.H, g.kh, g.sh, g.pt, g.pb, g.dh);
    const int64_t OW = size(g.W, g.kw, g.sw, g.pl, g.pr, g.dw);
    ASSERT_EQ((*out)[0].shape, (Shape{N, C, OH, OW}));
    const float* y = (*out)[0].data<float>();
    for (int64_t p = 0; p < N * C; ++p)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          float m = -INFINITY;
          for (int64_t i = 0; i < g.kh; ++i)
            for (int64_t j = 0; j < g.kw; ++j) {
              const int64_t ih = oh * g.sh - g.pt + i * g.dh, iw = ow * g.sw - g.pl + j * g.dw;
              if (ih >= 0 && ih < g.H && iw >= 0 && iw < g.W) {
                m = std::max(m, x[static_cast<size_t>((p * g.H + ih) * g.W + iw)]);
              }
            }
          const float got = y[(p * OH + oh) * OW + ow];
          ASSERT_EQ(std::memcmp(&got, &m, sizeof(float)), 0)
              << "plane " << p << " output " << oh << "," << ow << ": " << got << " vs " << m;
        }
  }
}

}  // namespace
}  // namespace power::onnx
