// mamba: Mamba (v1) state-space language models (general.architecture = "mamba"), as
// llama.cpp's convert_hf_to_gguf.py writes them: mamba.ssm.{conv_kernel, inner_size,
// state_size, time_step_rank, dt_b_c_rms} keys; per layer attn_norm, ssm_in, ssm_conv1d
// (+ bias), ssm_x, ssm_dt (+ bias), ssm_a (A = -exp(A_log)), ssm_d, ssm_out.
//
// Per layer (llama.cpp's graph): h = RMSNorm(x)·w; [xi | z] = ssm_in·h; xc = silu(conv1d(xi)
// + b) over the sequence (the window of the last d_conv - 1 inputs lives in the sequence's
// recurrent state); [dt_low | B | C] = ssm_x·xc (each RMS-normalized without a weight when
// dt_b_c_rms, FalconMamba); dt = ssm_dt·dt_low + b; y = scan(xc, dt, A, B, C) + D·xc (the
// state channels x d_state also in the recurrent state); x += ssm_out·(y · silu(z)). Output:
// RMSNorm, output.weight (token_embd when the file has none).
// The state per layer and sequence: (d_conv - 1) · d_inner + d_inner · d_state floats.
#include <memory>
#include <string>
#include <vector>

#include "builtin.h"

