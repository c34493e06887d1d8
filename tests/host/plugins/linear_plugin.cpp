// A working test plugin, built like a user's (only the SDK headers): registers
// "plugtest_linear", a bag-of-embeddings language model (logits = output · token_embd[token])
// that brings its own 16-token vocabulary, so `power run --model-lib` can generate with it.
#include <memory>
#include <string>

#include "power/sdk.h"

namespace {

namespace sdk = power::sdk;
constexpr int64_t kE = 4, kV = 16;

class Linear final : public sdk::Model {
 public:
  power::Status load(const sdk::ModelFile&, sdk::Weights& w, sdk::ModelSpec& spec) override {
    embd_ = w.require("token_embd.weight", {kE, kV}, sdk::kUseRows);
    out_ = w.require("output.weight", {kE, kV}, sdk::kUseMatmul);
    spec.n_vocab = kV;
    spec.n_embd = kE;
    spec.n_ctx_train = 64;
    spec.uses({sdk::Op::kEmbed, sdk::Op::kSelectRows, sdk::Op::kLinear});
    return power::Status();
  }
  void plan(sdk::Planner& p) override {
    x_ = p.rows(kE, "x");
    o_ = p.rows(kE, "o");
  }
  power::Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const sdk::Act x = f.act(x_), o = f.act(o_).first_rows(f.n_outputs());
    op.embed(embd_, sdk::Index::kTokens, x);
    op.select_output_rows(x, o);
    op.linear(out_, nullptr, o, f.output());
    return power::Status();
  }

 private:
  sdk::Weight embd_, out_;
  sdk::Buffer x_, o_;
};

power::Result<sdk::TokenizerSpec> vocabulary(const sdk::ModelFile&) {
  sdk::TokenizerSpec s;
  s.model = "llama";
  s.tokens = {"<unk>", "<s>", "</s>"};
  for (char c = 'a'; s.tokens.size() < kV; ++c)
    s.tokens.push_back("\xE2\x96\x81" + std::string(1, c));
  s.scores.assign(s.tokens.size(), 0.0f);
  s.token_types.assign(s.tokens.size(), 1);
  s.token_types[0] = 2;
  s.token_types[1] = s.token_types[2] = 3;
  s.unk = 0;
  s.bos = 1;
  s.eos = 2;
  return s;
}

power::Status add(sdk::Registry& r) {
  sdk::Architecture a;
  a.name = "plugtest_linear";
  a.description = "a bag-of-embeddings test model";
  a.create = [] { return std::make_unique<Linear>(); };
  a.tokenizer = vocabulary;
  return r.add(std::move(a));
}

}  // namespace

POWER_MODEL_PLUGIN("plugtest-linear", add)
