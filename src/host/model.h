// Model: a loaded model package (power/sdk/model.h) over its file, on a device.
//
// load_model() picks the package registered for the file's general.architecture (host/
// registry.h), lets it read its hyperparameters and declare its tensors, state and ops,
// then validates all of it before any compute: every tensor (present, shape, type the model
// accepts and the device can use), every op (the device supports it), the state (one KV
// geometry for all attention layers). Errors name the tensor or op with expected vs. actual.
// Weights stay in the file's read-only mapping; the CPU kernels' packed copies of Q4_0 / Q8_0
// / Q4_K matrices are made here (kernels/cpu/matmul_repack.h; POWER_REPACK=0 disables it).
//
// Passes: forward() (decoders: each chunk appends its tokens to its KvSequence at positions
// seq.n_tokens() ...; logit rows are written in chunk order, n_vocab floats each),
// forward_head() (MTP draft heads) and encode() (encoders). They run in a Workspace planned
// for a maximum batch size and context before decoding; none allocates.
// Thread-safety: a Model is immutable after load and may be shared by replicas; a Workspace
// belongs to one caller at a time.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "device/cpu_ops.h"
#include "device/device.h"
#include "device/kv_cache.h"
#include "device/recurrent_state.h"
#include "device/residency.h"
#include "device/weights_cache.h"
#include "device/weights_mirror.h"
#include "device/workspace.h"
#include "format/gguf.h"
#include "host/model_file.h"
#include "kernels/cpu/matmul_repack.h"
#include "power/sdk/model.h"
#include "power/sdk/registry.h"

namespace power {

struct ArchitectureEntry;
class Model;

// What callers outside the package need to know (sizes for planning, receipts, /v1/models).
struct ModelHparams {
  std::string arch;
  int64_t n_vocab = 0;
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_ctx_train = 0;
};

struct LoadModelOptions {
  const Device* device = nullptr;  // null: the CPU
  sdk::ModelKind kind = sdk::ModelKind::kDecoder;
  std::string sha256;  // the artifact's, when the caller has it (receipts, TensorIdentity)
  // Weights residency (device/residency.h, docs/RESIDENCY.md): unset or at least the model's
  // resident size keeps every weight resident; below it the plan streams the rest from the
  // file, reading `prefetch` groups (0-4) ahead.
  WeightsBudget weights_budget;
  // When weights_budget is unset: the budget in bytes for this model (its hyperparameters,
  // workspace and KV geometry are known by then) whose weights' resident size is `total`;
  // UINT64_MAX keeps everything resident. Unset too: everything resident.
  std::function<uint64_t(const Model& m, uint64_t total)> weights_budget_fn;
  int prefetch = 2;
  // Partial mirror (device/weights_mirror.h) in this directory, used when weights stream: built
  // at the first such load of the artifact, holding at most mirror_bytes of it.
  std::string mirror_dir;
  uint64_t mirror_bytes = UINT64_MAX;
  // Where a mirror build finds or caches the artifact's per-tensor hash manifest
  // (format/tensor_manifest.h); empty: hashed, not cached.
  std::string tensor_manifest_dir;
  // Lock in RAM (mlock) what the kernels read from memory: the resident weights' rows in the
  // mapping, their packed copies, vector copies and the streaming staging. Best effort: the
  // first failure (RLIMIT_MEMLOCK) stops it and is kept in lock_status(); the load goes on.
  bool mlock = false;
  // Under a budget that streams: token-embedding tables (row lookups only) are read row by row
  // from the artifact through this cache (device/weights_cache.h) instead of the mapping.
  // Null: their rows are read from the mapping.
  std::shared_ptr<WeightsCache> weights_cache;
};

class Model {
 public:
  ~Model();
  const ModelHparams& hparams() const { return hp_; }
  const sdk::ModelSpec& spec() const { return spec_; }
  const GgufFile& file() const { return *file_; }
  const ArchitectureEntry& architecture() const { return *entry_; }
  const Device& device() const { return *device_; }

  // Activation memory for batches of up to max_batch_tokens and contexts of up to n_ctx.
  Result<std::unique_ptr<Workspace>> make_workspace(int64_t max_batch_tokens, int64_t n_ctx,
                                                    int n_threads) const;
  uint64_t workspace_bytes(int64_t max_batch_tokens, int64_t n_ctx, int n_threads) const;
  // KV cache geometry of the model's attention layers (n_layer 0 when it has none).
  KvCacheConfig kv_config(int64_t n_ctx_tokens, int n_sequences, GgmlType dtype) const;
  // Recurrent state of n_sequences sequences (no layers when the model has none).
  RecurrentStateConfig recurrent_config(int n_sequences) const;
  bool has_recurrent_state() const { return !layout_recurrent_floats_.empty(); }
  // A sequence run outside the runtime's scheduler (scoring, benchmarks): gives `seq` a fresh
  // slot of `state`, first creating `state` with one slot when it is null. Nothing for models
  // without recurrent layers. `state` must outlive `seq` (the sequence releases the slot).
  Status attach_state(KvSequence& seq, std::unique_ptr<RecurrentState>& state) const;

  // Rows of logits forward() writes for these chunks.
  static int64_t logit_rows(std::span<const ForwardChunk> chunks);
  // Decoders. Afterwards ws.hidden_row(t) is every batch token's final hidden state when the
  // package exports them (MTP drafting reads them).
  Status forward(Workspace& ws, std::span<const ForwardChunk> chunks, float* logits) const;

