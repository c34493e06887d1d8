// phi3: Phi-3 / Phi-3.5 dense models (general.architecture = "phi3"). A fused qkv projection
// (rows: q, then k, then v), a fused gate|up projection (first n_ff rows gate, last n_ff up),
// NEOX RoPE and sliding-window attention (phi3.attention.sliding_window, every layer; the
// peer requires the key). LongRoPE files (rope_factors_long/short) are rejected.
// The fused outputs are used as column slices of one buffer: no split copies.
#include <algorithm>
#include <memory>
#include <vector>

#include "builtin.h"
#include "decoder/decoder.h"
#include "decoder/tensor_names.h"

namespace power::models {
namespace {

namespace tn = tensor_names;

class Phi3 final : public sdk::Model {
 public:
  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(f, "phi3"));
    hp_.rope_mode = sdk::RopeMode::kNeox;
    if (!f.has("phi3.attention.sliding_window")) {
      return Status(StatusCode::kInvalidArgument, "missing metadata key")
          .with("key", "phi3.attention.sliding_window");
    }
    if (w.has("rope_factors_long.weight") || w.has("rope_factors_short.weight")) {
      return Status(StatusCode::kUnsupported, "LongRoPE phi3 files are not supported yet")
          .with("tensor", "rope_factors_long.weight");
    }
    head_ = bind_head(w, hp_);
    q_width_ = hp_.n_head * hp_.head_dim_k;
    k_width_ = hp_.n_head_kv * hp_.head_dim_k;
    v_width_ = hp_.n_head_kv * hp_.head_dim_v;
    const int64_t o_width = hp_.n_head * hp_.head_dim_v;
    for (int64_t i = 0; i < hp_.n_layer; ++i) {
      DecoderLayer L;
      L.attn_norm = w.require(tn::layer(i, tn::kAttnNorm), {hp_.n_embd}, sdk::kUseVector);
      L.wqkv = w.require(tn::layer(i, tn::kAttnQkv), {hp_.n_embd, q_width_ + k_width_ + v_width_},
                         sdk::kUseMatmul);
      L.wo = w.require(tn::layer(i, tn::kAttnOut), {o_width, hp_.n_embd}, sdk::kUseMatmul);
      L.ffn_norm = w.require(tn::layer(i, tn::kFfnNorm), {hp_.n_embd}, sdk::kUseVector);
      L.w_gate_up =
          w.require(tn::layer(i, tn::kFfnUp), {hp_.n_embd, 2 * hp_.n_ff}, sdk::kUseMatmul);
      L.w_down = w.require(tn::layer(i, tn::kFfnDown), {hp_.n_ff, hp_.n_embd}, sdk::kUseMatmul);
      layers_.push_back(L);
    }
    decoder_spec(hp_, spec);
    return Status();
  }

  void plan(sdk::Planner& p) override {
    buffers_ = plan_decoder(p, hp_);
    fused_ = p.rows(std::max(q_width_ + k_width_ + v_width_, 2 * hp_.n_ff), "fused");
  }

  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const DecoderActs a = decoder_acts(f, buffers_);
    const sdk::Act fused = f.act(fused_);
    const sdk::Act q = fused.slice(0, q_width_);
    const sdk::Act k = fused.slice(q_width_, k_width_);
    const sdk::Act v = fused.slice(q_width_ + k_width_, v_width_);
    // gate|up: row t of the fused buffer is [gate (n_ff) | up (n_ff)].
    const sdk::Act gate = fused.slice(0, hp_.n_ff);
    const sdk::Act up = fused.slice(hp_.n_ff, hp_.n_ff);
    const sdk::Rope rope = rope_of(hp_, sdk::Weight{});
    const sdk::AttentionParams ap = attention_of(hp_);
    op.embed(head_.token_embd, sdk::Index::kTokens, a.x);
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      const DecoderLayer& L = layers_[static_cast<size_t>(l)];
      op.rms_norm(a.x, &L.attn_norm, a.xn, hp_.rms_eps);
      op.linear(L.wqkv, nullptr, a.xn, fused.slice(0, q_width_ + k_width_ + v_width_));
      op.rope(q, hp_.head_dim_k, rope);
      op.rope(k, hp_.head_dim_k, rope);
      op.attention(static_cast<int>(l), q, k, v, a.attn, ap);
      op.linear(L.wo, nullptr, a.attn, a.xn);
      op.add(a.x, a.xn);
      op.rms_norm(a.x, &L.ffn_norm, a.xn, hp_.rms_eps);
      op.linear(L.w_gate_up, nullptr, a.xn, fused.slice(0, 2 * hp_.n_ff));
      op.glu(gate, up, sdk::Activation::kSilu);
      op.linear(L.w_down, nullptr, gate, a.xn);
      op.add(a.x, a.xn);
    }
    run_output_head(f, hp_, head_, buffers_, a.x);
    return Status();
  }

 private:
  DecoderHparams hp_;
  DecoderHead head_;
  std::vector<DecoderLayer> layers_;
  DecoderBuffers buffers_;
  sdk::Buffer fused_;
  int64_t q_width_ = 0, k_width_ = 0, v_width_ = 0;
};

}  // namespace

std::unique_ptr<sdk::Model> make_phi3() {
  return std::make_unique<Phi3>();
}

}  // namespace power::models
