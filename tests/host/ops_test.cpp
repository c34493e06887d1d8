// Every op of the SDK's set on the CPU device, through the public surface: a package whose
// forward pass embeds the batch's tokens (an 8 x 8 table), applies the op under test and
// writes the result through an identity output head (F32: exact), so the logits are the op's
// output. Each is compared with the op's definition (power/sdk/ops.h) evaluated in double here:
// activations (SiLU, GELU tanh and erf, ReLU, llama.cpp's f16-table GELU), SwiGLU and GeGLU,
// mul and scale, add_row, softmax, copy between column slices (split and concat), RMS norm per
// group with a weight, LayerNorm without a bias, and attention within each chunk (causal,
// bidirectional, with a sliding window and with soft-capping) and over the KV state with
// soft-capping. Also: a package's own chat template is the one Power renders.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "host/model.h"
#include "host/registry.h"
#include "host/text.h"
#include "power/sdk.h"
#include "tensor/half.h"
#include "test_util.h"
#include "toy_models.h"

namespace power {
namespace {

constexpr int64_t kW = 8;  // embedding width = vocabulary = output width

struct Ctx {
  sdk::Ops& op;
  sdk::Act x;              // the embedded rows (tokens x 8)
  sdk::Act y;              // a second buffer of the same shape
  const sdk::Weight& vec;  // an [8] vector (norm weights, a bias row)
};
using Body = std::function<sdk::Act(Ctx&)>;  // returns the rows to output

class OpPackage final : public sdk::Model {
 public:
  OpPackage(Body body, std::vector<sdk::Op> ops, std::vector<sdk::LayerState> state)
      : body_(std::move(body)), ops_(std::move(ops)), state_(std::move(state)) {}
  Status load(const sdk::ModelFile&, sdk::Weights& w, sdk::ModelSpec& spec) override {
    embd_ = w.require("token_embd.weight", {kW, kW}, sdk::kUseRows);
    vec_ = w.require("vec.weight", {kW}, sdk::kUseVector | sdk::kUseRows);
    out_ = w.require("output.weight", {kW, kW}, sdk::kUseMatmul);
    spec.n_vocab = kW;
    spec.n_embd = kW;
    spec.n_ctx_train = 32;
    spec.state = state_;
    spec.uses({sdk::Op::kEmbed, sdk::Op::kLinear, sdk::Op::kSelectRows});
    spec.ops.insert(spec.ops.end(), ops_.begin(), ops_.end());
    return Status();
  }
  void plan(sdk::Planner& p) override {
    x_ = p.rows(kW, "x");
    y_ = p.rows(kW, "y");
    o_ = p.rows(kW, "o");
  }
  Status forward(sdk::Forward& f) const override {
    Ctx c{f.ops(), f.act(x_), f.act(y_), vec_};
    c.op.embed(embd_, sdk::Index::kTokens, c.x);
    const sdk::Act result = body_(c);
    const sdk::Act rows = f.act(o_).first_rows(f.n_outputs());
    c.op.select_output_rows(result, rows);
    c.op.linear(out_, nullptr, rows, f.output());
    return Status();
  }

 private:
  Body body_;
  std::vector<sdk::Op> ops_;
  std::vector<sdk::LayerState> state_;
  sdk::Weight embd_, vec_, out_;
  sdk::Buffer x_, y_, o_;
};

class Ops : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir("power-ops"); }
  void TearDown() override { testing::remove_tree(dir_); }

