// qwen2: Qwen2 / Qwen2.5 (general.architecture = "qwen2"). Like llama, with q/k/v biases
// (required) and NEOX RoPE (rotating dims i and i + n_rot/2); the output head is usually tied.
#include <memory>

#include "builtin.h"
#include "decoder/decoder.h"

namespace power::models {

std::unique_ptr<sdk::Model> make_qwen2() {
  DecoderConfig c;
  c.arch = "qwen2";
  c.rope_mode = sdk::RopeMode::kNeox;
  c.tensors.biases = Need::kRequired;
  c.tensors.out_bias = Need::kNo;
  return std::make_unique<StandardDecoder>(std::move(c));
}

}  // namespace power::models
