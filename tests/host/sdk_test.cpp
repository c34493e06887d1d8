// The model SDK's contract as a package author meets it, with small packages written here on
// the public headers only: registration (names unique, the built-ins listed), load-time
// validation (a missing tensor, a wrong shape and a type the model does not accept are errors
// naming the tensor with expected vs. actual), device capability (a device without an op the
// model declares refuses the model at load, naming the op), op misuse inside a pass (an op
// the spec did not declare, a width that is not the weight's row: the pass fails naming the
// op, nothing is written past it), and a package's own vocabulary reaching the tokenizer.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "device/device.h"
#include "host/model.h"
#include "host/registry.h"
#include "host/text.h"
#include "power/sdk.h"
#include "test_util.h"
#include "toy_models.h"

namespace power {
namespace {

constexpr int64_t kE = 4, kV = 8;

// A bag-of-embeddings "language model": logits = output · token_embd[token]. `mode` picks a
// misuse to exercise.
enum class Misuse { kNone, kUndeclaredOp, kWrongWidth, kF16Only, kNeedsConv };

class Linear final : public sdk::Model {
 public:
  explicit Linear(Misuse m) : misuse_(m) {}
  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    embd_ = w.require("token_embd.weight", {kE, kV}, sdk::kUseRows);
    const sdk::TypeSet types =
        misuse_ == Misuse::kF16Only ? sdk::TypeSet{sdk::DType::F16} : sdk::TypeSet::any();
    out_ = w.require("output.weight", {kE, kV}, sdk::kUseMatmul, types);
    spec.kind = sdk::ModelKind::kDecoder;
    spec.n_vocab = kV;
    spec.n_embd = kE;
    spec.n_ctx_train = 64;
    spec.uses({sdk::Op::kEmbed, sdk::Op::kSelectRows, sdk::Op::kLinear});
    if (misuse_ == Misuse::kNeedsConv) spec.uses({sdk::Op::kConv1d});
    (void)f;
    return Status();
  }
  void plan(sdk::Planner& p) override {
    x_ = p.rows(kE, "x");
    o_ = p.rows(kE, "o");
  }
  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const sdk::Act x = f.act(x_);
    const sdk::Act o = f.act(o_).first_rows(f.n_outputs());
    op.embed(embd_, sdk::Index::kTokens, x);
    if (misuse_ == Misuse::kUndeclaredOp) op.rms_norm(x, nullptr, x, 1e-5f);
    op.select_output_rows(x, o);
    op.linear(out_, nullptr, misuse_ == Misuse::kWrongWidth ? o.slice(0, kE - 1) : o, f.output());
    return Status();
  }

 private:
  Misuse misuse_;
  sdk::Weight embd_, out_;
  sdk::Buffer x_, o_;
};

void register_linear(const std::string& name, Misuse m) {
  if (ArchitectureRegistry::global().find(name) != nullptr) return;
  sdk::Architecture a;
  a.name = name;
  a.create = [m] { return std::make_unique<Linear>(m); };
  a.tokenizer = [](const sdk::ModelFile&) -> Result<sdk::TokenizerSpec> {
    return testing::toy_vocabulary();
  };
  ASSERT_TRUE(sdk::register_architecture(std::move(a)).ok());
}

struct Files {
  std::string dir = testing::make_temp_dir("power-sdk");
  std::vector<float> embd = testing::toy_values(kE * kV, 1, 1.0f);
  std::vector<float> out = testing::toy_values(kE * kV, 2, 1.0f);
  ~Files() { testing::remove_tree(dir); }
  std::string write(const std::string& arch, bool with_output = true) {
    std::vector<testing::ToyTensor> t = {{"token_embd.weight", {kE, kV}, embd}};
    if (with_output) t.push_back({"output.weight", {kE, kV}, out});
    return testing::write_toy_gguf(dir, arch, t);
  }
};

Result<std::unique_ptr<Model>> open(const std::string& path, const Device* device = nullptr) {
  POWER_ASSIGN_OR_RETURN(auto f, GgufFile::open(path));
  LoadModelOptions o;
  o.device = device;
  return load_model(std::shared_ptr<const GgufFile>(std::move(f)), o);
}

// Runs one pass of `tokens` (logits of every position).
Status pass(const Model& m, const std::vector<int32_t>& tokens, std::vector<float>& logits) {
  POWER_ASSIGN_OR_RETURN(auto ws, m.make_workspace(16, 16, 1));
  POWER_ASSIGN_OR_RETURN(auto kv, KvCache::create(m.kv_config(16, 1, GgmlType::F32)));
  KvSequence seq(kv.get());
  logits.assign(tokens.size() * kV, -1.0f);
  const ForwardChunk c{&seq, tokens, true};
  return m.forward(*ws, std::span<const ForwardChunk>(&c, 1), logits.data());
}

