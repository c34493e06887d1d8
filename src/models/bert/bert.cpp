// bert: BERT-family text encoders (general.architecture = "bert"), a ModelKind::kEncoder.
//
// Forward pass, as llama.cpp's `bert` graph defines it: x = token_embd[id] + token_types[0] +
// position_embd[pos]; LayerNorm (token_embd_norm); per block: q, k, v projections with biases,
// bidirectional multi-head softmax attention over the input's own tokens, output projection
// + bias, residual, LayerNorm (attn_output_norm); FFN up + bias, GELU (tanh form), down + bias,
// residual, LayerNorm (layer_output_norm). Pooling (bert.pooling_type, or the caller's) then
// reduces the final hidden states per input: mean over all tokens ([CLS] and [SEP] included),
// the [CLS] row, the last row, or none (every token's row).
//
// Numerics (why results are close to exact arithmetic and batch-invariant): every product
// takes f32 activations (Precision::kExact: no Q8 activation quantization, unlike the peer);
// layer norms, GELU and pooling accumulate in double on the CPU device. An input only ever
// attends to its own tokens and every per-token value is computed the same way whatever else
// is in the batch, so an input's vector is bit-identical alone or batched.
#include <memory>
#include <string>
#include <vector>

#include "builtin.h"

namespace power::models {
namespace {

constexpr int64_t kMaxDim = int64_t{1} << 24;

class Bert final : public sdk::Model {
 public:
  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    POWER_ASSIGN_OR_RETURN(E_, sdk::int_key(f, "bert.embedding_length", 1, kMaxDim));
    POWER_ASSIGN_OR_RETURN(n_layer_, sdk::int_key(f, "bert.block_count", 1, 4096));
    POWER_ASSIGN_OR_RETURN(F_, sdk::int_key(f, "bert.feed_forward_length", 1, kMaxDim));
    POWER_ASSIGN_OR_RETURN(H_, sdk::int_key(f, "bert.attention.head_count", 1, 65536));
    POWER_ASSIGN_OR_RETURN(int64_t n_head_kv,
                           sdk::int_key_or(f, "bert.attention.head_count_kv", H_, 1, 65536));
    if (n_head_kv != H_) {
      return Status(StatusCode::kUnsupported, "BERT with grouped key/value heads")
          .with("head_count", H_)
          .with("head_count_kv", n_head_kv);
    }
    if (E_ % H_ != 0) {
      return Status(StatusCode::kInvalidArgument, "embedding_length is not a multiple of heads")
          .with("embedding_length", E_)
          .with("head_count", H_);
    }
    POWER_ASSIGN_OR_RETURN(int64_t n_ctx,
                           sdk::int_key(f, "bert.context_length", 1, int64_t{1} << 20));
    POWER_ASSIGN_OR_RETURN(int64_t pooling, sdk::int_key_or(f, "bert.pooling_type", 0, 0, 1000));
    if (pooling > 3) {
      return Status(StatusCode::kUnsupported, "pooling type is not supported (0..3)")
          .with("key", "bert.pooling_type")
          .with("value", pooling);
    }
    if (!f.has("bert.attention.layer_norm_epsilon")) {
      return Status(StatusCode::kNotFound, "missing metadata key")
          .with("key", "bert.attention.layer_norm_epsilon");
    }
    auto eps = f.get_float("bert.attention.layer_norm_epsilon");
    if (!eps.ok() || !(*eps > 0.0 && *eps < 1.0)) {
      return Status(StatusCode::kInvalidArgument, "metadata value out of range")
          .with("key", "bert.attention.layer_norm_epsilon");
    }
    eps_ = static_cast<float>(*eps);
    if (f.has("bert.attention.causal")) {
      auto causal = f.get_bool("bert.attention.causal");
      if (causal.ok() && *causal) {
        return Status(StatusCode::kUnsupported, "causal BERT attention is not supported")
            .with("key", "bert.attention.causal");
      }
    }
    token_embd_ = w.require("token_embd.weight", {E_, sdk::kAnyDim}, sdk::kUseRows);
    const int64_t n_vocab = token_embd_ ? token_embd_.ne[1] : 0;
    // The token-type table's row 0 is the only type used.
    token_types_ = w.require("token_types.weight", {E_, sdk::kAnyDim}, sdk::kUseRows);
    position_embd_ = w.require("position_embd.weight", {E_, n_ctx}, sdk::kUseRows);
    embd_norm_w_ = w.require("token_embd_norm.weight", {E_}, sdk::kUseVector);
    embd_norm_b_ = w.require("token_embd_norm.bias", {E_}, sdk::kUseVector);
    for (int64_t i = 0; i < n_layer_; ++i) {
      auto name = [i](const char* s) { return "blk." + std::to_string(i) + "." + s; };
      auto mat = [&](const char* s, int64_t in, int64_t out) {
        return w.require(name(s), {in, out}, sdk::kUseMatmul);
      };
      auto vec = [&](const char* s, int64_t n) { return w.require(name(s), {n}, sdk::kUseVector); };
      Layer L;
      L.wq = mat("attn_q.weight", E_, E_);
      L.wk = mat("attn_k.weight", E_, E_);
      L.wv = mat("attn_v.weight", E_, E_);
      L.wo = mat("attn_output.weight", E_, E_);
      L.bq = vec("attn_q.bias", E_);
      L.bk = vec("attn_k.bias", E_);
      L.bv = vec("attn_v.bias", E_);
      L.bo = vec("attn_output.bias", E_);
      L.an_w = vec("attn_output_norm.weight", E_);
      L.an_b = vec("attn_output_norm.bias", E_);
      L.w_up = mat("ffn_up.weight", E_, F_);
      L.b_up = vec("ffn_up.bias", F_);
      L.w_down = mat("ffn_down.weight", F_, E_);
      L.b_down = vec("ffn_down.bias", E_);
      L.on_w = vec("layer_output_norm.weight", E_);
      L.on_b = vec("layer_output_norm.bias", E_);
      layers_.push_back(L);
    }
    spec.kind = sdk::ModelKind::kEncoder;
    spec.n_vocab = n_vocab;
    spec.n_embd = E_;
    spec.n_layer = n_layer_;
    spec.n_ctx_train = n_ctx;
    spec.n_ctx_max = n_ctx;  // learned positions
    spec.pooling = static_cast<sdk::Pooling>(pooling);
    using sdk::Op;
    spec.uses({Op::kEmbed, Op::kAddRow, Op::kAdd, Op::kLayerNorm, Op::kLinear, Op::kAttentionLocal,
               Op::kActivation, Op::kPool});
    return Status();
  }

