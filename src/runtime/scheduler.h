// The scheduler: a model-free state machine for continuous batching.
//
// Every sequence has `tokens` (prompt, then generated), num_computed (positions whose KV is
// written) and num_target (= tokens.size(): what must be computed before the next token can
// be sampled). A step is plan() -> the runner's one forward pass -> commit():
//  - plan() ends cancelled sequences (freeing their KV and reservation), rejects waiting ones
//    past their deadline, admits waiting sequences in priority order (aging lifts a waiting
//    request one level per `aging` interval, so none starves; the head of the queue blocks
//    the ones behind it) while Admission says they fit, preempting lower-priority work when
//    that makes room, and adopts cached prefix blocks (PrefixCache). It then fills one batch
//    under the per-step token budget: one decode token per running sequence first, then
//    chunks of prompts still being prefilled.
//  - commit() advances num_computed, appends the sampled tokens and ends sequences that
//    reached max_new_tokens.
//  - finish() ends a sequence the caller stopped (end-of-generation token, stop string).
// Speculative decoding: a sequence with a DraftSource gets, in place of its one decode token,
// a verify chunk [last token, drafts...] (BatchItem::n_draft > 0; drafts are capped by the
// step budget, left after every decode sequence has its token, and by max_new_tokens - 1 so
// the reservation always covers them). The runner reports how many drafts it accepted;
// commit() then truncates the KV to the committed positions (the rollback), appends the
// accepted drafts and the runner's token, and emits one kToken event for each. Sequences
// with and without drafts share one step.
// The runner does the math (StepRunner; a model, or a fake in tests) and only sees BatchItems.
// Memory: each running sequence holds a reservation (MemoryPlan) for prompt + max new tokens;
// reservations never exceed the limits, so KV blocks can always be found (idle prefix-cache
// blocks are evicted on demand).
// Thread-safety: none. The runtime calls it under its own mutex; spans in a StepPlan stay
// valid until commit() (add/cancel between plan and commit are fine).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "device/kv_cache.h"
#include "device/recurrent_state.h"
#include "runtime/admission.h"
#include "runtime/prefix_cache.h"

namespace power::runtime {

using Clock = std::chrono::steady_clock;
using SeqId = uint64_t;

struct SchedulerConfig {
  int max_waiting = 64;
  int64_t step_token_budget = 512;  // tokens per forward pass (>= max_running)
  int64_t n_ctx = 2048;             // positions per sequence
  Clock::duration aging = std::chrono::seconds(2);
  bool prefix_reuse = true;
  size_t prefix_cache_max_entries = 1 << 16;
  // Models with recurrent layers: state checkpoints the prefix cache may hold (slots of the
  // recurrent-state pool beyond the running sequences' and their snapshots'). A prefill
  // checkpoints the state at the end of its last full prompt block and where its prompt left
  // the cached chain (the point a prompt sharing that prefix would diverge).
  int state_checkpoints = 0;
};

// Proposes draft tokens for one sequence (speculative decoding); the runtime's implementation
// holds the sequence's drafter and its draft length. Called by plan() and commit().
class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Appends up to max_k (>= 1) tokens likely to follow `tokens` (the committed tokens:
  // prompt, then generated) to `out` and returns how many (0: decode plainly this step).
  virtual int draft(std::span<const int32_t> tokens, int max_k, std::vector<int32_t>& out) = 0;
  // The target pass verified `drafted` tokens and committed the first `accepted`.
  virtual void verified(int drafted, int accepted) = 0;
  // The distributions the last drafts were drawn from (one n_vocab row per draft), or empty
  // for a deterministic drafter (point masses) and for greedy requests.
  virtual std::span<const float> draft_probs() const { return {}; }
  // MTP drafting: the runner hands over the target's final hidden states (width floats per
  // row) of every pass that included the sequence, rows at positions [pos0, pos0 + n_rows).
  virtual bool wants_hidden() const { return false; }
  virtual void observe_hidden(int64_t pos0, const float* rows, int64_t n_rows) {}
  // Models with recurrent layers: after a verify pass that rejected a draft, the runner put
  // the sequence's state back at the last accepted position, from a snapshot (restore) or by
  // running `replayed_tokens` accepted tokens again from the nearest one (replay).
  virtual void rolled_back(bool replayed, int replayed_tokens) {}
};

struct SeqRequest {
  SeqId id = 0;
  std::vector<int32_t> prompt;
  int32_t max_new_tokens = 1;                 // > 0
  int priority = 1;                           // 0 high, 1 normal, 2 low
  std::optional<Clock::time_point> deadline;  // latest time it may still be waiting
  void* runner_state = nullptr;               // handed to the runner (e.g. its sampler)
  DraftSource* drafter = nullptr;             // speculative decoding; null: plain decoding
  // Speculation on a model with recurrent layers: state snapshots per verify round (each a
  // slot of the replica's recurrent-state pool, counted by admission).
  int snapshot_slots = 0;
};

struct BatchItem {
  SeqId id = 0;
  KvSequence* kv = nullptr;
  std::span<const int32_t> tokens;  // appended at kv->n_tokens()
  bool wants_token = false;         // the chunk ends the known tokens: sample the next one
  void* runner_state = nullptr;
  // Speculative verify chunk: the last n_draft tokens are drafts (then wants_token is set and
  // the runner needs the logits of every position).
  int n_draft = 0;
  DraftSource* drafter = nullptr;  // the sequence's drafter (every item of the sequence)
  int snapshots = 0;               // SeqRequest::snapshot_slots
  // Prefill chunks of models with recurrent layers: checkpoints[i] >= 0 asks for the state
  // after token i in that slot (ForwardChunk::snapshot_slots); empty: none.
  std::span<const int32_t> checkpoints;
};

class StepRunner {
 public:
  virtual ~StepRunner() = default;
  // One forward pass over all items; next_tokens[i] = the token sampled for item i when
  // items[i].wants_token. Must append the items' tokens to their KvSequence.
  virtual Status run(std::span<const BatchItem> items, std::span<int32_t> next_tokens) = 0;
  // As run(), for batches that may hold verify chunks: accepted[i] = how many of item i's
  // n_draft drafts the target accepted, next_tokens[i] the token it adds after them. The
  // default serves runners without speculation (kUnimplemented if any item has drafts).
  virtual Status run_speculative(std::span<const BatchItem> items, std::span<int32_t> next_tokens,
                                 std::span<int32_t> accepted);
};

enum class SeqEnd { kLength, kCancelled, kRejected, kFailed };

struct SeqEvent {
  enum class Kind { kAdmitted, kPreempted, kToken, kFinished };
  Kind kind = Kind::kToken;
  SeqId id = 0;
  int32_t token = -1;            // kToken
  int64_t cached_tokens = 0;     // kAdmitted: prompt positions taken from the prefix cache
  bool resumed = false;          // kAdmitted after a preemption
  SeqEnd end = SeqEnd::kLength;  // kFinished
  Status status;                 // kFinished with kRejected / kFailed
};

struct StepPlan {
  std::vector<BatchItem> items;
  std::vector<SeqEvent> events;  // admissions, preemptions and ends decided while planning
  int64_t tokens() const;
};

class Scheduler {
 public:
  // `recurrent`: the replica's recurrent-state pool (models with recurrent layers; at least
  // max_running slots): an admitted sequence takes a slot, a finished or preempted one gives it
  // back (a preempted sequence recomputes from its start, or from the prefix cache's deepest
  // state checkpoint of its tokens).
  Scheduler(const SchedulerConfig& config, KvCache* kv, const MemoryPlanner& planner,
            const AdmissionLimits& limits, RecurrentState* recurrent = nullptr);
  ~Scheduler();

