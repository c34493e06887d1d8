// llama: Llama 1/2/3 and Mistral-style files (general.architecture = "llama").
// Pre-norm decoder: RMSNorm, attention with RoPE (adjacent pairs), GQA, SwiGLU FFN; optional
// q/k/v/o biases; llama3 rope scaling through the rope_freqs tensor; output head tied to the
// token embedding when the file has no output.weight. Mixture-of-experts files are rejected.
#include <memory>

#include "builtin.h"
#include "decoder/decoder.h"

namespace power::models {
namespace {

class Llama final : public StandardDecoder {
 public:
  Llama() : StandardDecoder(config()) {}

 private:
  static DecoderConfig config() {
    DecoderConfig c;
    c.arch = "llama";
    c.rope_mode = sdk::RopeMode::kNorm;
    c.rope_freqs = true;  // LayerTensors{}: every bias optional, no q/k norms
    return c;
  }
  Status check_file(const sdk::ModelFile& f) override {
    if (f.has("llama.expert_count")) {
      auto e = f.get_int("llama.expert_count");
      if (e.ok() && *e > 0) {
        return Status(StatusCode::kUnsupported, "mixture-of-experts llama files are not supported")
            .with("key", "llama.expert_count");
      }
    }
    return Status();
  }
};

}  // namespace

std::unique_ptr<sdk::Model> make_llama() {
  return std::make_unique<Llama>();
}

}  // namespace power::models