  // Runs `body` over `tokens` (one sequence, one pass; or `cuts` passes) and returns the rows.
  std::vector<float> run(const std::string& name, Body body, std::vector<sdk::Op> ops,
                         const std::vector<int32_t>& tokens,
                         std::vector<sdk::LayerState> state = {}, std::vector<size_t> cuts = {}) {
    if (ArchitectureRegistry::global().find(name) == nullptr) {
      sdk::Architecture a;
      a.name = name;
      a.create = [=] { return std::make_unique<OpPackage>(body, ops, state); };
      EXPECT_TRUE(sdk::register_architecture(std::move(a)).ok());
    }
    std::vector<float> eye(kW * kW, 0.0f);
    for (int64_t i = 0; i < kW; ++i) eye[i * kW + i] = 1.0f;
    const std::string path = testing::write_toy_gguf(dir_, name,
                                                     {{"token_embd.weight", {kW, kW}, embd_},
                                                      {"vec.weight", {kW}, vec_},
                                                      {"output.weight", {kW, kW}, eye}});
    auto f = GgufFile::open(path);
    EXPECT_TRUE(f.ok());
    auto m = load_model(std::shared_ptr<const GgufFile>(std::move(*f)));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    if (!m.ok()) return {};
    auto ws = (*m)->make_workspace(32, 32, 2);
    auto kv = KvCache::create((*m)->kv_config(32, 1, GgmlType::F32));
    EXPECT_TRUE(ws.ok() && kv.ok());
    KvSequence seq(kv->get());
    if (cuts.empty()) cuts = {tokens.size()};
    std::vector<float> all;
    size_t at = 0;
    for (size_t n : cuts) {
      std::vector<int32_t> part(tokens.begin() + at, tokens.begin() + at + n);
      std::vector<float> out(n * kW);
      const ForwardChunk c{&seq, part, true};
      Status st = (*m)->forward(**ws, std::span<const ForwardChunk>(&c, 1), out.data());
      EXPECT_TRUE(st.ok()) << st.to_string();
      all.insert(all.end(), out.begin(), out.end());
      at += n;
    }
    return all;
  }
  // Row t of the embedded input, in double.
  std::vector<double> in(int32_t token) const {
    return std::vector<double>(embd_.begin() + token * kW, embd_.begin() + (token + 1) * kW);
  }
  void expect_rows(const std::vector<float>& got, const std::vector<std::vector<double>>& want,
                   double tol) {
    ASSERT_EQ(got.size(), want.size() * kW);
    for (size_t t = 0; t < want.size(); ++t) {
      for (int64_t i = 0; i < kW; ++i) {
        EXPECT_NEAR(got[t * kW + i], want[t][i], tol) << "row " << t << " col " << i;
      }
    }
  }

  std::string dir_;
  std::vector<float> embd_ = testing::toy_values(kW * kW, 21, 3.0f);
  std::vector<float> vec_ = testing::toy_values(kW, 22, 1.5f);
};

const std::vector<int32_t> kToks = {2, 7, 0, 5, 5};

TEST_F(Ops, Activations) {
  using A = sdk::Activation;
  const std::vector<std::pair<A, std::function<double(double)>>> cases = {
      {A::kSilu, [](double x) { return x / (1 + std::exp(-x)); }},
      {A::kGeluTanh,
       [](double x) {
         return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
       }},
      {A::kGeluErf, [](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }},
      {A::kRelu, [](double x) { return x > 0 ? x : 0; }},
  };
  int i = 0;
  for (const auto& [a, fn] : cases) {
    SCOPED_TRACE(i);
    const auto got = run(
        "ops_act" + std::to_string(i++),
        [a = a](Ctx& c) {
          c.op.activate(c.x, a);
          return c.x;
        },
        {sdk::Op::kActivation}, kToks);
    std::vector<std::vector<double>> want;
    for (int32_t t : kToks) {
      auto r = in(t);
      for (double& v : r) v = fn(v);
      want.push_back(r);
    }
    expect_rows(got, want, 2e-6);
  }
  // llama.cpp's table: input and result rounded to f16.
  const auto got = run(
      "ops_gelu_f16",
      [](Ctx& c) {
        c.op.activate(c.x, A::kGeluTanhF16);
        return c.x;
      },
      {sdk::Op::kActivation}, kToks);
  for (size_t t = 0; t < kToks.size(); ++t) {
    for (int64_t e = 0; e < kW; ++e) {
      const float h = f16_to_f32(f32_to_f16(embd_[kToks[t] * kW + e]));
      const double g = 0.5 * h * (1 + std::tanh(0.7978845608028654 * h * (1 + 0.044715 * h * h)));
      EXPECT_NEAR(got[t * kW + e], g, std::fabs(g) * 2e-3 + 1e-6);          // f16 output precision
      EXPECT_EQ(got[t * kW + e], f16_to_f32(f32_to_f16(got[t * kW + e])));  // an f16 value
    }
  }
}

