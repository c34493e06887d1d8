// gpt2: GPT-2 on the public model SDK (contract in gpt2.h).
//
// Forward pass, as llama.cpp's gpt2 graph defines it: x = token_embd[id] + position_embd[pos];
// per layer: h = LayerNorm(x)·w + b; qkv = h·Wqkvᵀ + b (one fused product, rows q | k | v,
// read as column slices of one buffer, no split copies); causal softmax(q·kᵀ/sqrt(head_dim))·v
// per head over the sequence's KV state; x += attn·Woᵀ + bo; h = LayerNorm(x);
// x += gelu(h·Wupᵀ + b_up)·Wdownᵀ + b_down. Logits = LayerNorm_out(x)·outputᵀ (no bias), only
// for the rows that asked for them. Learned positions bound the context (spec.n_ctx_max).
//
// Numerics (Numerics{} in gpt2.h), chosen by measurement: gpt2_check against the peer's
// fixtures (../shared/fixtures/models/gpt2: 48 positions x 512 logits, F32 KV cache, 2 threads,
// AVX-512 CPU). Bounds: F32 max|ours - peer| <= 1e-3 with top-1 48/48; quantized
// max|ours - exact| <= 1.25 max|peer - exact| + 2e-3 (Q8_0 5.345e-2, Q4_K_M 6.456e-2);
// peer - exact: F32 9.915e-4, Q8_0 4.116e-2, Q4_K_M 5.005e-2.
//
//   gelu / precision     F32 ours-peer  Q8_0 ours-exact / -peer  Q4_K_M ours-exact / -peer
//   f16 table / default  3.18e-4 48/48  4.116e-2 / 1.86e-2 48/48  5.005e-2 / 5.67e-3 48/48
//   f16 table / exact    3.18e-4 48/48  1.03e-3  / 4.10e-2 47/48  1.01e-3  / 5.01e-2 47/48
//   exact / default      9.92e-4 48/48  5.22e-2  / 5.30e-2 46/48  5.25e-2  / 5.27e-2 48/48
//   exact / exact        9.92e-4 48/48  1.0e-6   / 4.12e-2 47/48  9.5e-7   / 5.01e-2 47/48
//   (n/48: top-1 equal to the peer's)
//
// kGeluTanhF16: with the exact tanh GELU the F32 file sits at 9.92e-4 against the 1e-3 bound
// (the peer's f16 table is all of that distance) and Q8_0 at 5.22e-2 against 5.345e-2;
// emulating the table leaves 3.2e-4 (inputs on the other side of an f16 rounding boundary).
// Precision::kDefault: the CPU device then quantizes activations exactly as the peer does, so
// the quantized files' logits equal the peer's to ~2e-7 at 46/48 (Q8_0) and 47/48 (Q4_K_M)
// positions; the rest are single quantizer inputs that round the other way (up to 1.9e-2).
// kExact would be closer to exact arithmetic but only as close to the peer as exact arithmetic
// is, with top-1 47/48. Greedy (32 ids after 16): F32 and Q8_0 give the peer's ids with every
// combination. Q4_K_M gives 31/32 with every combination: step 25 is a near tie (the peer's
// own top-1 margin there is 3.2e-3, and float64 arithmetic picks our token, as kExact does);
// our gap to the peer's token is 0.0166 with the chosen numerics (0.031 to 0.046 otherwise),
// within the file's logits tolerance, which gpt2_check accepts for quantized files.
#include "gpt2.h"

#include <memory>
#include <string>
#include <vector>