namespace power::models {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

class Mamba final : public sdk::Model {
 public:
  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    POWER_ASSIGN_OR_RETURN(E_, sdk::int_key(f, "mamba.embedding_length", 1, kMaxDim));
    POWER_ASSIGN_OR_RETURN(n_layer_, sdk::int_key(f, "mamba.block_count", 1, 4096));
    POWER_ASSIGN_OR_RETURN(K_, sdk::int_key(f, "mamba.ssm.conv_kernel", 1, 64));
    POWER_ASSIGN_OR_RETURN(D_, sdk::int_key(f, "mamba.ssm.inner_size", 1, kMaxDim));
    POWER_ASSIGN_OR_RETURN(S_, sdk::int_key(f, "mamba.ssm.state_size", 1, 1024));
    POWER_ASSIGN_OR_RETURN(R_, sdk::int_key(f, "mamba.ssm.time_step_rank", 1, kMaxDim));
    POWER_ASSIGN_OR_RETURN(
        double eps, sdk::float_key_or(f, "mamba.attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0));
    eps_ = static_cast<float>(eps);
    if (f.has("mamba.ssm.dt_b_c_rms")) {
      POWER_ASSIGN_OR_RETURN(dt_b_c_rms_, f.get_bool("mamba.ssm.dt_b_c_rms"));
    }
    POWER_ASSIGN_OR_RETURN(
        int64_t n_ctx, sdk::int_key_or(f, "mamba.context_length", 1 << 20, 1, int64_t{1} << 40));
    embd_ = w.require("token_embd.weight", {E_, sdk::kAnyDim}, sdk::kUseRows);
    const int64_t n_vocab = embd_ ? embd_.ne[1] : 0;
    for (int64_t i = 0; i < n_layer_; ++i) {
      auto name = [i](const char* s) { return "blk." + std::to_string(i) + "." + s; };
      Layer L;
      L.norm = w.require(name("attn_norm.weight"), {E_}, sdk::kUseVector);
      L.in = w.require(name("ssm_in.weight"), {E_, 2 * D_}, sdk::kUseMatmul);
      L.conv = w.require(name("ssm_conv1d.weight"), {K_, D_}, sdk::kUseConv);
      L.conv_b = w.require(name("ssm_conv1d.bias"), {D_}, sdk::kUseVector);
      L.x = w.require(name("ssm_x.weight"), {D_, R_ + 2 * S_}, sdk::kUseMatmul);
      L.dt = w.require(name("ssm_dt.weight"), {R_, D_}, sdk::kUseMatmul);
      L.dt_b = w.require(name("ssm_dt.bias"), {D_}, sdk::kUseVector);
      L.a = w.require(name("ssm_a"), {S_, D_}, sdk::kUseVector);
      L.d = w.require(name("ssm_d"), {D_}, sdk::kUseVector);
      L.out = w.require(name("ssm_out.weight"), {D_, E_}, sdk::kUseMatmul);
      layers_.push_back(L);
    }
    out_norm_ = w.require("output_norm.weight", {E_}, sdk::kUseVector);
    out_ = w.optional("output.weight", {E_, n_vocab}, sdk::kUseMatmul);
    if (!out_ && embd_) out_ = w.require("token_embd.weight", {E_, n_vocab}, sdk::kUseMatmul);
    spec.kind = sdk::ModelKind::kDecoder;
    spec.n_vocab = n_vocab;
    spec.n_embd = E_;
    spec.n_layer = n_layer_;
    spec.n_ctx_train = n_ctx;
    spec.state.assign(static_cast<size_t>(n_layer_), sdk::LayerState::recurrent(D_, K_, D_ * S_));
    using sdk::Op;
    spec.uses({Op::kEmbed, Op::kRmsNorm, Op::kLinear, Op::kConv1d, Op::kActivation, Op::kSsmScan,
               Op::kGlu, Op::kAdd, Op::kSelectRows});
    return Status();
  }

  void plan(sdk::Planner& p) override {
    x_ = p.rows(E_, "x");
    xn_ = p.rows(E_, "xn");
    xz_ = p.rows(2 * D_, "xz");
    xc_ = p.rows(D_, "xc");
    xdb_ = p.rows(R_ + 2 * S_, "dt_B_C");
    dt_ = p.rows(D_, "dt");
    y_ = p.rows(D_, "y");
  }

  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const sdk::Act x = f.act(x_), xn = f.act(xn_), xz = f.act(xz_), xc = f.act(xc_);
    const sdk::Act xdb = f.act(xdb_), dt = f.act(dt_), y = f.act(y_);
    const sdk::Act xi = xz.slice(0, D_), z = xz.slice(D_, D_);
    const sdk::Act dt_low = xdb.slice(0, R_), B = xdb.slice(R_, S_), C = xdb.slice(R_ + S_, S_);
    op.embed(embd_, sdk::Index::kTokens, x);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      const int layer = static_cast<int>(l);
      op.rms_norm(x, &L.norm, xn, eps_);
      op.linear(L.in, nullptr, xn, xz);
      op.conv1d(layer, xi, L.conv, &L.conv_b, xc);
      op.activate(xc, sdk::Activation::kSilu);
      op.linear(L.x, nullptr, xc, xdb);
      if (dt_b_c_rms_) {
        op.rms_norm(dt_low, nullptr, dt_low, eps_);
        op.rms_norm(B, nullptr, B, eps_);
        op.rms_norm(C, nullptr, C, eps_);
      }
      op.linear(L.dt, &L.dt_b, dt_low, dt);
      op.ssm_scan(layer, xc, dt, L.a, B, C, &L.d, y);
      op.glu(z, y, sdk::Activation::kSilu);  // z = silu(z) * y
      op.linear(L.out, nullptr, z, xn);
      op.add(x, xn);
    }
    const sdk::Act rows = f.act(xn_).first_rows(f.n_outputs());
    op.select_output_rows(x, rows);
    op.rms_norm(rows, &out_norm_, rows, eps_);
    op.linear(out_, nullptr, rows, f.output());
    return Status();
  }

 private:
  struct Layer {
    sdk::Weight norm, in, conv, conv_b, x, dt, dt_b, a, d, out;
  };
  int64_t E_ = 0, n_layer_ = 0, K_ = 0, D_ = 0, S_ = 0, R_ = 0;
  float eps_ = 1e-5f;
  bool dt_b_c_rms_ = false;
  sdk::Weight embd_, out_norm_, out_;
  std::vector<Layer> layers_;
  sdk::Buffer x_, xn_, xz_, xc_, xdb_, dt_, y_;
};

}  // namespace

std::unique_ptr<sdk::Model> make_mamba() {
  return std::make_unique<Mamba>();
}

}  // namespace power::models
