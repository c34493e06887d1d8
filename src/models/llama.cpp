// llama: Llama 1/2/3 and Mistral-style files (general.architecture = "llama").
// Pre-norm decoder: RMSNorm, attention with RoPE (adjacent pairs), GQA, SwiGLU FFN; optional
// q/k/v/o biases; llama3 rope scaling through the rope_freqs tensor; output head tied to the
// token embedding when the file has no output.weight. Mixture-of-experts files are rejected.
#include "models/arch_common.h"

namespace power {
namespace {

class LlamaModel final : public Model {
 public:
  explicit LlamaModel(std::shared_ptr<const GgufFile> f) : Model(std::move(f)) {}

  Status bind() {
    namespace tn = tensor_names;
    const GgufFile& f = *file_;
    if (auto e = f.get_u64("llama.expert_count"); e.ok() && *e > 0) {
      return Status(StatusCode::kUnsupported, "mixture-of-experts llama files are not supported")
          .with("key", "llama.expert_count");
    }
    POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(f, "llama"));
    hp_.rope_kind = RopeKind::kNorm;
    POWER_ASSIGN_OR_RETURN(hp_.n_vocab, vocab_size(f));
    POWER_RETURN_IF_ERROR(check_kernel_limits(hp_));
    WeightBinder b(f);
    bind_embeddings(b, hp_, &token_embd_, &output_, &output_norm_);
    rope_freqs_ = decoder::to_f32(b.optional(tn::kRopeFreqs, {hp_.n_rot / 2}));
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
      L.wo = b.require(tn::layer(i, tn::kAttnOut), {o_width, hp_.n_embd});
      L.bq = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnQBias), {q_width}));
      L.bk = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnKBias), {k_width}));
      L.bv = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnVBias), {v_width}));
      L.bo = decoder::to_f32(b.optional(tn::layer(i, tn::kAttnOutBias), {hp_.n_embd}));
      L.ffn_norm = decoder::to_f32(b.require(tn::layer(i, tn::kFfnNorm), {hp_.n_embd}));
      L.w_gate = b.require(tn::layer(i, tn::kFfnGate), {hp_.n_embd, hp_.n_ff});
      L.w_up = b.require(tn::layer(i, tn::kFfnUp), {hp_.n_embd, hp_.n_ff});
      L.w_down = b.require(tn::layer(i, tn::kFfnDown), {hp_.n_ff, hp_.n_embd});
    }
    return b.finish();
  }

 private:
  void forward_layers(Workspace& ws) const override {
    const RopeParams rp = rope_params(hp_, rope_freqs_);
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      run_decoder_layer(ws, hp_, l, layers_[static_cast<size_t>(l)], rp);
    }
  }

  std::vector<DecoderLayer> layers_;
  std::vector<float> rope_freqs_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_llama(std::shared_ptr<const GgufFile> file) {
  auto m = std::make_unique<LlamaModel>(std::move(file));
  POWER_RETURN_IF_ERROR(m->bind());
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace power
