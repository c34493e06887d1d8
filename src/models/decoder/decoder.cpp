#include "decoder/decoder.h"

#include "decoder/tensor_names.h"

namespace power::models {

namespace tn = tensor_names;

Result<DecoderHparams> read_decoder_hparams(const sdk::ModelFile& f, const std::string& arch) {
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  DecoderHparams hp;
  hp.arch = arch;
  const std::string p = arch + ".";
  POWER_ASSIGN_OR_RETURN(hp.n_embd, sdk::int_key(f, p + "embedding_length", 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_layer, sdk::int_key(f, p + "block_count", 1, 4096));
  // MTP (NextN) layers are counted in block_count and sit after the main layers; the main
  // model runs only those before them (the nextn package binds the rest).
  POWER_ASSIGN_OR_RETURN(hp.n_nextn,
                         sdk::int_key_or(f, p + "nextn_predict_layers", 0, 0, hp.n_layer - 1));
  hp.n_layer -= hp.n_nextn;
  POWER_ASSIGN_OR_RETURN(hp.n_ff, sdk::int_key(f, p + "feed_forward_length", 1, kMaxDim));
  POWER_ASSIGN_OR_RETURN(hp.n_head, sdk::int_key(f, p + "attention.head_count", 1, 65536));
  POWER_ASSIGN_OR_RETURN(
      hp.n_head_kv, sdk::int_key_or(f, p + "attention.head_count_kv", hp.n_head, 1, hp.n_head));
  if (hp.n_head % hp.n_head_kv != 0) {
    return Status(StatusCode::kInvalidArgument, "head_count is not a multiple of head_count_kv")
        .with("head_count", hp.n_head)
        .with("head_count_kv", hp.n_head_kv);
  }
  POWER_ASSIGN_OR_RETURN(hp.n_ctx_train,
                         sdk::int_key_or(f, p + "context_length", 2048, 1, int64_t{1} << 30));
  const int64_t default_head = hp.n_embd / hp.n_head;
  POWER_ASSIGN_OR_RETURN(hp.head_dim_k,
                         sdk::int_key_or(f, p + "attention.key_length", default_head, 1, 65536));
  POWER_ASSIGN_OR_RETURN(hp.head_dim_v,
                         sdk::int_key_or(f, p + "attention.value_length", default_head, 1, 65536));
  POWER_ASSIGN_OR_RETURN(int64_t n_rot, sdk::int_key_or(f, p + "rope.dimension_count",
                                                        hp.head_dim_k, 0, hp.head_dim_k));
  if (n_rot % 2 != 0) {
    return Status(StatusCode::kInvalidArgument, "rope.dimension_count must be even")
        .with("key", p + "rope.dimension_count");
  }
  hp.n_rot = static_cast<int>(n_rot);
  POWER_ASSIGN_OR_RETURN(double base,
                         sdk::float_key_or(f, p + "rope.freq_base", 10000.0, 1e-3, 1e12));
  hp.rope_freq_base = static_cast<float>(base);
  POWER_ASSIGN_OR_RETURN(
      double eps, sdk::float_key_or(f, p + "attention.layer_norm_rms_epsilon", 1e-5, 0.0, 1.0));
  hp.rms_eps = static_cast<float>(eps);

  std::string scaling = "none";
  if (f.has(p + "rope.scaling.type")) {
    POWER_ASSIGN_OR_RETURN(scaling, f.get_string(p + "rope.scaling.type"));
  }
  POWER_ASSIGN_OR_RETURN(double factor,
                         sdk::float_key_or(f, p + "rope.scaling.factor", 0.0, 0.0, 1e6));
  if (factor == 0.0) {
    // Older files carry the linear scale directly.
    POWER_ASSIGN_OR_RETURN(double linear,
                           sdk::float_key_or(f, p + "rope.scale_linear", 0.0, 0.0, 1e6));
    factor = linear;
  }
  if (scaling == "linear") {
    if (factor > 0.0) hp.rope_freq_scale = static_cast<float>(1.0 / factor);
  } else if (scaling != "none" && scaling != "llama3") {
    // llama3 scaling arrives as the rope_freqs tensor, handled by the architecture.
    return Status(StatusCode::kUnsupported, "rope scaling type is not supported")
        .with("key", p + "rope.scaling.type")
        .with("value", scaling);
  } else if (scaling == "none" && factor > 0.0 && factor != 1.0) {
    hp.rope_freq_scale = static_cast<float>(1.0 / factor);
  }
  POWER_ASSIGN_OR_RETURN(hp.sliding_window, sdk::int_key_or(f, p + "attention.sliding_window", 0, 0,
                                                            int64_t{1} << 30));
  return hp;
}

DecoderLayer bind_layer(sdk::Weights& w, const DecoderHparams& hp, int64_t i,
                        const LayerTensors& what) {
  const int64_t q_width = hp.n_head * hp.head_dim_k;
  const int64_t k_width = hp.n_head_kv * hp.head_dim_k;
  const int64_t v_width = hp.n_head_kv * hp.head_dim_v;
  const int64_t o_width = hp.n_head * hp.head_dim_v;
  auto vec = [&](const char* suffix, int64_t n, Need need) {
    if (need == Need::kNo) return sdk::Weight{};
    const std::string name = tn::layer(i, suffix);
    return need == Need::kRequired ? w.require(name, {n}, sdk::kUseVector)
                                   : w.optional(name, {n}, sdk::kUseVector);
  };
  auto mat = [&](const char* suffix, int64_t in, int64_t out) {
    return w.require(tn::layer(i, suffix), {in, out}, sdk::kUseMatmul);
  };
  DecoderLayer L;
  L.attn_norm = vec(tn::kAttnNorm, hp.n_embd, Need::kRequired);
  L.wq = mat(tn::kAttnQ, hp.n_embd, q_width);
  L.wk = mat(tn::kAttnK, hp.n_embd, k_width);
  L.wv = mat(tn::kAttnV, hp.n_embd, v_width);
  L.bq = vec(tn::kAttnQBias, q_width, what.biases);
  L.bk = vec(tn::kAttnKBias, k_width, what.biases);
  L.bv = vec(tn::kAttnVBias, v_width, what.biases);
  L.q_norm = vec(tn::kAttnQNorm, hp.head_dim_k, what.qk_norm);
  L.k_norm = vec(tn::kAttnKNorm, hp.head_dim_k, what.qk_norm);
  L.wo = mat(tn::kAttnOut, o_width, hp.n_embd);
  L.bo = vec(tn::kAttnOutBias, hp.n_embd, what.out_bias);
  L.ffn_norm = vec(tn::kFfnNorm, hp.n_embd, Need::kRequired);
  L.w_gate = mat(tn::kFfnGate, hp.n_embd, hp.n_ff);
  L.w_up = mat(tn::kFfnUp, hp.n_embd, hp.n_ff);
  L.w_down = mat(tn::kFfnDown, hp.n_ff, hp.n_embd);
  return L;
}

DecoderBuffers plan_decoder(sdk::Planner& p, const DecoderHparams& hp) {
  DecoderBuffers b;
  b.x = p.rows(hp.n_embd, "x");
  b.xn = p.rows(hp.n_embd, "xn");
  b.q = p.rows(hp.n_head * hp.head_dim_k, "q");
  b.k = p.rows(hp.n_head_kv * hp.head_dim_k, "k");
  b.v = p.rows(hp.n_head_kv * hp.head_dim_v, "v");
  b.attn = p.rows(hp.n_head * hp.head_dim_v, "attn");
  b.ff_a = p.rows(hp.n_ff, "ff_gate");
  b.ff_b = p.rows(hp.n_ff, "ff_up");
  b.out = p.rows(hp.n_embd, "out");
  return b;
}

DecoderActs decoder_acts(sdk::Forward& f, const DecoderBuffers& b) {
  return {f.act(b.x), f.act(b.xn),   f.act(b.q),    f.act(b.k),
          f.act(b.v), f.act(b.attn), f.act(b.ff_a), f.act(b.ff_b)};
}

sdk::Rope rope_of(const DecoderHparams& hp, const sdk::Weight& freq_factors) {
  sdk::Rope r;
  r.mode = hp.rope_mode;
  r.n_rot = hp.n_rot;
  r.freq_base = hp.rope_freq_base;
  r.freq_scale = hp.rope_freq_scale;
  r.freq_factors = freq_factors;
  return r;
}

sdk::AttentionParams attention_of(const DecoderHparams& hp) {
  sdk::AttentionParams a;
  a.n_head = hp.n_head;
  a.n_head_kv = hp.n_head_kv;
  a.head_dim_k = hp.head_dim_k;
  a.head_dim_v = hp.head_dim_v;
  a.sliding_window = hp.sliding_window;
  return a;
}

void declare_decoder_ops(sdk::ModelSpec& spec) {
  using sdk::Op;
  spec.uses({Op::kEmbed, Op::kRmsNorm, Op::kLinear, Op::kRope, Op::kAttention, Op::kGlu, Op::kAdd,
             Op::kSelectRows, Op::kCopy});
}

void decoder_spec(const DecoderHparams& hp, sdk::ModelSpec& spec) {
  spec.kind = sdk::ModelKind::kDecoder;
  spec.n_vocab = hp.n_vocab;
  spec.n_embd = hp.n_embd;
  spec.n_layer = hp.n_layer;
  spec.n_ctx_train = hp.n_ctx_train;
  spec.state.assign(static_cast<size_t>(hp.n_layer),
                    sdk::LayerState::attention(hp.n_head_kv, hp.head_dim_k, hp.head_dim_v));
  declare_decoder_ops(spec);
  spec.exports_hidden = true;
}

void run_decoder_layer(sdk::Ops& op, const DecoderHparams& hp, int layer, const DecoderLayer& L,
                       const sdk::Rope& rope, const DecoderActs& a) {
  op.rms_norm(a.x, &L.attn_norm, a.xn, hp.rms_eps);
  const sdk::LinearJob qkv[] = {{&L.wq, &L.bq, a.q}, {&L.wk, &L.bk, a.k}, {&L.wv, &L.bv, a.v}};
  op.linear_many(qkv, a.xn);
  if (L.q_norm) {
    op.rms_norm(a.q, &L.q_norm, a.q, hp.rms_eps, hp.head_dim_k);
    op.rms_norm(a.k, &L.k_norm, a.k, hp.rms_eps, hp.head_dim_k);
  }
  op.rope(a.q, hp.head_dim_k, rope);
  op.rope(a.k, hp.head_dim_k, rope);
  op.attention(layer, a.q, a.k, a.v, a.attn, attention_of(hp));
  op.linear(L.wo, &L.bo, a.attn, a.xn);
  op.add(a.x, a.xn);
  op.rms_norm(a.x, &L.ffn_norm, a.xn, hp.rms_eps);
  const sdk::LinearJob gate_up[] = {{&L.w_gate, nullptr, a.ff_a}, {&L.w_up, nullptr, a.ff_b}};
  op.linear_many(gate_up, a.xn);
  op.glu(a.ff_a, a.ff_b, sdk::Activation::kSilu);
  op.linear(L.w_down, nullptr, a.ff_a, a.xn);
  op.add(a.x, a.xn);
}

DecoderHead bind_head(sdk::Weights& w, DecoderHparams& hp) {
  DecoderHead h;
  h.token_embd = w.require(tn::kTokenEmbd, {hp.n_embd, sdk::kAnyDim}, sdk::kUseRows);
  hp.n_vocab = h.token_embd ? h.token_embd.ne[1] : 0;
  h.output_norm = w.require(tn::kOutputNorm, {hp.n_embd}, sdk::kUseVector);
  h.output = w.optional(tn::kOutput, {hp.n_embd, hp.n_vocab}, sdk::kUseMatmul);
  // Tied: the embedding table is also the output matrix.
  if (!h.output && h.token_embd) {
    h.output = w.require(tn::kTokenEmbd, {hp.n_embd, hp.n_vocab}, sdk::kUseMatmul);
  }
  return h;
}

void run_output_head(sdk::Forward& f, const DecoderHparams& hp, const DecoderHead& head,
                     const DecoderBuffers& b, sdk::Act x) {
  sdk::Ops& op = f.ops();
  f.set_hidden(x);
  const sdk::Act rows = f.act(b.out).first_rows(f.n_outputs());
  op.select_output_rows(x, rows);
  op.rms_norm(rows, &head.output_norm, rows, hp.rms_eps);
  op.linear(head.output, nullptr, rows, f.output());
}

Status StandardDecoder::load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) {
  POWER_RETURN_IF_ERROR(check_file(f));
  POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(f, config_.arch));
  hp_.rope_mode = config_.rope_mode;
  head_ = bind_head(w, hp_);
  if (config_.rope_freqs) {
    rope_freqs_ = w.optional(tn::kRopeFreqs, {hp_.n_rot / 2}, sdk::kUseVector);
  }
  for (int64_t i = 0; i < hp_.n_layer; ++i)
    layers_.push_back(bind_layer(w, hp_, i, config_.tensors));
  decoder_spec(hp_, spec);
  return Status();
}

Status StandardDecoder::forward(sdk::Forward& f) const {
  sdk::Ops& op = f.ops();
  const DecoderActs a = decoder_acts(f, buffers_);
  op.embed(head_.token_embd, sdk::Index::kTokens, a.x);
  const sdk::Rope rope = rope_of(hp_, rope_freqs_);
  for (int64_t l = 0; l < hp_.n_layer; ++l) {
    run_decoder_layer(op, hp_, static_cast<int>(l), layers_[static_cast<size_t>(l)], rope, a);
  }
  run_output_head(f, hp_, head_, buffers_, a.x);
  return Status();
}

}  // namespace power::models
