// A model package: what it declares at load and the forward pass Power runs.
//
// Lifecycle, driven by Power (one package object per loaded model, immutable after plan()):
//   1. load(file, weights, spec): read hyperparameters from the file, declare every tensor
//      (weights.h) and fill the spec: what kind of model it is, its sizes, its state per
//      layer and the ops forward() uses. Power then validates all tensors, checks that the
//      device supports every declared op and every bound type, and fails naming the tensor
//      or op otherwise, before any compute.
//   2. plan(planner): ask for the activation buffers forward() needs (one row per batch
//      token). Power allocates them per workspace; forward() never allocates.
//   3. forward(f): one pass over a batch of sequence chunks. Decoders: each chunk appends its
//      tokens to its sequence's state at the next positions; write the logits of the tokens
//      that asked for them (Ops::select_output_rows) to f.output(). Encoders: chunks are
//      whole inputs; write pooled rows (Ops::pool) to f.output(). Draft heads (MTP): read the
//      main model's hidden rows from f.hidden_in().
// State: per layer, paged attention KV (the runtime allocates blocks, shares prefixes,
// truncates on rollback) or a fixed-size recurrent state per sequence (the runtime allocates
// a slot per sequence and can snapshot/restore it); admission counts both.
// Thread-safety: forward() is const and may run concurrently on different Forward objects
// (replicas); load() and plan() run once, before any forward().
#pragma once

#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <vector>

#include "power/sdk/file.h"
#include "power/sdk/ops.h"
#include "power/sdk/weights.h"
#include "power/status.h"

namespace power::sdk {

enum class ModelKind : uint8_t {
  kDecoder,    // tokens -> logits over the vocabulary, with state per sequence
  kEncoder,    // whole inputs -> embeddings (pooled or per token), no state
  kDraftHead,  // an MTP head: the main model's hidden states + next tokens -> draft logits
};

enum class StateKind : uint8_t { kNone, kAttention, kRecurrent };

struct LayerState {
  StateKind kind = StateKind::kNone;
  // kAttention: the geometry of one position's keys and values.
  int64_t n_head_kv = 0;
  int64_t head_dim_k = 0;
  int64_t head_dim_v = 0;
  // kRecurrent: conv1d history (conv_kernel - 1 inputs of conv_channels values) plus
  // `values` further f32 values of the layer's own (ssm_scan's state: channels x d_state).
  int64_t conv_channels = 0;
  int64_t conv_kernel = 0;
  int64_t values = 0;

  static LayerState attention(int64_t n_head_kv, int64_t head_dim_k, int64_t head_dim_v) {
    LayerState s;
    s.kind = StateKind::kAttention;
    s.n_head_kv = n_head_kv;
    s.head_dim_k = head_dim_k;
    s.head_dim_v = head_dim_v;
    return s;
  }
  static LayerState recurrent(int64_t conv_channels, int64_t conv_kernel, int64_t values) {
    LayerState s;
    s.kind = StateKind::kRecurrent;
    s.conv_channels = conv_channels;
    s.conv_kernel = conv_kernel;
    s.values = values;
    return s;
  }
};

struct ModelSpec {
  ModelKind kind = ModelKind::kDecoder;
  int64_t n_vocab = 0;               // logits per output row (decoders, draft heads)
  int64_t n_embd = 0;                // hidden width: embedding rows (encoders), hidden states (MTP)
  int64_t n_layer = 0;               // for information (receipts, /v1/models, --verbose)
  int64_t n_ctx_train = 0;           // the training context: the default context size (0: unknown)
  int64_t n_ctx_max = 0;             // positions it cannot go past (learned positions); 0: no limit
  Pooling pooling = Pooling::kNone;  // encoders: the file's pooling
  std::vector<LayerState> state;     // the `layer` index of attention() and conv1d()
  std::vector<Op> ops;               // every op forward() calls
  bool exports_hidden = false;       // forward() calls Forward::set_hidden (MTP drafting)

  void uses(std::initializer_list<Op> list) { ops.insert(ops.end(), list.begin(), list.end()); }
};

class Planner {
 public:
  virtual ~Planner() = default;
  // A buffer of `width` floats per row, one row per token of the largest batch. `name` is
  // for --verbose and errors.
  virtual Buffer rows(int64_t width, const std::string& name) = 0;
};

class Forward {
 public:
  virtual ~Forward() = default;
  virtual Ops& ops() = 0;

  virtual int64_t n_tokens() const = 0;   // rows of every act()
  virtual int64_t n_chunks() const = 0;   // sequences in the batch
  virtual int64_t n_outputs() const = 0;  // rows of output()
  virtual Act act(Buffer b) = 0;          // n_tokens rows of b
  // The pass's result: n_outputs rows of n_vocab logits (decoders, heads) or n_embd values
  // (encoders).
  virtual Act output() = 0;
  // Draft heads: the main model's final hidden states, one n_embd row per token.
  virtual Act hidden_in() = 0;
  // Decoders that export hidden states (ModelSpec::exports_hidden), and draft heads: the
  // rows holding every token's final hidden state when the pass returns.
  virtual void set_hidden(Act hidden) = 0;
  // Encoders: the pooling the caller asked for.
  virtual Pooling pooling() const = 0;

  // The batch on the host: every token's id and position, in batch order.
  virtual std::span<const int32_t> tokens() const = 0;
  virtual std::span<const int32_t> positions() const = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual Status load(const ModelFile& file, Weights& weights, ModelSpec& spec) = 0;
  virtual void plan(Planner& planner) = 0;
  virtual Status forward(Forward& f) const = 0;
};

}  // namespace power::sdk
