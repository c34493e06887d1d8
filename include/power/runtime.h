// Power's embedded runtime: load models, submit generation requests, stream their tokens.
//
//   auto rt = power::Runtime::create({});                   // CPU device, budget from the OS
//   auto model = (*rt)->load("stories260K.gguf", {});        // identity: file SHA-256
//   power::GenerateRequest req;
//   req.prompt = "Once upon a time";
//   req.max_tokens = 32;
//   req.on_stream = [](const power::StreamEvent& e) { fputs(std::string(e.text).c_str(), stdout);
//   return true; }; auto handle = (*rt)->submit(*model, std::move(req));     // kDoesNotFit /
//   kQueueFull here power::Completion done = handle->wait();
//
// Resources: the device budget (RuntimeOptions::memory_budget_bytes, default the smaller of
// /proc/meminfo MemAvailable and the cgroup memory.max) covers each model's mapped weights,
// its activation workspace and its KV cache pool, all planned at load; requests then reserve
// KV blocks for prompt + max_tokens plus a share of the workspace before they run, and the
// sum of reservations never exceeds the budget. Work that cannot fit is rejected with a
// reason; nothing is truncated or silently moved elsewhere.
// Execution: each loaded model has one worker thread running the continuous-batching
// scheduler (one forward pass per step over decode tokens and prompt chunks of all running
// requests; identical prompt prefixes share KV blocks).
// Thread-safety: Runtime, ModelHandle and RequestHandle are safe to use from any thread.
// Destroying the Runtime cancels outstanding requests and joins the workers.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "power/request.h"
#include "power/status.h"

