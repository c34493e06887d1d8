#include "models/mtp.h"

#include <algorithm>

#include "kernels/cpu/matmul.h"
#include "models/weights.h"

namespace power {

int64_t mtp_layer_count(const GgufFile& file) {
  auto arch = file.get_string("general.architecture");
  if (!arch.ok()) return 0;
  auto n = file.get_u64(*arch + ".nextn_predict_layers");
  return n.ok() ? static_cast<int64_t>(*n) : 0;
}

Result<std::unique_ptr<MtpHead>> MtpHead::load(const Model& main) {
  namespace tn = tensor_names;
  const GgufFile& f = main.file();
  const ModelHparams& mh = main.hparams();
  const std::string key = mh.arch + ".nextn_predict_layers";
  auto n_nextn = f.get_u64(key);
  if (!n_nextn.ok() || *n_nextn == 0) {
    return Status(StatusCode::kInvalidArgument, "the model has no MTP layers")
        .with("missing_key", key);
  }
  if (mh.arch != "llama" && mh.arch != "qwen2" && mh.arch != "qwen3") {
    return Status(StatusCode::kUnsupported, "MTP layers are supported for llama, qwen2 and qwen3")
        .with("arch", mh.arch);
  }
  std::unique_ptr<MtpHead> h(new MtpHead());
  h->hp_ = mh;
  h->hp_.n_layer = 1;  // the MTP KV cache holds one layer
  h->n_nextn_ = static_cast<int64_t>(*n_nextn);
  h->first_block_ = mh.n_layer;  // hparams.cpp already subtracted the MTP layers
  const ModelHparams& hp = h->hp_;
  const int64_t q_width = hp.n_head * hp.head_dim_k;
  const int64_t k_width = hp.n_head_kv * hp.head_dim_k;
  const int64_t v_width = hp.n_head_kv * hp.head_dim_v;
  const int64_t o_width = hp.n_head * hp.head_dim_v;
  WeightBinder b(f);
  auto nextn = [](int64_t blk, const char* what) {
    return "blk." + std::to_string(blk) + ".nextn." + what + ".weight";
  };
  for (int64_t l = 0; l < h->n_nextn_; ++l) {
    const int64_t i = h->first_block_ + l;
    DecoderLayer L;
    L.attn_norm = decoder::to_f32(b.require(tn::layer(i, tn::kAttnNorm), {hp.n_embd}));
    L.wq = b.require(tn::layer(i, tn::kAttnQ), {hp.n_embd, q_width});
    L.wk = b.require(tn::layer(i, tn::kAttnK), {hp.n_embd, k_width});
    L.wv = b.require(tn::layer(i, tn::kAttnV), {hp.n_embd, v_width});
    L.wo = b.require(tn::layer(i, tn::kAttnOut), {o_width, hp.n_embd});
    L.bq = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnQBias), {q_width}));
    L.bk = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnKBias), {k_width}));
    L.bv = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnVBias), {v_width}));
    L.bo = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnOutBias), {hp.n_embd}));
    L.q_norm = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnQNorm), {hp.head_dim_k}));
    L.k_norm = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnKNorm), {hp.head_dim_k}));
    L.ffn_norm = decoder::to_f32(b.require(tn::layer(i, tn::kFfnNorm), {hp.n_embd}));
    L.w_gate = b.require(tn::layer(i, tn::kFfnGate), {hp.n_embd, hp.n_ff});
    L.w_up = b.require(tn::layer(i, tn::kFfnUp), {hp.n_embd, hp.n_ff});
    L.w_down = b.require(tn::layer(i, tn::kFfnDown), {hp.n_ff, hp.n_embd});
    TensorView eh = b.require(nextn(i, "eh_proj"), {2 * hp.n_embd, hp.n_embd});
    std::vector<float> en = decoder::to_f32(b.require(nextn(i, "enorm"), {hp.n_embd}));
    std::vector<float> hn = decoder::to_f32(b.require(nextn(i, "hnorm"), {hp.n_embd}));
    std::vector<float> sn = decoder::to_f32(b.optional(nextn(i, "shared_head_norm"), {hp.n_embd}));
    TensorView head = b.optional(nextn(i, "shared_head_head"), {hp.n_embd, hp.n_vocab});
    TensorView emb = b.optional(nextn(i, "embed_tokens"), {hp.n_embd, hp.n_vocab});
    if (L.q_norm.empty() != L.k_norm.empty()) {
      return Status(StatusCode::kInvalidArgument, "MTP block has only one of the q/k norms")
          .with("block", i);
    }
    if (l == 0) {  // the layer drafts run on
      h->layer_ = std::move(L);
      h->eh_proj_ = eh;
      h->enorm_ = std::move(en);
      h->hnorm_ = std::move(hn);
      h->head_norm_ = std::move(sn);
      h->head_ = head;
      h->embed_ = emb;
    }
  }
  // Shared with the main model when the MTP block has none of its own.
  TensorView main_embd = b.require(tn::kTokenEmbd, {hp.n_embd, hp.n_vocab});
  TensorView main_out = b.optional(tn::kOutput, {hp.n_embd, hp.n_vocab});
  std::vector<float> main_norm = decoder::to_f32(b.require(tn::kOutputNorm, {hp.n_embd}));
  h->rope_freqs_ = decoder::to_f32(b.optional(tn::kRopeFreqs, {hp.n_rot / 2}));
  POWER_RETURN_IF_ERROR(b.status().with("mtp_layers", h->n_nextn_));
  if (h->embed_.data == nullptr) h->embed_ = main_embd;
  if (h->head_.data == nullptr) h->head_ = main_out.data != nullptr ? main_out : main_embd;
  if (h->head_norm_.empty()) h->head_norm_ = std::move(main_norm);
  return h;
}