TEST(SdkRegistry, BuiltinsAreListedAndNamesAreUnique) {
  const auto names = supported_architectures();
  for (const char* n : {"llama", "qwen2", "qwen3", "phi3", "bert"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
  sdk::Architecture a;
  a.name = "llama";
  a.create = [] { return std::make_unique<Linear>(Misuse::kNone); };
  Status st = sdk::register_architecture(a);
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists) << st.to_string();
  EXPECT_NE(st.to_string().find("registered_by=built-in"), std::string::npos) << st.to_string();
  a.name = "";
  EXPECT_EQ(sdk::register_architecture(a).code(), StatusCode::kInvalidArgument);
}

TEST(SdkPackage, RunsAndGivesTheArithmeticsLogits) {
  register_linear("sdktest_linear", Misuse::kNone);
  Files files;
  auto m = open(files.write("sdktest_linear"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ((*m)->hparams().arch, "sdktest_linear");
  EXPECT_EQ((*m)->hparams().n_vocab, kV);
  const std::vector<int32_t> tokens = {3, 0, 7, 3};
  std::vector<float> logits;
  ASSERT_TRUE(pass(**m, tokens, logits).ok());
  // logits[t][r] = sum_e output[r][e] * embd[tok][e] (rows of [E, V] tensors hold E values).
  for (size_t t = 0; t < tokens.size(); ++t) {
    for (int64_t r = 0; r < kV; ++r) {
      double want = 0;
      for (int64_t e = 0; e < kE; ++e) {
        want += double(files.out[r * kE + e]) * files.embd[tokens[t] * kE + e];
      }
      EXPECT_NEAR(logits[t * kV + r], want, 1e-5) << "t=" << t << " r=" << r;
    }
  }
  // The package's own vocabulary is the model's tokenizer.
  auto f = GgufFile::open(files.dir + "/sdktest_linear.gguf");
  ASSERT_TRUE(f.ok());
  auto tok = load_tokenizer(**f);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EXPECT_EQ((*tok)->n_tokens(), 16u);
  EXPECT_EQ((*tok)->special().bos, 1);
}

TEST(SdkPackage, ValidationNamesTheTensorBeforeAnyCompute) {
  register_linear("sdktest_linear", Misuse::kNone);
  register_linear("sdktest_f16only", Misuse::kF16Only);
  Files files;
  // Missing.
  auto m = open(files.write("sdktest_linear", /*with_output=*/false));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().to_string().find("tensor=output.weight"), std::string::npos)
      << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("expected_shape=[4, 8]"), std::string::npos);
  // Wrong shape: rows and columns swapped.
  const std::string wrong = testing::write_toy_gguf(
      files.dir, "sdktest_linear",
      {{"token_embd.weight", {kE, kV}, files.embd}, {"output.weight", {kV, kE}, files.out}});
  m = open(wrong);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("expected=[4, 8]"), std::string::npos)
      << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("actual=[8, 4]"), std::string::npos);
  // A type the package does not accept.
  m = open(files.write("sdktest_f16only"));
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(m.status().to_string().find("tensor=output.weight"), std::string::npos);
  EXPECT_NE(m.status().to_string().find("accepted=F16"), std::string::npos)
      << m.status().to_string();
}

TEST(SdkPackage, ADeviceWithoutADeclaredOpRefusesTheModel) {
  register_linear("sdktest_linear", Misuse::kNone);
  register_linear("sdktest_conv", Misuse::kNeedsConv);
  Files files;
  const DeviceWithout no_linear({sdk::Op::kLinear});
  auto m = open(files.write("sdktest_linear"), &no_linear);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kUnsupported);
  EXPECT_NE(m.status().to_string().find("op=linear"), std::string::npos) << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("device=cpu (restricted)"), std::string::npos);
  const DeviceWithout no_conv({sdk::Op::kConv1d});
  EXPECT_TRUE(open(files.write("sdktest_linear"), &no_conv).ok());
  m = open(files.write("sdktest_conv"), &no_conv);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("op=conv1d"), std::string::npos);
}

TEST(SdkPackage, ABuiltInArchitectureIsRefusedByADeviceWithoutAttention) {
  POWER_REQUIRE_SHARED();
  const DeviceWithout no_attention({sdk::Op::kAttention});
  auto m = open(testing::shared_dir() + "/fixtures/models/llama/llama-F32.gguf", &no_attention);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().to_string().find("op=attention"), std::string::npos)
      << m.status().to_string();
  EXPECT_NE(m.status().to_string().find("architecture=llama"), std::string::npos);
}

TEST(SdkPackage, OpMisuseFailsThePassNamingTheOp) {
  register_linear("sdktest_undeclared", Misuse::kUndeclaredOp);
  register_linear("sdktest_width", Misuse::kWrongWidth);
  Files files;
  std::vector<float> logits;
  auto m = open(files.write("sdktest_undeclared"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  Status st = pass(**m, {1, 2}, logits);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("op=rms_norm"), std::string::npos) << st.to_string();
  EXPECT_NE(st.to_string().find("not declared"), std::string::npos);
  // The ops after the failed one did not run: the output is untouched.
  for (float v : logits) EXPECT_EQ(v, -1.0f);
  m = open(files.write("sdktest_width"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  st = pass(**m, {1, 2}, logits);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.to_string().find("op=linear"), std::string::npos) << st.to_string();
  EXPECT_NE(st.to_string().find("tensor=output.weight"), std::string::npos);
}

}  // namespace
}  // namespace power
