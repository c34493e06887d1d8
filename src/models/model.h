// Model: a decoder-only language model loaded from a GGUF file, and the batch it computes.
//
// A Model holds its hyperparameters and non-owning views of its weights, which stay in the
// file's read-only mapping (never copied). load_model() picks the architecture from
// `general.architecture` through the explicit registry in registry.cpp, validates every
// tensor it declares (name, shape, type) before any compute, and fails with the tensor's
// name and the expected vs. actual shape otherwise.
//
// forward() runs one pass over a batch of sequence chunks: each chunk appends its tokens to
// its KvSequence at positions seq.n_tokens() ... and asks for the logits of every token or of
// the last one. Logit rows are written to `logits` in chunk order, n_vocab floats each.
// Activation memory is a Workspace planned for a maximum batch size and context before
// decoding; forward() never allocates.
// Thread-safety: a Model is immutable and may be shared by replicas; a Workspace belongs to
// one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "device/kv_cache.h"
#include "format/gguf.h"
#include "kernels/cpu/context.h"
#include "kernels/cpu/matmul_repack.h"
#include "kernels/cpu/ops.h"
#include "tensor/tensor.h"

namespace power {

struct ModelHparams {
  std::string arch;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;  // attention.key_length
  int64_t head_dim_v = 0;  // attention.value_length
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;
  RopeKind rope_kind = RopeKind::kNorm;
  int n_rot = 0;
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / rope.scaling.factor for linear scaling
  float rms_eps = 1e-5f;
  int64_t sliding_window = 0;  // 0: none; else key j visible to query i iff 0 <= i-j < window
};

struct ForwardChunk {
  KvSequence* seq = nullptr;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // else only the last token's logits
};

class Workspace;

class Model {
 public:
  virtual ~Model() = default;
  const ModelHparams& hparams() const { return hp_; }
  const GgufFile& file() const { return *file_; }

  // Activation memory for batches of up to max_batch_tokens and contexts of up to n_ctx.
  Result<std::unique_ptr<Workspace>> make_workspace(int64_t max_batch_tokens, int64_t n_ctx,
                                                    int n_threads) const;
  // KV cache geometry for this model.
  KvCacheConfig kv_config(int64_t n_ctx_tokens, int n_sequences, GgmlType dtype) const;

  // Rows of logits forward() writes for these chunks.
  static int64_t logit_rows(std::span<const ForwardChunk> chunks);
  // Afterwards ws.x holds every batch token's final hidden state (before the output norm),
  // in batch order: MTP drafting (models/mtp.h) reads them.
  Status forward(Workspace& ws, std::span<const ForwardChunk> chunks, float* logits) const;

  // Copies the file's Q4_0 / Q8_0 / Q4_K matrices into the CPU kernels' interleaved layout
  // (kernels/cpu/matmul_repack.h; POWER_REPACK=0 disables it). load_model() calls it once the
  // architecture has bound its weights; token_embd is skipped unless it is also the output.
  void repack_weights();
  const RepackedWeights& repacked() const { return packs_; }

 protected:
  explicit Model(std::shared_ptr<const GgufFile> file) : file_(std::move(file)) {}
  // The architecture's own pass: the batch is embedded into ws.x, positions are set.
  virtual void forward_layers(Workspace& ws) const = 0;
  ModelHparams hp_;
  std::shared_ptr<const GgufFile> file_;
  // Set by every architecture when it binds its weights.
  TensorView token_embd_;
  TensorView output_;  // the output head, or token_embd_ when tied
  std::vector<float> output_norm_;
  RepackedWeights packs_;
};

// Loads the architecture named by general.architecture (llama, qwen2, qwen3, phi3).
Result<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file);
// Architectures the registry knows, for error messages and --help.
std::vector<std::string> supported_architectures();

}  // namespace power
