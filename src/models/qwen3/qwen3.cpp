// qwen3: Qwen3 dense models (general.architecture = "qwen3"). No attention biases; q and k
// are RMS-normalized per head (over head_dim, weight attn_q_norm / attn_k_norm) after the
// projection and before NEOX RoPE. The q width n_head * key_length may differ from n_embd.
#include <memory>
#include <vector>

#include "builtin.h"
#include "decoder/decoder.h"

namespace power::models {
namespace {

class Qwen3 final : public sdk::Model {
 public:
  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(f, "qwen3"));
    hp_.rope_mode = sdk::RopeMode::kNeox;
    head_ = bind_head(w, hp_);
    LayerTensors what;
    what.biases = Need::kNo;
    what.out_bias = Need::kNo;
    what.qk_norm = Need::kRequired;
    for (int64_t i = 0; i < hp_.n_layer; ++i) layers_.push_back(bind_layer(w, hp_, i, what));
    decoder_spec(hp_, spec);
    return Status();
  }

  void plan(sdk::Planner& p) override { buffers_ = plan_decoder(p, hp_); }

  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const DecoderActs a = decoder_acts(f, buffers_);
    op.embed(head_.token_embd, sdk::Index::kTokens, a.x);
    const sdk::Rope rope = rope_of(hp_, sdk::Weight{});
    for (int64_t l = 0; l < hp_.n_layer; ++l) {
      run_decoder_layer(op, hp_, static_cast<int>(l), layers_[static_cast<size_t>(l)], rope, a);
    }
    run_output_head(f, hp_, head_, buffers_, a.x);
    return Status();
  }

 private:
  DecoderHparams hp_;
  DecoderHead head_;
  std::vector<DecoderLayer> layers_;
  DecoderBuffers buffers_;
};

}  // namespace

std::unique_ptr<sdk::Model> make_qwen3() {
  return std::make_unique<Qwen3>();
}

}  // namespace power::models
