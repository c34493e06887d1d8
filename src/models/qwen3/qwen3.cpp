// qwen3: Qwen3 dense models (general.architecture = "qwen3"). No attention biases; q and k
// are RMS-normalized per head (over head_dim, weight attn_q_norm / attn_k_norm) after the
// projection and before NEOX RoPE. The q width n_head * key_length may differ from n_embd.
#include <memory>

#include "builtin.h"
#include "decoder/decoder.h"

namespace power::models {

std::unique_ptr<sdk::Model> make_qwen3() {
  DecoderConfig c;
  c.arch = "qwen3";
  c.rope_mode = sdk::RopeMode::kNeox;
  c.tensors.biases = Need::kNo;
  c.tensors.out_bias = Need::kNo;
  c.tensors.qk_norm = Need::kRequired;
  return std::make_unique<StandardDecoder>(std::move(c));
}

}  // namespace power::models
