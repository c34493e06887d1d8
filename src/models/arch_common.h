// Shared pieces of the decoder architectures' files: the attention + SwiGLU layer weights
// most of them use, and the load steps every one of them takes.
#pragma once

#include <memory>
#include <vector>

#include "models/decoder.h"
#include "models/hparams.h"
#include "models/model.h"
#include "models/tensor_names.h"
#include "models/weights.h"

namespace power {

struct DecoderLayer {
  std::vector<float> attn_norm, ffn_norm;
  std::vector<float> bq, bk, bv, bo;           // optional biases (empty when absent)
  std::vector<float> q_norm, k_norm;           // qwen3 per-head norms
  TensorView wq, wk, wv, wqkv, wo;             // wqkv: fused (phi3)
  TensorView w_gate, w_up, w_down, w_gate_up;  // w_gate_up: fused (phi3)
};

// One pre-norm decoder layer with separate q/k/v projections, as llama, qwen2 and qwen3 run
// it: RMSNorm, q/k/v (+ biases when present), per-head q/k RMSNorm when q_norm/k_norm are
// present (qwen3), RoPE, attention over the KV cache, output projection (+ bias), residual;
// RMSNorm, SwiGLU FFN, residual. Works on ws.x in place.
void run_decoder_layer(Workspace& ws, const ModelHparams& hp, int64_t layer, const DecoderLayer& L,
                       const RopeParams& rp);
// Binds token_embd, output_norm and output (tied to token_embd when the file has none).
void bind_embeddings(WeightBinder& b, const ModelHparams& hp, TensorView* token_embd,
                     TensorView* output, std::vector<float>* output_norm);
// Checks limits the CPU kernels rely on (head size <= 1024).
Status check_kernel_limits(const ModelHparams& hp);
// Vocabulary size from the token embedding's shape.
Result<int64_t> vocab_size(const GgufFile& file);
// RoPE parameters of the model (freq_factors: rope_freqs values or null).
RopeParams rope_params(const ModelHparams& hp, const std::vector<float>& freq_factors);

}  // namespace power
