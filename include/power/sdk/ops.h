// The operations a model composes its forward pass from, on whatever device runs it.
//
// Activations are f32 matrices in device memory, named by Act: `rows` x `cols` values of a
// buffer the model planned (model.h Planner), starting at column `col0`, `ld` floats from one
// row to the next. A forward pass gets each planned buffer as an Act with one row per batch
// token (Forward::act); cols()/first_rows() cut views out of it, so a fused projection's
// output can feed the next op column slice by column slice without a copy.
// Weights are the handles bound at load (weights.h). A model never sees device pointers or
// kernel headers: the same package runs on every device that supports its ops and types.
//
// Errors: an op given inconsistent shapes (an input width that is not the weight's row
// length, a slice past its buffer, an op or type the model did not declare) does nothing and
// records the first such error; the remaining ops of the pass are skipped and the pass
// returns that error, naming the op. Shapes were validated at load, so this is a package
// bug, never a consequence of input.
// Numerics are the device's; the CPU device documents its own (docs/SDK.md): linear() with
// Precision::kDefault takes the device's fastest product, which on the CPU quantizes the
// activations as llama.cpp does wherever a SIMD kernel exists for the weight type (the
// scalar path, POWER_FORCE_ISA=scalar, keeps them f32); kExact always keeps them f32.
// Thread-safety: an Ops belongs to one forward pass.
#pragma once

#include <cstdint>
#include <span>

#include "power/sdk/tensor.h"
#include "power/status.h"

namespace power::sdk {

// An activation buffer planned once per model (Planner::rows): `width` floats per row, one
// row per token of the largest batch.
struct Buffer {
  int32_t id = -1;
  int64_t width = 0;
};

struct Act {
  int32_t buffer = -1;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t col0 = 0;
  int64_t ld = 0;

  // Columns [first, first + n) of every row.
  Act slice(int64_t first, int64_t n) const {
    Act a = *this;
    a.col0 += first;
    a.cols = n;
    return a;
  }
  Act first_rows(int64_t n) const {
    Act a = *this;
    a.rows = n;
    return a;
  }
};

// The op set, for capability queries (Device::supports) and declarations (ModelSpec::ops).
enum class Op : uint8_t {
  kEmbed,
  kLinear,
  kRmsNorm,
  kLayerNorm,
  kRope,
  kAttention,
  kAttentionLocal,
  kActivation,
  kGlu,
  kAdd,
  kMul,
  kScale,
  kAddRow,
  kSoftmax,
  kConv1d,
  kCopy,
  kSelectRows,
  kPool,
  kSsmScan,
  kCount,
};

inline const char* op_name(Op op) {
  static const char* const kNames[] = {
      "embed",     "linear",          "rms_norm",   "layer_norm", "rope",
      "attention", "attention_local", "activation", "glu",        "add",
      "mul",       "scale",           "add_row",    "softmax",    "conv1d",
      "copy",      "select_rows",     "pool",       "ssm_scan"};
  const auto i = static_cast<size_t>(op);
  return i < sizeof(kNames) / sizeof(kNames[0]) ? kNames[i] : "?";
}

// Which index picks the rows of embed(): the batch's token ids, or their positions in their
// sequences (learned absolute position embeddings).
enum class Index : uint8_t { kTokens, kPositions };

enum class Precision : uint8_t {
  kDefault,  // the device's fast path (the CPU's SIMD kernels quantize activations)
  kExact,    // f32 activations into every product (encoders, reference checks)
};

enum class Activation : uint8_t {
  kSilu,      // x * sigmoid(x)
  kGeluTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2, BERT)
  kGeluErf,   // 0.5 x (1 + erf(x / sqrt(2)))
  kRelu,
  // kGeluTanh as llama.cpp's CPU backend computes it (GGML_GELU_FP16): the input rounded to
  // f16, the tanh form in f32, the result rounded to f16; x <= -10 gives 0, x >= 10 gives x.
  // For parity with files whose reference logits come from llama.cpp.
  kGeluTanhF16,
};

enum class RopeMode : uint8_t {
  kNorm,  // rotates adjacent pairs (2i, 2i+1): llama
  kNeox,  // rotates (i, i + n_rot/2): qwen, phi3, gpt-neox
};

struct Rope {
  RopeMode mode = RopeMode::kNorm;
  int n_rot = 0;  // dimensions rotated per head (even, <= head_dim)
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;  // 1 / linear scaling factor
  Weight freq_factors;      // optional [n_rot / 2] divisors (llama3 scaling), kUseVector
};

struct AttentionParams {
  int64_t n_head = 0;
  int64_t n_head_kv = 0;  // n_head / n_head_kv query heads share a KV head (GQA, MQA)
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  float scale = 0.0f;          // 0: 1 / sqrt(head_dim_k)
  int64_t sliding_window = 0;  // 0: none; else key j is visible to query i iff 0 <= i-j < window
  float softcap = 0.0f;        // 0: none; else scores become softcap * tanh(score / softcap)
};

