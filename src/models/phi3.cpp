// phi3: Phi-3 / Phi-3.5 dense models (general.architecture = "phi3"). A fused qkv projection
// (rows: q, then k, then v), a fused gate|up projection (first n_ff rows gate, last n_ff up),
// NEOX RoPE and sliding-window attention (phi3.attention.sliding_window, every layer; the
// peer requires the key). LongRoPE files (rope_factors_long/short) are rejected.
#include <cstring>

#include "models/arch_common.h"

namespace power {
namespace {

class Phi3Model final : public Model {
 public:
  explicit Phi3Model(std::shared_ptr<const GgufFile> f) : Model(std::move(f)) {}

  Status bind() {
    namespace tn = tensor_names;
    POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(*file_, "phi3"));
    hp_.rope_kind = RopeKind::kNeox;
    POWER_ASSIGN_OR_RETURN(hp_.n_vocab, vocab_size(*file_));
    POWER_RETURN_IF_ERROR(check_kernel_limits(hp_));
    if (file_->find("phi3.attention.sliding_window") == nullptr) {
      return Status(StatusCode::kInvalidArgument, "missing metadata key")
          .with("key", "phi3.attention.sliding_window");
    }
    WeightBinder b(*file_);
    if (b.has("rope_factors_long.weight") || b.has("rope_factors_short.weight")) {
      return Status(StatusCode::kUnsupported, "LongRoPE phi3 files are not supported yet")
          .with("tensor", "rope_factors_long.weight");
    }
    bind_embeddings(b, hp_, &token_embd_, &output_, &output_norm_);
    q_width_ = hp_.n_head * hp_.head_dim_k;
    k_width_ = hp_.n_head_kv * hp_.head_dim_k;
    v_width_ = hp_.n_head_kv * hp_.head_dim_v;
    const int64_t o_width = hp_.n_head * hp_.head_dim_v;
    layers_.resize(static_cast<size_t>(hp_.n_layer));
    for (int64_t i = 0; i < hp_.n_layer; ++i) {
      DecoderLayer& L = layers_[static_cast<size_t>(i)];
      L.attn_norm = decoder::to_f32(b.require(tn::layer(i, tn::kAttnNorm), {hp_.n_embd}));
      L.wqkv = b.require(tn::layer(i, tn::kAttnQkv), {hp_.n_embd, q_width_ + k_width_ + v_width_});
      L.wo = b.require(tn::layer(i, tn::kAttnOut), {o_width, hp_.n_embd});
      L.ffn_norm = decoder::to_f32(b.require(tn::layer(i, tn::kFfnNorm), {hp_.n_embd}));
      L.w_gate_up = b.require(tn::layer(i, tn::kFfnUp), {hp_.n_embd, 2 * hp_.n_ff});
      L.w_down = b.require(tn::layer(i, tn::kFfnDown), {hp_.n_ff, hp_.n_embd});
    }
    return b.finish();
  }

 private:
  // Splits rows of `fused` ([T x (a+b+c)]) into the three destination buffers.
  static void split3(const Workspace& ws, const float* fused, int64_t a, int64_t b, int64_t c,
                     float* da, float* db, float* dc) {
    const int64_t w = a + b + c;
    for (int64_t t = 0; t < ws.n_tokens; ++t) {
      std::memcpy(da + t * a, fused + t * w, static_cast<size_t>(a) * sizeof(float));
      std::memcpy(db + t * b, fused + t * w + a, static_cast<size_t>(b) * sizeof(float));
      std::memcpy(dc + t * c, fused + t * w + a + b, static_cast<size_t>(c) * sizeof(float));
    }
  }

  void forward_layers(Workspace& ws) const override {
    const RopeParams rp = rope_params(hp_, {});
    float* x = ws.x.data();
    float* xn = ws.xn.data();
    const int64_t n_ff = hp_.n_ff;
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      const DecoderLayer& L = layers_[static_cast<size_t>(l)];
      decoder::norm_rows(ws, x, L.attn_norm, xn, hp_.n_embd, hp_.rms_eps);
      decoder::linear(ws, L.wqkv, {}, xn, ws.fused.data());
      split3(ws, ws.fused.data(), q_width_, k_width_, v_width_, ws.q.data(), ws.k.data(),
             ws.v.data());
      decoder::rope(ws, ws.q.data(), hp_.n_head, hp_.head_dim_k, rp);
      decoder::rope(ws, ws.k.data(), hp_.n_head_kv, hp_.head_dim_k, rp);
      decoder::attention(ws, hp_, static_cast<int>(l), ws.q.data(), ws.k.data(), ws.v.data(),
                         ws.attn.data());
      decoder::linear(ws, L.wo, {}, ws.attn.data(), xn);
      decoder::add_rows(ws, x, xn, hp_.n_embd);
      decoder::norm_rows(ws, x, L.ffn_norm, xn, hp_.n_embd, hp_.rms_eps);
      // gate|up: row t of `fused` is [gate (n_ff) | up (n_ff)].
      decoder::linear(ws, L.w_gate_up, {}, xn, ws.fused.data());
      for (int64_t t = 0; t < ws.n_tokens; ++t) {
        float* row = ws.fused.data() + t * 2 * n_ff;
        swiglu(row, row + n_ff, n_ff);
        std::memcpy(ws.ff_a.data() + t * n_ff, row, static_cast<size_t>(n_ff) * sizeof(float));
      }
      decoder::linear(ws, L.w_down, {}, ws.ff_a.data(), xn);
      decoder::add_rows(ws, x, xn, hp_.n_embd);
    }
  }

  std::vector<DecoderLayer> layers_;
  int64_t q_width_ = 0, k_width_ = 0, v_width_ = 0;
};

}  // namespace

Result<std::unique_ptr<Model>> load_phi3(std::shared_ptr<const GgufFile> file) {
  auto m = std::make_unique<Phi3Model>(std::move(file));
  POWER_RETURN_IF_ERROR(m->bind());
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace power