namespace power {

struct RuntimeOptions {
  uint64_t memory_budget_bytes = 0;  // 0: MemAvailable / cgroup memory.max
  // Where the Ed25519 receipt key lives (made on first use); empty: $POWER_HOME/keys, else
  // ~/.power/keys.
  std::string keys_dir;
  // Where per-tensor hash manifests of GGUF artifacts are cached, keyed by the artifact's
  // SHA-256 (receipts' model.tensors_sha256 and weight mirrors come from them, so the tensors
  // are hashed once per artifact, not once per process); empty: $POWER_HOME/tensors, else
  // ~/.power/tensors; "none": not cached (hashed at the first receipt of each load).
  std::string tensor_manifest_dir;
  // The weights cache (docs/RESIDENCY.md), shared by every model this runtime loads: the
  // bytes ("64M", "1GiB"; "" or "0": none), charged to the memory budget, and its policy
  // ("lfru" or "lru"). Models whose plan streams read their token-embedding rows through it.
  std::string weights_cache;
  std::string weights_cache_policy = "lfru";
};

struct LoadOptions {
  int64_t n_ctx = 0;                // positions per request; 0: the model's training context
  int max_running = 8;              // sequences in one batch
  int max_waiting = 64;             // queued requests beyond which submit() says kQueueFull
  int64_t step_token_budget = 512;  // tokens per forward pass (also the workspace size)
  std::string kv_type = "f16";      // f16 or f32
  int threads = 0;                  // compute threads; 0: all cores
  bool prefix_reuse = true;
  // Models with recurrent layers: state checkpoints the prefix cache keeps (slots beside the
  // running sequences', ModelInfo::state_checkpoint_bytes), so that a repeated prompt prefix
  // continues from a saved state instead of being recomputed. 0: such models recompute every
  // prompt. No effect on attention-only models. docs/API.md "Recurrent state".
  int state_checkpoints = 16;
  int aging_ms = 2000;  // a waiting request rises one priority level per interval
  // Session replicas: each has its own KV pool, workspace, sampler states, scheduler and
  // worker over the one read-only copy of the weights; submit() picks the least loaded one
  // unless GenerateRequest::replica names it.
  int replicas = 1;
  // Host scheduling of each replica's threads (worker + compute pool): pinned to these
  // logical cores (empty: not pinned) and run at this niceness (0: unchanged; below 0 needs
  // privileges). kInvalidArgument when the OS refuses.
  std::vector<int> cpu_cores;
  int nice = 0;
  // Speculative decoding default for requests that do not set their own, and the draft
  // model (a GGUF with the same vocabulary, checked here; loaded once, its KV pool sized
  // like the target's) that modes draft and auto use. docs/SPECULATIVE.md.
  SpeculativeOptions speculative;
  std::string draft_model;
  // Encrypted weights (docs/CONFIDENTIAL.md "Encrypted weights"): the key that opens a model
  // (and draft model) written by `power encrypt`: a file of 32 raw bytes or 64 hex digits
  // (model_key_file), or 64 hex digits given directly (model_key_hex, for embedders; this
  // string is the caller's and is not wiped, so prefer the file). Both set: kInvalidArgument;
  // neither: $POWER_MODEL_KEY. Plain GGUF files load as before whatever is set. The key is
  // read for the load and wiped after it; the weights are decrypted into locked, non-dumpable
  // memory that is wiped when the model is freed.
  std::string model_key_file;
  std::string model_key_hex;
  // Lock the weights the kernels read in RAM (mlock; llama.cpp's --mlock): the resident
  // weights (their rows in the mapping, packed and f32 copies) and the staging slots of
  // streamed ones, so that memory pressure cannot page them out. Locking beyond
  // RLIMIT_MEMLOCK warns and keeps what was locked (ModelInfo::weights_locked_bytes), or fails
  // the load with require_mlock.
  bool mlock = false;
  // When weights cannot be locked in RAM (mlock beyond RLIMIT_MEMLOCK): an encrypted model's
  // decrypted weights, or any model's with `mlock`: true fails the load with
  // kResourceExhausted; false warns and continues (the pages may then be swapped out).
  bool require_mlock = false;
  // Weights residency (docs/RESIDENCY.md): the bytes of weights kept in memory, as bytes
  // ("800M", "1.5GiB", "123456") or a percentage of the model's resident size ("50%"); the
  // rest is streamed from the file ahead of each pass. "" or "auto": everything resident when
  // it fits the runtime's memory budget beside the workspace and one context's KV cache, else
  // what is left there. At or above the model's size nothing changes. `prefetch`: groups
  // (blocks) read ahead, 0-4.
  std::string weights_budget;
  int prefetch = 2;
  // Partial mirror of streamed weights on a fast local disk (docs/RESIDENCY.md "Mirrors"):
  // DIR/sha256-<artifact digest>/ is built at the first load of the artifact that streams and
  // read in place of the artifact from then on (a failed or mismatching read falls back to the
  // artifact). mirror_bytes caps its data ("20G", bytes; "" no cap beyond the filesystem's
  // free space less 1 GiB). No effect when nothing streams.
  std::string mirror_dir;
  std::string mirror_bytes;
};

struct ModelInfo {
  std::string path;
  std::string sha256;  // of the artifact file (an encrypted one's plaintext): the model's identity
  std::string arch;
  int64_t n_vocab = 0, n_layer = 0, n_embd = 0, n_ctx = 0;
  uint64_t weights_bytes = 0;  // mapped file less the rows served from packed copies, plus
                               // those copies (charged to the budget); when weights stream:
                               // pinned bytes + staging slots
  // Weights residency (docs/RESIDENCY.md): the plan's digest, the bytes it keeps resident and
  // streams, the staging slots' bytes (0 when nothing streams).
  std::string residency_digest;
  uint64_t weights_total_bytes = 0, weights_pinned_bytes = 0, weights_streamed_bytes = 0;
  uint64_t weights_staging_bytes = 0;
  std::string weights_mirror_dir;     // the mirror's directory ("" when none)
  uint64_t weights_mirror_bytes = 0;  // the artifact bytes it holds
  uint64_t weights_locked_bytes = 0;  // LoadOptions::mlock: bytes locked in RAM
  uint64_t kv_cache_bytes = 0;        // KV block pool
  uint64_t kv_block_bytes = 0;
  int kv_block_tokens = 0;  // positions per KV block (the prefix cache's unit)
  int64_t kv_blocks = 0;
  uint64_t recurrent_state_bytes = 0;   // recurrent layers' state slots (one per running sequence)
                                        // and its speculative snapshots
  uint64_t state_checkpoint_bytes = 0;  // the prefix cache's state checkpoints
  uint64_t scratch_bytes = 0;           // activation workspace
  uint64_t budget_bytes = 0;            // what requests may reserve in all (per replica: its
                                        // workspace + KV pool)
  int threads = 0;
  int replicas = 1;
};

struct RuntimeStats {
  int running = 0, waiting = 0;
  uint64_t reserved_bytes = 0, peak_reserved_bytes = 0, budget_bytes = 0;
  int64_t kv_blocks_used = 0, kv_blocks_total = 0, prefix_cache_blocks = 0;
  int64_t prefix_state_checkpoints = 0;  // recurrent models: states the prefix cache holds
  uint64_t steps = 0;
  uint64_t step_tokens = 0;  // tokens computed by those forward passes (prompt, decode, drafts)
  // Running sequences preempted by higher-priority work (they resume later, recomputing what
  // the prefix cache does not hold).
  uint64_t preemptions = 0;
  // Speculative decoding totals: tokens drafted and accepted, target passes that verified
  // drafts and the tokens those passes committed (tokens per verify pass = ratio).
  uint64_t spec_drafted = 0, spec_accepted = 0, spec_verify_passes = 0, spec_verify_tokens = 0;
  // Models with recurrent layers: rollbacks by snapshot restore and by replay (and the tokens
  // replayed).
  uint64_t spec_restores = 0, spec_replays = 0, spec_replayed_tokens = 0;
  // Streamed weights (docs/RESIDENCY.md): bytes read from the artifact, groups read, reads
  // issued ahead and whether a pass then used them, time passes waited for reads, read errors.
  uint64_t weights_read_bytes = 0, weights_loads = 0, weights_prefetch_useful = 0,
           weights_prefetch_unused = 0, weights_wait_ns = 0, weights_read_errors = 0;
  // ... groups and bytes read from the partial mirror, and mirror reads that failed (error,
  // short read, checksum mismatch) and were served from the artifact.
  uint64_t weights_mirror_loads = 0, weights_mirror_bytes_read = 0, weights_mirror_fallbacks = 0;
  // Rows this model read through the weights cache: hits, misses and the bytes the misses
  // read from the artifact. Then the cache's own figures (shared by the runtime's models):
  // bytes held and its capacity, pieces evicted, and pieces refused by admission.
  uint64_t weights_cache_hits = 0, weights_cache_misses = 0, weights_cache_read_bytes = 0;
  uint64_t weights_cache_bytes = 0, weights_cache_capacity_bytes = 0, weights_cache_evictions = 0,
           weights_cache_rejected = 0;
};

enum class GgmlType : uint32_t;  // format/ggml_types.h
class WeightsCache;              // device/weights_cache.h
namespace receipt {
class SigningKey;
}
class Runtime;
struct ModelSlot;
struct RequestState;

class ModelHandle {
 public:
  const ModelInfo& info() const;
  // Tokenizes text with this model's tokenizer (BOS per add_bos).
  std::vector<int32_t> tokenize(std::string_view text, bool add_bos) const;
  // The text of `ids` (kInvalidArgument for an id outside the vocabulary); special tokens are
  // rendered when render_special is true.
  Result<std::string> detokenize(std::span<const int32_t> ids, bool render_special) const;
  // One token's bytes, as llama.cpp's token_to_piece ("" for an id outside the vocabulary).
  std::string token_piece(int32_t id) const;
  // Fill-in-the-middle: the {prefix, suffix, middle} token ids of the vocabulary
  // (tokenizer.ggml.fim_*_token_id), or empty when it has none.
  std::vector<int32_t> fim_tokens() const;
  // The chat template's source text (the file's, or ChatML when it has none); loaded on first
  // use. An error when the file's template does not parse.
  Result<std::string> chat_template_source() const;
  // The model file's metadata as JSON (key -> value; arrays longer than max_array_items are
  // left out: the tokenizer's vocabulary, merges and scores).
  std::string metadata_json(size_t max_array_items) const;
  RuntimeStats stats() const;

