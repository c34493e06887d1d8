// The pieces the decoder packages (llama, qwen2, qwen3, phi3) and the MTP head share, written
// on the public SDK only: hyperparameters from `<arch>.*` keys, the pre-norm attention + SwiGLU
// layer, its tensors, the activation buffers it computes in, the embedding and output head.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "power/sdk.h"

namespace power::models {

struct DecoderHparams {
  std::string arch;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;  // main layers (block_count minus the MTP layers)
  int64_t n_nextn = 0;  // MTP layers after them
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;  // attention.key_length
  int64_t head_dim_v = 0;  // attention.value_length
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  sdk::RopeMode rope_mode = sdk::RopeMode::kNorm;
  int n_rot = 0;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;
  int64_t sliding_window = 0;  // 0: none; else key j visible to query i iff 0 <= i-j < window
};

// Every field but rope_mode (the architecture decides) and n_vocab (the token embedding's
// rows), with llama.cpp's defaults for absent optional keys; values range-checked, errors name
// the key. Rope scaling types other than none, linear and llama3 are kUnsupported.
Result<DecoderHparams> read_decoder_hparams(const sdk::ModelFile& file, const std::string& arch);

struct DecoderLayer {
  sdk::Weight attn_norm, ffn_norm;
  sdk::Weight bq, bk, bv, bo;  // optional biases
  sdk::Weight q_norm, k_norm;  // qwen3 per-head norms
  sdk::Weight wq, wk, wv, wo;  // separate projections
  sdk::Weight wqkv;            // fused q|k|v (phi3)
  sdk::Weight w_gate, w_up, w_down;
  sdk::Weight w_gate_up;  // fused gate|up (phi3)
};

enum class Need : uint8_t { kNo, kOptional, kRequired };
struct LayerTensors {
  Need biases = Need::kOptional;  // attn_q/k/v.bias
  Need out_bias = Need::kOptional;
  Need qk_norm = Need::kNo;
};
// Declares block `block`'s tensors with separate q/k/v and gate/up projections.
DecoderLayer bind_layer(sdk::Weights& w, const DecoderHparams& hp, int64_t block,
                        const LayerTensors& what);

// The activation buffers of a decoder layer and the output head.
struct DecoderBuffers {
  sdk::Buffer x, xn, q, k, v, attn, ff_a, ff_b, out;
};
DecoderBuffers plan_decoder(sdk::Planner& p, const DecoderHparams& hp);

struct DecoderActs {
  sdk::Act x, xn, q, k, v, attn, ff_a, ff_b;
};
DecoderActs decoder_acts(sdk::Forward& f, const DecoderBuffers& b);

sdk::Rope rope_of(const DecoderHparams& hp, const sdk::Weight& freq_factors);
sdk::AttentionParams attention_of(const DecoderHparams& hp);
// The ops a decoder package declares.
void declare_decoder_ops(sdk::ModelSpec& spec);
// Fills kind, sizes, one attention state per layer, ops and exports_hidden.
void decoder_spec(const DecoderHparams& hp, sdk::ModelSpec& spec);

// One pre-norm decoder layer with separate q/k/v projections, as llama, qwen2 and qwen3 run
// it: RMSNorm, q/k/v (+ biases when present), per-head q/k RMSNorm when q_norm/k_norm are
// present (qwen3), RoPE, attention over the layer's KV state, output projection (+ bias),
// residual; RMSNorm, SwiGLU FFN, residual. Works on a.x in place.
void run_decoder_layer(sdk::Ops& op, const DecoderHparams& hp, int layer, const DecoderLayer& L,
                       const sdk::Rope& rope, const DecoderActs& a);

// Token embedding, output norm and output head (tied to the token embedding when the file has
// no output.weight); reads n_vocab off the embedding.
struct DecoderHead {
  sdk::Weight token_embd, output_norm, output;
};
DecoderHead bind_head(sdk::Weights& w, DecoderHparams& hp);
// The logits of the rows that asked for them: select, RMSNorm, output projection.
void run_output_head(sdk::Forward& f, const DecoderHparams& hp, const DecoderHead& head,
                     const DecoderBuffers& b, sdk::Act x);

// A decoder of the llama family: separate q/k/v projections, SwiGLU FFN, pre-norm layers, as
// llama, qwen2 and qwen3 are. What differs between them is in DecoderConfig.
struct DecoderConfig {
  std::string arch;  // the key prefix
  sdk::RopeMode rope_mode = sdk::RopeMode::kNorm;
  LayerTensors tensors;
  bool rope_freqs = false;  // an optional rope_freqs tensor (llama3 scaling)
};

class StandardDecoder : public sdk::Model {
 public:
  explicit StandardDecoder(DecoderConfig config) : config_(std::move(config)) {}
  Status load(const sdk::ModelFile& f, sdk::Weights& w, sdk::ModelSpec& spec) override;
  void plan(sdk::Planner& p) override { buffers_ = plan_decoder(p, hp_); }
  Status forward(sdk::Forward& f) const override;

 protected:
  // A check of the file before anything is read (an architecture's own refusals).
  virtual Status check_file(const sdk::ModelFile& f) { return Status(); }

 private:
  DecoderConfig config_;
  DecoderHparams hp_;
  DecoderHead head_;
  sdk::Weight rope_freqs_;
  std::vector<DecoderLayer> layers_;
  DecoderBuffers buffers_;
};

}  // namespace power::models