TEST_F(Ops, GatedUnitsMulScaleAddRow) {
  // gate | up as the two halves of x: SwiGLU and GeGLU over 4 columns.
  for (auto [a, name] : {std::pair{sdk::Activation::kSilu, "ops_swiglu"},
                         std::pair{sdk::Activation::kGeluTanh, "ops_geglu"}}) {
    const auto got = run(
        name,
        [a = a](Ctx& c) {
          c.op.glu(c.x.slice(0, 4), c.x.slice(4, 4), a);
          return c.x;
        },
        {sdk::Op::kGlu}, kToks);
    std::vector<std::vector<double>> want;
    for (int32_t t : kToks) {
      auto r = in(t);
      for (int i = 0; i < 4; ++i) {
        const double g = r[i];
        const double act =
            a == sdk::Activation::kSilu
                ? g / (1 + std::exp(-g))
                : 0.5 * g * (1 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
        r[i] = act * r[i + 4];
      }
      want.push_back(r);
    }
    expect_rows(got, want, 1e-5);
  }
  // (x * x) * 0.5 + vec
  const auto got = run(
      "ops_mul_scale_row",
      [](Ctx& c) {
        c.op.copy(c.x, c.y);
        c.op.mul(c.x, c.y);
        c.op.scale(c.x, 0.5f);
        c.op.add_row(c.x, c.vec, 0);
        return c.x;
      },
      {sdk::Op::kCopy, sdk::Op::kMul, sdk::Op::kScale, sdk::Op::kAddRow}, kToks);
  std::vector<std::vector<double>> want;
  for (int32_t t : kToks) {
    auto r = in(t);
    for (int64_t i = 0; i < kW; ++i) r[i] = r[i] * r[i] * 0.5 + vec_[i];
    want.push_back(r);
  }
  expect_rows(got, want, 1e-5);
}

TEST_F(Ops, SoftmaxCopyBetweenSlicesAndNorms) {
  // Swap the halves (split + concat through column slices), then softmax each row.
  auto got = run(
      "ops_swap_softmax",
      [](Ctx& c) {
        c.op.copy(c.x.slice(0, 4), c.y.slice(4, 4));
        c.op.copy(c.x.slice(4, 4), c.y.slice(0, 4));
        c.op.softmax(c.y);
        return c.y;
      },
      {sdk::Op::kCopy, sdk::Op::kSoftmax}, kToks);
  std::vector<std::vector<double>> want;
  for (int32_t t : kToks) {
    auto r = in(t);
    std::vector<double> s(kW);
    for (int i = 0; i < 4; ++i) {
      s[i] = r[i + 4];
      s[i + 4] = r[i];
    }
    double sum = 0;
    for (double v : s) sum += std::exp(v);
    for (double& v : s) v = std::exp(v) / sum;
    want.push_back(s);
  }
  expect_rows(got, want, 1e-6);
  // RMS norm per group of 4 with the vector's first 4 values as weight... the weight is one
  // group long, so use a group of 8 with the [8] vector, and LayerNorm per group of 4 without
  // weight or bias.
  got = run(
      "ops_norms",
      [](Ctx& c) {
        c.op.rms_norm(c.x, &c.vec, c.y, 1e-5f);
        c.op.layer_norm(c.x, nullptr, nullptr, c.x, 1e-5f, 4);
        c.op.add(c.x, c.y);
        return c.x;
      },
      {sdk::Op::kRmsNorm, sdk::Op::kLayerNorm, sdk::Op::kAdd}, kToks);
  want.clear();
  for (int32_t t : kToks) {
    auto r = in(t);
    double ss = 0;
    for (double v : r) ss += v * v;
    const double inv = 1 / std::sqrt(ss / kW + 1e-5);
    std::vector<double> o(kW);
    for (int g = 0; g < 2; ++g) {
      double mean = 0, var = 0;
      for (int i = 0; i < 4; ++i) mean += r[g * 4 + i] / 4;
      for (int i = 0; i < 4; ++i) var += (r[g * 4 + i] - mean) * (r[g * 4 + i] - mean) / 4;
      for (int i = 0; i < 4; ++i) {
        o[g * 4 + i] =
            (r[g * 4 + i] - mean) / std::sqrt(var + 1e-5) + r[g * 4 + i] * inv * vec_[g * 4 + i];
      }
    }
    want.push_back(o);
  }
  expect_rows(got, want, 1e-5);
}

// Attention of q = k = v = x, two heads of 4, over keys [lo, i] (causal, window) or all keys of
// the chunk, scores scale * q.k capped at `cap` when cap > 0.
std::vector<std::vector<double>> attend(const std::vector<std::vector<double>>& x, bool causal,
                                        int64_t window, double cap) {
  const size_t n = x.size();
  std::vector<std::vector<double>> out(n, std::vector<double>(kW, 0.0));
  for (size_t i = 0; i < n; ++i) {
    for (int h = 0; h < 2; ++h) {
      size_t lo = 0, hi = causal ? i : n - 1;
      if (window > 0 && i + 1 > static_cast<size_t>(window)) lo = i + 1 - window;
      std::vector<double> s;
      for (size_t j = lo; j <= hi; ++j) {
        double d = 0;
        for (int e = 0; e < 4; ++e) d += x[i][h * 4 + e] * x[j][h * 4 + e];
        d *= 0.5;  // 1 / sqrt(4)
        if (cap > 0) d = cap * std::tanh(d / cap);
        s.push_back(d);
      }
      double mx = -1e300, sum = 0;
      for (double v : s) mx = std::max(mx, v);
      for (double& v : s) sum += (v = std::exp(v - mx));
      for (size_t j = lo; j <= hi; ++j) {
        for (int e = 0; e < 4; ++e) out[i][h * 4 + e] += s[j - lo] / sum * x[j][h * 4 + e];
      }
    }
  }
  return out;
}

TEST_F(Ops, AttentionLocalAndOverStateWithWindowAndSoftcap) {
  std::vector<std::vector<double>> xs;
  for (int32_t t : kToks) xs.push_back(in(t));
  sdk::AttentionParams p;
  p.n_head = p.n_head_kv = 2;
  p.head_dim_k = p.head_dim_v = 4;
  struct Case {
    std::string name;
    bool causal;
    int64_t window;
    float cap;
  };
  for (const Case& k :
       {Case{"ops_att_bidir", false, 0, 0.0f}, Case{"ops_att_causal", true, 0, 0.0f},
        Case{"ops_att_window", true, 2, 0.0f}, Case{"ops_att_cap", true, 0, 1.5f}}) {
    SCOPED_TRACE(k.name);
    sdk::AttentionParams q = p;
    q.sliding_window = k.window;
    q.softcap = k.cap;
    const auto got = run(
        k.name,
        [q, causal = k.causal](Ctx& c) {
          c.op.attention_local(c.x, c.x, c.x, c.y, q, causal);
          return c.y;
        },
        {sdk::Op::kAttentionLocal}, kToks);
    expect_rows(got, attend(xs, k.causal, k.window, k.cap), 2e-5);
  }
  // Over the KV state, soft-capped and windowed, fed in passes of 2, 1 and 2 tokens.
  sdk::AttentionParams q = p;
  q.sliding_window = 3;
  q.softcap = 1.5f;
  const auto got =
      run("ops_att_state",
          [q](Ctx& c) {
            c.op.attention(0, c.x, c.x, c.x, c.y, q);
            return c.y;
          },
          {sdk::Op::kAttention}, kToks, {sdk::LayerState::attention(2, 4, 4)}, {2, 1, 2});
  expect_rows(got, attend(xs, true, 3, 1.5), 2e-5);
}

TEST(SdkText, APackagesOwnChatTemplateIsRendered) {
  sdk::Architecture a;
  a.name = "sdktest_templated";
  a.create = [] { return std::unique_ptr<sdk::Model>(); };
  a.tokenizer = [](const sdk::ModelFile&) -> Result<sdk::TokenizerSpec> {
    return testing::toy_vocabulary();
  };
  a.chat_template = [](const sdk::ModelFile&) -> Result<std::string> {
    return std::string(
        "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}");
  };
  ASSERT_TRUE(sdk::register_architecture(std::move(a)).ok());
  const std::string dir = testing::make_temp_dir("power-template");
  const std::string path = testing::write_toy_gguf(dir, "sdktest_templated", {});
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok());
  auto t = load_chat_template(**f);
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  auto text = t->render_json(R"([{"role":"user","content":"hi"}])");
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  EXPECT_EQ(*text, "<s>[user]hi");
  testing::remove_tree(dir);
}

}  // namespace
}  // namespace power
