// BertModel: a BERT-family text encoder (general.architecture = "bert") loaded from GGUF.
//
// Forward pass, as llama.cpp's `bert` graph defines it: x = token_embd[id] + token_types[0] +
// position_embd[pos]; LayerNorm (token_embd_norm); per block: q, k, v projections with biases,
// bidirectional multi-head softmax attention over the sequence's own tokens, output projection
// + bias, residual, LayerNorm (attn_output_norm); FFN up + bias, GELU (tanh form), down + bias,
// residual, LayerNorm (layer_output_norm). Pooling (bert.pooling_type) then reduces the final
// hidden states per sequence: mean over all tokens ([CLS] and [SEP] included), the [CLS] row,
// the last row, or none (every token's row).
//
// Numerics (why results are close to exact arithmetic and batch-invariant):
//  * Activations stay f32 into every matrix product: F32/F16/BF16 matrices go through the
//    kernels' float path; quantized matrices are decoded to f32 row by row and dotted with
//    f32 activations (no Q8 activation quantization, unlike the peer). Layer norms, GELU and
//    pooling accumulate in double.
//  * A batch is a list of sequences packed back to back (no padding rows); attention of a
//    token only ever reads its own sequence's rows. Every per-token value is computed with the
//    same operations in the same order whatever else is in the batch, so a sequence's vector
//    is bit-identical alone or batched (tests/models/bert_test.cpp checks it).
//
// Thread-safety: a BertModel is immutable and may be shared; an EncoderWorkspace belongs to
// one caller at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "format/gguf.h"
#include "kernels/cpu/context.h"
#include "tensor/tensor.h"

namespace power {

// bert.pooling_type values (llama.cpp's enum).
enum class PoolingType : int { kNone = 0, kMean = 1, kCls = 2, kLast = 3 };
const char* pooling_name(PoolingType p);
// "none" | "mean" | "cls" | "last" -> value; kInvalidArgument otherwise.
Result<PoolingType> parse_pooling(std::string_view name);

// L2-normalizes v in place as the peer does (common_embd_normalize, p = 2): the sum of squares
// in double, each component times the float value of 1 / sqrt(sum). A zero vector stays zero.
void l2_normalize(float* v, int64_t n);

struct BertHparams {
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t n_ctx_train = 0;  // bert.context_length: positions in position_embd
  int64_t n_token_types = 0;
  float eps = 1e-12f;
  PoolingType pooling = PoolingType::kNone;
};

// Activation memory for batches of up to max_tokens tokens (all sequences together).
class EncoderWorkspace {
 public:
  EncoderWorkspace(const BertHparams& hp, int64_t max_tokens, int n_threads);
  // Bytes a workspace of this size holds (for admission planning before allocating one).
  static uint64_t planned_bytes(const BertHparams& hp, int64_t max_tokens, int n_threads);
  uint64_t bytes() const;
  int64_t max_tokens() const { return max_tokens_; }

 private:
  friend class BertModel;
  CpuContext cpu_;
  int64_t max_tokens_;
  std::vector<float> x_, h_, q_, k_, v_, attn_, ff_;
  std::vector<float> wtile_;  // kWeightTileRows decoded rows of a quantized matrix
};

class BertModel {
 public:
  static Result<std::unique_ptr<BertModel>> load(std::shared_ptr<const GgufFile> file);
  const BertHparams& hparams() const { return hp_; }
  const GgufFile& file() const { return *file_; }

  Result<std::unique_ptr<EncoderWorkspace>> make_workspace(int64_t max_tokens, int n_threads) const;
  // Rows encode() writes: one per sequence, or one per token for kNone.
  static int64_t output_rows(std::span<const std::span<const int32_t>> seqs, PoolingType pooling);
  // Runs the encoder over the sequences (each 1..n_ctx_train tokens, ids < n_vocab, together at
  // most ws.max_tokens()) and writes output_rows() rows of n_embd floats to `out`.
  Status encode(EncoderWorkspace& ws, std::span<const std::span<const int32_t>> seqs,
                PoolingType pooling, float* out) const;

 private:
  struct Layer {
    TensorView wq, wk, wv, wo, w_up, w_down;
    std::vector<float> bq, bk, bv, bo, b_up, b_down;
    std::vector<float> attn_norm_w, attn_norm_b, out_norm_w, out_norm_b;
  };
  BertModel() = default;
  void linear(EncoderWorkspace& ws, const TensorView& w, const std::vector<float>& bias,
              const float* in, float* out, int64_t n_tokens) const;
  void layer_norm_rows(EncoderWorkspace& ws, float* x, const std::vector<float>& w,
                       const std::vector<float>& b, int64_t n_tokens) const;
  void attention(EncoderWorkspace& ws, std::span<const std::span<const int32_t>> seqs) const;

  BertHparams hp_;
  std::shared_ptr<const GgufFile> file_;
  TensorView token_embd_;
  std::vector<float> token_type0_, position_embd_, embd_norm_w_, embd_norm_b_;
  std::vector<Layer> layers_;
};

}  // namespace power
