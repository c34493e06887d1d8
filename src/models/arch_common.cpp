#include "models/arch_common.h"

namespace power {

void bind_embeddings(WeightBinder& b, const ModelHparams& hp, TensorView* token_embd,
                     TensorView* output, std::vector<float>* output_norm) {
  namespace tn = tensor_names;
  *token_embd = b.require(tn::kTokenEmbd, {hp.n_embd, hp.n_vocab});
  *output_norm = decoder::to_f32(b.require(tn::kOutputNorm, {hp.n_embd}));
  *output = b.optional(tn::kOutput, {hp.n_embd, hp.n_vocab});
  if (output->data == nullptr) *output = *token_embd;
}

void run_decoder_layer(Workspace& ws, const ModelHparams& hp, int64_t layer, const DecoderLayer& L,
                       const RopeParams& rp) {
  float* x = ws.x.data();
  float* xn = ws.xn.data();
  decoder::norm_rows(ws, x, L.attn_norm, xn, hp.n_embd, hp.rms_eps);
  const decoder::LinearJob qkv[] = {
      {&L.wq, &L.bq, ws.q.data()}, {&L.wk, &L.bk, ws.k.data()}, {&L.wv, &L.bv, ws.v.data()}};
  decoder::linear_same_input(ws, qkv, xn);
  if (!L.q_norm.empty()) {
    decoder::head_norm(ws, ws.q.data(), hp.n_head, hp.head_dim_k, L.q_norm, hp.rms_eps);
    decoder::head_norm(ws, ws.k.data(), hp.n_head_kv, hp.head_dim_k, L.k_norm, hp.rms_eps);
  }
  decoder::rope(ws, ws.q.data(), hp.n_head, hp.head_dim_k, rp);
  decoder::rope(ws, ws.k.data(), hp.n_head_kv, hp.head_dim_k, rp);
  decoder::attention(ws, hp, static_cast<int>(layer), ws.q.data(), ws.k.data(), ws.v.data(),
                     ws.attn.data());
  decoder::linear(ws, L.wo, L.bo, ws.attn.data(), xn);
  decoder::add_rows(ws, x, xn, hp.n_embd);
  decoder::norm_rows(ws, x, L.ffn_norm, xn, hp.n_embd, hp.rms_eps);
  const decoder::LinearJob gate_up[] = {{&L.w_gate, nullptr, ws.ff_a.data()},
                                        {&L.w_up, nullptr, ws.ff_b.data()}};
  decoder::linear_same_input(ws, gate_up, xn);
  decoder::swiglu_rows(ws, ws.ff_a.data(), ws.ff_b.data(), hp.n_ff, hp.n_ff);
  decoder::linear(ws, L.w_down, {}, ws.ff_a.data(), xn);
  decoder::add_rows(ws, x, xn, hp.n_embd);
}

Status check_kernel_limits(const ModelHparams& hp) {
  if (hp.head_dim_k > 1024 || hp.head_dim_v > 1024) {
    return Status(StatusCode::kUnsupported, "head size above 1024 is not supported")
        .with("key_length", hp.head_dim_k)
        .with("value_length", hp.head_dim_v);
  }
  return Status();
}

Result<int64_t> vocab_size(const GgufFile& file) {
  const GgufTensor* t = file.find_tensor(tensor_names::kTokenEmbd);
  if (t == nullptr || t->ne.size() != 2) {
    return Status(StatusCode::kNotFound, "missing 2-D tensor")
        .with("tensor", tensor_names::kTokenEmbd);
  }
  return static_cast<int64_t>(t->ne[1]);
}

RopeParams rope_params(const ModelHparams& hp, const std::vector<float>& freq_factors) {
  RopeParams p;
  p.kind = hp.rope_kind;
  p.n_rot = hp.n_rot;
  p.freq_base = hp.rope_freq_base;
  p.freq_scale = hp.rope_freq_scale;
  p.freq_factors = freq_factors.empty() ? nullptr : freq_factors.data();
  return p;
}

}  // namespace power