KvCacheConfig MtpHead::kv_config(int64_t n_ctx, int n_sequences, GgmlType dtype) const {
  KvCacheConfig c;
  c.n_layer = 1;
  c.n_kv_heads = static_cast<int>(hp_.n_head_kv);
  c.head_dim_k = static_cast<int>(hp_.head_dim_k);
  c.head_dim_v = static_cast<int>(hp_.head_dim_v);
  c.block_tokens = 16;
  c.n_blocks =
      static_cast<int>((n_ctx + c.block_tokens - 1) / c.block_tokens) * std::max(1, n_sequences);
  c.dtype = dtype;
  return c;
}

Result<std::unique_ptr<Workspace>> MtpHead::make_workspace(int64_t max_tokens, int64_t n_ctx,
                                                           int n_threads) const {
  if (max_tokens <= 0 || n_ctx <= 0) {
    return Status(StatusCode::kInvalidArgument, "batch and context sizes must be positive");
  }
  return std::make_unique<Workspace>(hp_, max_tokens, n_ctx, n_threads);
}

Status MtpHead::forward(Workspace& ws, KvSequence& seq, const float* hidden,
                        std::span<const int32_t> tokens, float* concat, float* out_hidden,
                        float* out_logits) const {
  const int64_t n = static_cast<int64_t>(tokens.size());
  const int64_t d = hp_.n_embd;
  if (n == 0) return Status(StatusCode::kInvalidArgument, "empty MTP batch");
  if (n > ws.max_tokens) {
    return Status(StatusCode::kOutOfRange, "MTP batch exceeds the workspace's maximum tokens")
        .with("tokens", n)
        .with("max", ws.max_tokens);
  }
  for (int32_t t : tokens) {
    if (t < 0 || t >= hp_.n_vocab) {
      return Status(StatusCode::kInvalidArgument, "token id out of range").with("token", t);
    }
  }
  const int64_t start = seq.n_tokens();
  if (start + n > ws.n_ctx) {
    return Status(StatusCode::kOutOfRange, "MTP sequence exceeds the context size")
        .with("positions", start + n)
        .with("n_ctx", ws.n_ctx);
  }
  POWER_RETURN_IF_ERROR(seq.reserve(static_cast<int>(start + n)));
  const ForwardChunk chunk{&seq, tokens, false};
  ws.chunks = std::span<const ForwardChunk>(&chunk, 1);
  ws.n_tokens = n;
  std::vector<float>& tmp = ws.xn;  // n_embd per row
  for (int64_t r = 0; r < n; ++r) {
    ws.pos[static_cast<size_t>(r)] = static_cast<int32_t>(start + r);
    ws.chunk_of[static_cast<size_t>(r)] = 0;
    float* c = concat + r * 2 * d;
    matrix_row_f32(embed_, tokens[static_cast<size_t>(r)], tmp.data());
    rms_norm(tmp.data(), enorm_.data(), c, d, hp_.rms_eps);
    rms_norm(hidden + r * d, hnorm_.data(), c + d, d, hp_.rms_eps);
  }
  decoder::linear(ws, eh_proj_, {}, concat, ws.x.data());
  const RopeParams rp = rope_params(hp_, rope_freqs_);
  run_decoder_layer(ws, hp_, 0, layer_, rp);
  const float* last = ws.x.data() + (n - 1) * d;
  std::copy(last, last + d, out_hidden);
  rms_norm(last, head_norm_.data(), ws.xn.data(), d, hp_.rms_eps);
  matmul(ws.cpu, head_, ws.xn.data(), d, 1, out_logits, hp_.n_vocab);
  seq.set_n_tokens(static_cast<int>(start + n));
  ws.chunks = {};
  return Status();
}

}  // namespace power