  // Queues a request. kInvalidArgument (empty prompt, max_new_tokens < 1), kDoesNotFit
  // (never fits the context or the memory budget; the numbers in the context) or kQueueFull.
  Status add(SeqRequest request, Clock::time_point now);
  // Marks a sequence cancelled; plan() ends it and frees its memory. Unknown ids are ignored.
  void cancel(SeqId id);
  StepPlan plan(Clock::time_point now);
  // accepted[i]: drafts of item i the runner accepted (empty: none had drafts).
  std::vector<SeqEvent> commit(const StepPlan& plan, std::span<const int32_t> next_tokens,
                               const Status& run_status, std::span<const int32_t> accepted = {});
  // Ends a sequence now (the caller saw a stop condition) and frees its memory.
  void finish(SeqId id);
  // plan() + run + commit() in one call (tests and simple drivers).
  std::vector<SeqEvent> step(Clock::time_point now, StepRunner& runner);

  bool has_work() const { return !waiting_.empty() || !running_.empty(); }
  int n_running() const { return static_cast<int>(running_.size()); }
  int n_waiting() const { return static_cast<int>(waiting_.size()); }
  std::optional<Clock::time_point> next_deadline() const;
  const Admission& admission() const { return admission_; }
  const MemoryPlanner& planner() const { return planner_; }
  PrefixCache& prefix_cache() { return prefix_; }
  KvCache& kv_cache() { return *kv_; }
  // For tests: the KV sequence and computed positions of a running sequence (null if none).
  const KvSequence* kv_of(SeqId id) const;
  int64_t num_computed(SeqId id) const;

 private:
  struct Seq;
  int effective_rank(const Seq& s, Clock::time_point now) const;
  bool admit(Seq& s, std::vector<SeqEvent>& events);
  void release(Seq& s);
  // Takes checkpoint slots for the blocks of s.checkpoint_blocks that end inside the next n
  // positions (s.checkpoint_slots, s.checkpoints_pending).
  void plan_checkpoints(Seq& s, int64_t n);
  void preempt(size_t running_index, Clock::time_point now, std::vector<SeqEvent>& events);
  bool ensure_blocks(KvSequence& kv, int64_t positions);
  Seq* find_running(SeqId id);

  SchedulerConfig cfg_;
  RecurrentState* recurrent_ = nullptr;
  KvCache* kv_;
  MemoryPlanner planner_;
  Admission admission_;
  PrefixCache prefix_;
  std::vector<std::unique_ptr<Seq>> waiting_;
  std::vector<std::unique_ptr<Seq>> running_;  // admission order
  uint64_t next_order_ = 0;
};

}  // namespace power::runtime
