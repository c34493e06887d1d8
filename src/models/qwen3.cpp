// qwen3: Qwen3 dense models (general.architecture = "qwen3"). No attention biases; q and k
// are RMS-normalized per head (over head_dim, weight attn_q_norm / attn_k_norm) after the
// projection and before NEOX RoPE. The q width n_head * key_length may differ from n_embd.
#include "models/arch_common.h"

namespace power {
namespace {

class Qwen3Model final : public Model {
 public:
  explicit Qwen3Model(std::shared_ptr<const GgufFile> f) : Model(std::move(f)) {}

  Status bind() {
    namespace tn = tensor_names;
    POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(*file_, "qwen3"));
    hp_.rope_kind = RopeKind::kNeox;
    POWER_ASSIGN_OR_RETURN(hp_.n_vocab, vocab_size(*file_));
    POWER_RETURN_IF_ERROR(check_kernel_limits(hp_));
    WeightBinder b(*file_);
    bind_embeddings(b, hp_, &token_embd_, &output_, &output_norm_);
    const int64_t q_width = hp_.n_head * hp_.head_dim_k;
    const int64_t k_width = hp_.n_head_kv * hp_.head_dim_k;
    const int64_t v_width = hp_.n_head_kv * hp_.head_dim_v;
    const int64_t o_width = hp_.n_head * hp_.head_dim_v;
    layers_.resize(static_cast<size_t>(hp_.n_layer));
    for (int64_t i = 0; i < hp_.n_layer; ++i) {
      DecoderLayer& L = layers_[static_cast<size_t>(i)];
      L.attn_norm = decoder::to_f32(b.require(tn::layer(i, tn::kAttnNorm), {hp_.n_embd}));
      L.wq = b.require(tn::layer(i, tn::kAttnQ), {hp_.n_embd, q_width});
      L.wk = b.require(tn::layer(i, tn::kAttnK), {hp_.n_embd, k_width});
      L.wv = b.require(tn::layer(i, tn::kAttnV), {hp_.n_embd, v_width});
      L.q_norm = decoder::to_f32(b.require(tn::layer(i, tn::kAttnQNorm), {hp_.head_dim_k}));
      L.k_norm = decoder::to_f32(b.require(tn::layer(i, tn::kAttnKNorm), {hp_.head_dim_k}));
      L.wo = b.require(tn::layer(i, tn::kAttnOut), {o_width, hp_.n_embd});
      L.ffn_norm = decoder::to_f32(b.require(tn::layer(i, tn::kFfnNorm), {hp_.n_embd}));
      L.w_gate = b.require(tn::layer(i, tn::kFfnGate), {hp_.n_embd, hp_.n_ff});
      L.w_up = b.require(tn::layer(i, tn::kFfnUp), {hp_.n_embd, hp_.n_ff});
      L.w_down = b.require(tn::layer(i, tn::kFfnDown), {hp_.n_ff, hp_.n_embd});
    }
    return b.finish();
  }

 private:
  void forward_layers(Workspace& ws) const override {
    const RopeParams rp = rope_params(hp_, {});
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      run_decoder_layer(ws, hp_, l, layers_[static_cast<size_t>(l)], rp);
    }
  }

  std::vector<DecoderLayer> layers_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_qwen3(std::shared_ptr<const GgufFile> file) {
  auto m = std::make_unique<Qwen3Model>(std::move(file));
  POWER_RETURN_IF_ERROR(m->bind());
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace power