  // Draft heads (MTP): appends n = tokens.size() positions to `seq`; row r pairs hidden[r]
  // (n_embd floats, the main model's final hidden state at position seq.n_tokens() + r) with
  // tokens[r] (the token that followed it). Writes the last row's logits to out_logits
  // (n_vocab) and its output hidden state to out_hidden (n_embd).
  Status forward_head(Workspace& ws, KvSequence& seq, const float* hidden,
                      std::span<const int32_t> tokens, float* out_hidden, float* out_logits) const;

  // Encoders: rows encode() writes (one per input, or one per token without pooling).
  static int64_t output_rows(std::span<const std::span<const int32_t>> inputs,
                             sdk::Pooling pooling);
  // Runs the encoder over whole inputs (each 1..n_ctx tokens, together at most
  // ws.max_tokens) and writes output_rows() rows of n_embd floats to `out`.
  Status encode(Workspace& ws, std::span<const std::span<const int32_t>> inputs,
                sdk::Pooling pooling, float* out) const;

  const RepackedWeights& repacked() const { return packs_; }
  // Where the weights live (every model has a plan; streamer() is null unless it streams).
  const ResidencyPlan& residency() const { return *residency_; }
  const WeightStreamer* streamer() const { return streamer_.get(); }
  // The partial mirror the streamer reads (null when none was asked for or nothing streams).
  const WeightsMirror* mirror() const { return mirror_.get(); }
  // Tables read through LoadModelOptions::weights_cache: their counters summed.
  CachedRows::Counters cached_rows_counters() const;
  // That cache (null when no table reads through one).
  const WeightsCache* weights_cache() const { return weights_cache_.get(); }
  // Bytes the weights hold in memory: when nothing streams, the file less the rows served from
  // packed copies, plus those copies; else the plan's pinned bytes plus the staging slots.
  uint64_t resident_weight_bytes() const;
  // Drops from the process the mapping's pages the kernels do not read (streamed tensors,
  // matrices' rows served from packed copies), e.g. after a pass over every tensor's bytes
  // (the receipts' tensor digests); from the page cache too when weights stream.
  void drop_unread_pages() const;
  // LoadModelOptions::mlock: the bytes locked, and why locking stopped short (ok when all
  // were locked or none were asked for).
  uint64_t locked_weight_bytes() const { return locked_bytes_; }
  uint64_t lockable_weight_bytes() const { return lockable_bytes_; }
  const Status& lock_status() const { return lock_status_; }
  // The identities of the tensors the package bound (what receipts bind), sorted by name.
  std::vector<sdk::TensorIdentity> bound_tensors() const;

 private:
  friend Result<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file,
                                                   const LoadModelOptions& options);
  friend Result<std::unique_ptr<Model>> load_draft_head(const Model& main);
  friend Status place_weights(Model& m, const LoadModelOptions& o);
  Model() = default;
  Status run(Workspace& ws, sdk::Pooling pooling) const;
  void lock_weights();
  Status fill_batch(Workspace& ws, std::span<const ForwardChunk> chunks, bool encoder) const;

  std::shared_ptr<const GgufFile> file_;
  std::unique_ptr<GgufModelFile> model_file_;
  std::shared_ptr<const ArchitectureEntry> entry_;
  std::unique_ptr<sdk::Model> package_;
  const Device* device_ = nullptr;
  sdk::ModelSpec spec_;
  ModelHparams hp_;
  std::deque<BoundWeight> weights_;
  WorkspacePlan plan_;
  StateLayout layout_;
  KvCacheConfig kv_geometry_;
  std::vector<int64_t> layout_recurrent_floats_;
  std::vector<bool> declared_;
  RepackedWeights packs_;
  std::unique_ptr<ResidencyPlan> residency_;
  std::unique_ptr<WeightsMirror> mirror_;
  std::unique_ptr<WeightStreamer> streamer_;  // after residency_ and mirror_: it reads them
  std::vector<std::unique_ptr<CachedRows>> cached_rows_;
  std::shared_ptr<WeightsCache> weights_cache_;
  std::vector<std::pair<uint64_t, uint64_t>> unread_;  // (offset, bytes) in the file
  // What dropping unread_'s pages does with the page cache: empties it of them when weights
  // stream (the streamer is made before the matrices are packed), keeps them otherwise.
  MappedFile::PageCache unread_page_cache() const {
    return streamer_ != nullptr ? MappedFile::PageCache::kDrop : MappedFile::PageCache::kKeep;
  }
  uint64_t locked_bytes_ = 0, lockable_bytes_ = 0;
  Status lock_status_;
};

// Loads the architecture named by general.architecture (an error naming the known ones
// otherwise) as a model of options.kind.
Result<std::unique_ptr<Model>> load_model(std::shared_ptr<const GgufFile> file,
                                          const LoadModelOptions& options = {});
// `<arch>.nextn_predict_layers` of the file (0 when absent).
int64_t mtp_layer_count(const GgufFile& file);
// The MTP draft head of `main`'s file (kInvalidArgument naming the key when the file declares
// no MTP layers; kUnsupported when its architecture has no draft-head package). `main` must
// outlive it.
Result<std::unique_ptr<Model>> load_draft_head(const Model& main);

}  // namespace power