 private:
  friend class Runtime;
  friend Result<std::shared_ptr<ModelSlot>> pick_replica(const ModelHandle&, int);
  std::vector<std::shared_ptr<ModelSlot>> slots_;  // one per replica
};

class RequestHandle {
 public:
  uint64_t id() const;
  // Ends the request at the next step (its KV and reservation are freed); no-op when done.
  void cancel();
  bool done() const;
  // Blocks until the request ends.
  Completion wait();

 private:
  friend class Runtime;
  std::shared_ptr<RequestState> state_;
};

class Runtime {
 public:
  static Result<std::unique_ptr<Runtime>> create(const RuntimeOptions& options);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // Maps a GGUF file (or decrypts an encrypted container with the options' model key; its
  // identity is then the plaintext's SHA-256), hashes it, validates its tensors, plans and
  // allocates its KV pool and workspace. kDoesNotFit when weights + workspace + one full context
  // exceed the budget.
  Result<ModelHandle> load(const std::string& path, const LoadOptions& options);
  // Queues a request. Immediate rejections (kInvalidArgument, kDoesNotFit, kQueueFull) come
  // back here; later ones (deadline, cancellation, errors) in Completion::status.
  Result<RequestHandle> submit(const ModelHandle& model, GenerateRequest request);
  // Ends the model's outstanding requests (Finish::kCancelled), joins its workers and returns
  // its memory to the budget (freed once the last ModelHandle copy goes; submits through a
  // remaining copy get kCancelled). kNotFound when this runtime does not hold the model.
  Status unload(const ModelHandle& model);
  // Raw logits of every position of `tokens` run as one fresh sequence in one pass (scoring,
  // perplexity, checks against reference logits): tokens.size() rows of n_vocab floats, in
  // the model's KV type. Runs on the calling thread with its own workspace and KV blocks,
  // which are charged to the budget for the call (kDoesNotFit when they do not fit);
  // kInvalidArgument for an empty input, an id out of range or more tokens than the context.
  Result<std::vector<float>> logits(const ModelHandle& model, const std::vector<int32_t>& tokens);
  uint64_t budget_bytes() const { return budget_bytes_; }
  // The Ed25519 public key this runtime signs receipts with (64 lowercase hex digits), made
  // on first use like the key itself (docs/RECEIPTS.md).
  Result<std::string> receipt_public_key_hex();

 private:
  Runtime() = default;
  Status start_replica(ModelSlot& slot, const LoadOptions& options, GgmlType kv_type,
                       uint64_t fixed_extra);
  std::mutex load_mu_;
  uint64_t budget_bytes_ = 0;
  uint64_t committed_bytes_ = 0;  // weights + workspaces + KV pools of loaded models
  std::vector<std::shared_ptr<ModelSlot>> models_;
  // The receipt key, loaded (or made) on the first request that needs it.
  Result<std::shared_ptr<const receipt::SigningKey>> signing_key();
  std::mutex key_mu_;
  std::string keys_dir_;
  std::string tensor_manifest_dir_;              // "" when not cached
  std::shared_ptr<WeightsCache> weights_cache_;  // null when none
  std::shared_ptr<const receipt::SigningKey> key_;
};

// Device memory available to Power: min(MemAvailable, cgroup memory.max - memory.current).
uint64_t default_memory_budget_bytes();

}  // namespace power