namespace gpt2 {
namespace {

using power::Result;
using power::Status;
using power::StatusCode;
namespace sdk = power::sdk;

constexpr int64_t kMaxDim = int64_t{1} << 24;

struct Hparams {
  int64_t n_embd = 0, n_layer = 0, n_ff = 0, n_head = 0, n_head_kv = 0, head_dim = 0;
  int64_t n_ctx = 0;
  int64_t n_vocab = sdk::kAnyDim;  // gpt2.vocab_size when the file has it
  float eps = 1e-5f;
};

// Every key range-checked; errors name the key.
Result<Hparams> read_hparams(const sdk::ModelFile& f) {
  Hparams hp;
  POWER_ASSIGN_OR_RETURN(hp.n_embd, sdk::int_key(f, "gpt2.embedding_length", 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_layer, sdk::int_key(f, "gpt2.block_count", 1, 4096));
  POWER_ASSIGN_OR_RETURN(hp.n_ff, sdk::int_key(f, "gpt2.feed_forward_length", 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_head, sdk::int_key(f, "gpt2.attention.head_count", 1, 65536));
  // GPT-2 files have no head_count_kv; llama.cpp reads it when present, and so do we.
  POWER_ASSIGN_OR_RETURN(
      hp.n_head_kv, sdk::int_key_or(f, "gpt2.attention.head_count_kv", hp.n_head, 1, hp.n_head));
  if (hp.n_embd % hp.n_head != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "gpt2.embedding_length is not a multiple of gpt2.attention.head_count")
        .with("key", "gpt2.embedding_length")
        .with("embedding_length", hp.n_embd)
        .with("head_count", hp.n_head);
  }
  if (hp.n_head % hp.n_head_kv != 0) {
    return Status(StatusCode::kInvalidArgument,
                  "gpt2.attention.head_count is not a multiple of head_count_kv")
        .with("key", "gpt2.attention.head_count_kv")
        .with("head_count", hp.n_head)
        .with("head_count_kv", hp.n_head_kv);
  }
  hp.head_dim = hp.n_embd / hp.n_head;
  // Required: position_embd has exactly this many rows.
  POWER_ASSIGN_OR_RETURN(hp.n_ctx, sdk::int_key(f, "gpt2.context_length", 1, int64_t{1} << 24));
  POWER_ASSIGN_OR_RETURN(double eps,
                         sdk::float_key(f, "gpt2.attention.layer_norm_epsilon", 1e-30, 1.0));
  hp.eps = static_cast<float>(eps);
  // Optional; when present the token embedding and the output head must have this many rows
  // (as in llama.cpp, which sizes both by it).
  POWER_ASSIGN_OR_RETURN(hp.n_vocab,
                         sdk::int_key_or(f, "gpt2.vocab_size", sdk::kAnyDim, 1, int64_t{1} << 31));
  return hp;
}

class Gpt2 final : public sdk::Model {
 public:
  explicit Gpt2(const Numerics& numerics) : numerics_(numerics) {}

  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    if (numerics_.gelu != sdk::Activation::kGeluTanh &&
        numerics_.gelu != sdk::Activation::kGeluTanhF16) {
      return Status(StatusCode::kInvalidArgument, "gpt2 GELU must be kGeluTanh or kGeluTanhF16");
    }
    POWER_ASSIGN_OR_RETURN(hp_, read_hparams(f));
    const int64_t E = hp_.n_embd, F = hp_.n_ff;
    q_width_ = hp_.n_head * hp_.head_dim;
    kv_width_ = hp_.n_head_kv * hp_.head_dim;
    const int64_t qkv_width = q_width_ + 2 * kv_width_;

    token_embd_ = w.require("token_embd.weight", {E, hp_.n_vocab}, sdk::kUseRows);
    const int64_t n_vocab = token_embd_ ? token_embd_.ne[1] : 0;
    position_embd_ = w.require("position_embd.weight", {E, hp_.n_ctx}, sdk::kUseRows);
    for (int64_t i = 0; i < hp_.n_layer; ++i) {
      auto name = [i](const char* s) { return "blk." + std::to_string(i) + "." + s; };
      auto mat = [&](const char* s, int64_t in, int64_t out) {
        return w.require(name(s), {in, out}, sdk::kUseMatmul);
      };
      auto vec = [&](const char* s, int64_t n) { return w.require(name(s), {n}, sdk::kUseVector); };
      Layer L;
      L.attn_norm_w = vec("attn_norm.weight", E);
      L.attn_norm_b = vec("attn_norm.bias", E);
      L.wqkv = mat("attn_qkv.weight", E, qkv_width);
      L.bqkv = vec("attn_qkv.bias", qkv_width);
      L.wo = mat("attn_output.weight", q_width_, E);
      L.bo = vec("attn_output.bias", E);
      L.ffn_norm_w = vec("ffn_norm.weight", E);
      L.ffn_norm_b = vec("ffn_norm.bias", E);
      L.w_up = mat("ffn_up.weight", E, F);
      L.b_up = vec("ffn_up.bias", F);
      L.w_down = mat("ffn_down.weight", F, E);
      L.b_down = vec("ffn_down.bias", E);
      layers_.push_back(L);
    }
    output_norm_w_ = w.require("output_norm.weight", {E}, sdk::kUseVector);
    output_norm_b_ = w.require("output_norm.bias", {E}, sdk::kUseVector);
    output_ = w.optional("output.weight", {E, n_vocab}, sdk::kUseMatmul);
    // Tied head: the embedding table again, now also as the output matrix.
    if (!output_ && token_embd_) {
      output_ = w.require("token_embd.weight", {E, n_vocab}, sdk::kUseMatmul);
    }

    spec.kind = sdk::ModelKind::kDecoder;
    spec.n_vocab = n_vocab;
    spec.n_embd = E;
    spec.n_layer = hp_.n_layer;
    spec.n_ctx_train = hp_.n_ctx;
    spec.n_ctx_max = hp_.n_ctx;  // no position past the last learned one
    spec.state.assign(static_cast<size_t>(hp_.n_layer),
                      sdk::LayerState::attention(hp_.n_head_kv, hp_.head_dim, hp_.head_dim));
    using sdk::Op;
    spec.uses({Op::kEmbed, Op::kAdd, Op::kLayerNorm, Op::kLinear, Op::kAttention, Op::kActivation,
               Op::kSelectRows});
    return Status();
  }

  void plan(sdk::Planner& p) override {
    x_ = p.rows(hp_.n_embd, "x");
    h_ = p.rows(hp_.n_embd, "h");
    qkv_ = p.rows(q_width_ + 2 * kv_width_, "qkv");
    attn_ = p.rows(q_width_, "attn");
    ff_ = p.rows(hp_.n_ff, "ff");
    out_ = p.rows(hp_.n_embd, "out");
  }

  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const sdk::Act x = f.act(x_), h = f.act(h_), qkv = f.act(qkv_), attn = f.act(attn_);
    const sdk::Act ff = f.act(ff_);
    const sdk::Act q = qkv.slice(0, q_width_);
    const sdk::Act k = qkv.slice(q_width_, kv_width_);
    const sdk::Act v = qkv.slice(q_width_ + kv_width_, kv_width_);
    const sdk::Precision prec = numerics_.precision;
    sdk::AttentionParams ap;
    ap.n_head = hp_.n_head;
    ap.n_head_kv = hp_.n_head_kv;
    ap.head_dim_k = ap.head_dim_v = hp_.head_dim;  // scale 0: 1/sqrt(head_dim)

    op.embed(token_embd_, sdk::Index::kTokens, x);
    op.embed(position_embd_, sdk::Index::kPositions, h);
    op.add(x, h);
    for (size_t l = 0; l < layers_.size(); ++l) {
      const Layer& L = layers_[l];
      op.layer_norm(x, &L.attn_norm_w, &L.attn_norm_b, h, hp_.eps);
      op.linear(L.wqkv, &L.bqkv, h, qkv, prec);
      op.attention(static_cast<int>(l), q, k, v, attn, ap);
      op.linear(L.wo, &L.bo, attn, h, prec);
      op.add(x, h);
      op.layer_norm(x, &L.ffn_norm_w, &L.ffn_norm_b, h, hp_.eps);
      op.linear(L.w_up, &L.b_up, h, ff, prec);
      op.activate(ff, numerics_.gelu);
      op.linear(L.w_down, &L.b_down, ff, h, prec);
      op.add(x, h);
    }
    // Only the rows that asked for logits go through the final norm and the head.
    const sdk::Act rows = f.act(out_).first_rows(f.n_outputs());
    op.select_output_rows(x, rows);
    op.layer_norm(rows, &output_norm_w_, &output_norm_b_, rows, hp_.eps);
    op.linear(output_, nullptr, rows, f.output(), prec);
    return Status();
  }

 private:
  struct Layer {
    sdk::Weight attn_norm_w, attn_norm_b, wqkv, bqkv, wo, bo;
    sdk::Weight ffn_norm_w, ffn_norm_b, w_up, b_up, w_down, b_down;
  };
  Numerics numerics_;
  Hparams hp_;
  int64_t q_width_ = 0, kv_width_ = 0;
  sdk::Weight token_embd_, position_embd_, output_norm_w_, output_norm_b_, output_;
  std::vector<Layer> layers_;
  sdk::Buffer x_, h_, qkv_, attn_, ff_, out_;
};

}  // namespace

sdk::Architecture architecture(const Numerics& numerics) {
  sdk::Architecture a;
  a.name = "gpt2";
  a.description = "GPT-2 (learned positions, LayerNorm, fused QKV, GELU); examples/gpt2";
  a.kind = sdk::ModelKind::kDecoder;
  a.create = [numerics]() -> std::unique_ptr<sdk::Model> {
    return std::make_unique<Gpt2>(numerics);
  };
  return a;
}

}  // namespace gpt2
