// llama: Llama 1/2/3 and Mistral-style files (general.architecture = "llama").
// Pre-norm decoder: RMSNorm, attention with RoPE (adjacent pairs), GQA, SwiGLU FFN; optional
// q/k/v/o biases; llama3 rope scaling through the rope_freqs tensor; output head tied to the
// token embedding when the file has no output.weight. Mixture-of-experts files are rejected.
#include <memory>
#include <vector>

#include "builtin.h"
#include "decoder/decoder.h"
#include "decoder/tensor_names.h"

namespace power::models {
namespace {

class Llama final : public sdk::Model {
 public:
  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override {
    if (f.has("llama.expert_count")) {
      auto e = f.get_int("llama.expert_count");
      if (e.ok() && *e > 0) {
        return Status(StatusCode::kUnsupported, "mixture-of-experts llama files are not supported")
            .with("key", "llama.expert_count");
      }
    }
    POWER_ASSIGN_OR_RETURN(hp_, read_decoder_hparams(f, "llama"));
    hp_.rope_mode = sdk::RopeMode::kNorm;
    head_ = bind_head(w, hp_);
    rope_freqs_ = w.optional(tensor_names::kRopeFreqs, {hp_.n_rot / 2}, sdk::kUseVector);
    for (int64_t i = 0; i < hp_.n_layer; ++i) {
      layers_.push_back(bind_layer(w, hp_, i, LayerTensors{}));
    }
    decoder_spec(hp_, spec);
    return Status();
  }

  void plan(sdk::Planner& p) override { buffers_ = plan_decoder(p, hp_); }

  Status forward(sdk::Forward& f) const override {
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

 private:
  DecoderHparams hp_;
  DecoderHead head_;
  sdk::Weight rope_freqs_;
  std::vector<DecoderLayer> layers_;
  DecoderBuffers buffers_;
};

}  // namespace

std::unique_ptr<sdk::Model> make_llama() {
  return std::make_unique<Llama>();
}

}  // namespace power::models