  void plan(sdk::Planner& p) override {
    x_ = p.rows(E_, "x");
    h_ = p.rows(E_, "h");
    q_ = p.rows(E_, "q");
    k_ = p.rows(E_, "k");
    v_ = p.rows(E_, "v");
    attn_ = p.rows(E_, "attn");
    ff_ = p.rows(F_, "ff");
  }

  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const sdk::Act x = f.act(x_), h = f.act(h_), q = f.act(q_), k = f.act(k_), v = f.act(v_);
    const sdk::Act attn = f.act(attn_), ff = f.act(ff_);
    constexpr auto kExact = sdk::Precision::kExact;
    // (token + type 0) + position, in that order.
    op.embed(token_embd_, sdk::Index::kTokens, x);
    op.add_row(x, token_types_, 0);
    op.embed(position_embd_, sdk::Index::kPositions, h);
    op.add(x, h);
    op.layer_norm(x, &embd_norm_w_, &embd_norm_b_, x, eps_);
    sdk::AttentionParams ap;
    ap.n_head = H_;
    ap.n_head_kv = H_;
    ap.head_dim_k = ap.head_dim_v = E_ / H_;
    for (const Layer& L : layers_) {
      op.linear(L.wq, &L.bq, x, q, kExact);
      op.linear(L.wk, &L.bk, x, k, kExact);
      op.linear(L.wv, &L.bv, x, v, kExact);
      op.attention_local(q, k, v, attn, ap, /*causal=*/false);
      op.linear(L.wo, &L.bo, attn, h, kExact);
      op.add(h, x);
      op.layer_norm(h, &L.an_w, &L.an_b, h, eps_);
      op.linear(L.w_up, &L.b_up, h, ff, kExact);
      op.activate(ff, sdk::Activation::kGeluTanh);
      op.linear(L.w_down, &L.b_down, ff, x, kExact);
      op.add(x, h);
      op.layer_norm(x, &L.on_w, &L.on_b, x, eps_);
    }
    op.pool(x, f.pooling(), f.output());
    return Status();
  }

 private:
  struct Layer {
    sdk::Weight wq, wk, wv, wo, w_up, w_down;
    sdk::Weight bq, bk, bv, bo, b_up, b_down, an_w, an_b, on_w, on_b;
  };
  int64_t E_ = 0, F_ = 0, H_ = 0, n_layer_ = 0;
  float eps_ = 1e-12f;
  sdk::Weight token_embd_, token_types_, position_embd_, embd_norm_w_, embd_norm_b_;
  std::vector<Layer> layers_;
  sdk::Buffer x_, h_, q_, k_, v_, attn_, ff_;
};

}  // namespace

std::unique_ptr<sdk::Model> make_bert() {
  return std::make_unique<Bert>();
}

}  // namespace power::models