enum class Pooling : uint8_t { kNone, kMean, kCls, kLast };

struct LinearJob {
  const Weight* w = nullptr;
  const Weight* bias = nullptr;  // may be null or empty
  Act out;
};

class Ops {
 public:
  virtual ~Ops() = default;

  // out[t] = table row ids[t] (tokens or positions), as f32.
  virtual void embed(const Weight& table, Index ids, Act out) = 0;
  // out[t] = W in[t] (+ bias): in.cols == W.ne[0], out.cols == W.ne[1].
  virtual void linear(const Weight& w, const Weight* bias, Act in, Act out,
                      Precision precision = Precision::kDefault) = 0;
  // Several linear() of the same input (a layer's q/k/v or gate/up): the device may share
  // work between them; results equal one linear() each.
  virtual void linear_many(std::span<const LinearJob> jobs, Act in) = 0;
  // Normalizes each group of `group` values of a row (0: the whole row; head_dim: per head)
  // and multiplies by w (a [group] vector; may be null). in and out may be the same.
  virtual void rms_norm(Act in, const Weight* w, Act out, float eps, int64_t group = 0) = 0;
  virtual void layer_norm(Act in, const Weight* w, const Weight* b, Act out, float eps,
                          int64_t group = 0) = 0;
  // Rotary embedding in place over every head (x.cols / head_dim heads) at each token's
  // position.
  virtual void rope(Act x, int64_t head_dim, const Rope& rope) = 0;
  // Stores k and v of every token in the sequence's KV state of `layer` (declared as
  // StateKind::kAttention) and writes causal attention of q over the sequence's cached
  // positions to out. q: n_head*head_dim_k columns, k: n_head_kv*head_dim_k, v:
  // n_head_kv*head_dim_v, out: n_head*head_dim_v.
  virtual void attention(int layer, Act q, Act k, Act v, Act out, const AttentionParams& p) = 0;
  // Attention among the tokens of each chunk of the batch only (no state): bidirectional
  // (encoders) or causal.
  virtual void attention_local(Act q, Act k, Act v, Act out, const AttentionParams& p,
                               bool causal) = 0;
  virtual void activate(Act x, Activation a) = 0;
  // gate = act(gate) * up (SwiGLU with kSilu, GeGLU with kGeluTanh).
  virtual void glu(Act gate, Act up, Activation a) = 0;
  virtual void add(Act x, Act y) = 0;  // x += y
  virtual void mul(Act x, Act y) = 0;  // x *= y
  virtual void scale(Act x, float s) = 0;
  // x[t] += row `row` of w (a bias or a token-type embedding broadcast over the tokens).
  virtual void add_row(Act x, const Weight& w, int64_t row) = 0;
  virtual void softmax(Act x) = 0;  // per row
  // Causal depthwise convolution over each sequence's tokens: out[t][c] = bias[c] +
  // sum_k kernel[c][k] * x[t - K + 1 + k][c] (K = kernel.ne[0]), where inputs before the
  // chunk come from the sequence's recurrent state of `layer` (zeros at its start), which is
  // updated to the last K - 1 inputs. kernel: [K, channels].
  virtual void conv1d(int layer, Act x, const Weight& kernel, const Weight* bias, Act out) = 0;
  // The selective state-space scan of Mamba over each sequence's tokens, in order, with the
  // state s [channels x d_state] held in the recurrent state of `layer` (after its conv1d
  // window; zeros at the sequence's start). Per token t and channel c (D = x.cols channels,
  // N = d_state = B.cols):
  //   dt' = softplus(dt[t][c]) (dt[t][c] > 20: dt[t][c] itself)
  //   s[c][n] = s[c][n] * exp(dt' * A[c][n]) + B[t][n] * x[t][c] * dt'
  //   y[t][c] = sum_n s[c][n] * C[t][n]  (+ D[c] * x[t][c] when D is given)
  // A: [N, D] (A[c][n] negative: -exp(A_log)), D: [D]; dt, x, y: D columns; B, C: N columns.
  virtual void ssm_scan(int layer, Act x, Act dt, const Weight& A, Act B, Act C, const Weight* D,
                        Act y) = 0;
  // dst = src (same rows and cols); with slices this is split and concat.
  virtual void copy(Act src, Act dst) = 0;
  // out = the rows of in whose tokens asked for output (logits), in batch order.
  virtual void select_output_rows(Act in, Act out) = 0;
  // One row per chunk (kMean: mean of its rows, kCls: its first, kLast: its last) or every
  // row (kNone) into out.
  virtual void pool(Act in, Pooling p, Act out) = 0;

  // The first error an op recorded in this pass (ok when none).
  virtual Status status() const = 0;
};

}  // namespace power::sdk
