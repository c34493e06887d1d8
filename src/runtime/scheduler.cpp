#include "runtime/scheduler.h"

#include <algorithm>

#include "runtime/preemption.h"

namespace power::runtime {

namespace {
constexpr int64_t kMaxDraftTokens = 16;  // spec::kMaxDraft (the scheduler links no engine)
}  // namespace

struct Scheduler::Seq {
  SeqRequest req;
  std::vector<int32_t> tokens;  // prompt, then generated
  int64_t n_prompt = 0;
  int64_t num_computed = 0;
  Clock::time_point arrival;
  uint64_t arrival_order = 0;
  uint64_t admit_order = 0;
  MemoryPlan plan;
  std::unique_ptr<KvSequence> kv;
  bool cancelled = false;
  bool admitted_before = false;
  bool prefix_cached = false;   // the prompt's blocks were offered to the prefix cache
  std::vector<int32_t> verify;  // speculative verify chunk: last token, then the drafts
  // Recurrent models: prompt block counts whose end state goes to the prefix cache, the slots
  // of this step's chunk (BatchItem::checkpoints) and the checkpoints it is writing.
  std::vector<int64_t> checkpoint_blocks;
  std::vector<int32_t> checkpoint_slots;
  std::vector<PrefixCache::Checkpoint> checkpoints_pending;
  int64_t num_target() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_generated() const { return num_target() - n_prompt; }
};

int64_t StepPlan::tokens() const {
  int64_t n = 0;
  for (const BatchItem& it : items) n += static_cast<int64_t>(it.tokens.size());
  return n;
}

Scheduler::Scheduler(const SchedulerConfig& config, KvCache* kv, const MemoryPlanner& planner,
                     const AdmissionLimits& limits, RecurrentState* recurrent)
    : cfg_(config),
      recurrent_(recurrent),
      kv_(kv),
      planner_(planner),
      admission_(limits),
      prefix_(kv, config.prefix_cache_max_entries, recurrent,
              recurrent != nullptr && config.prefix_reuse ? config.state_checkpoints : 0) {
  POWER_CHECK(cfg_.step_token_budget >= limits.max_running);
}

Scheduler::~Scheduler() {
  running_.clear();  // KV sequences go before the prefix cache and the KV cache
  waiting_.clear();
}

Status Scheduler::add(SeqRequest request, Clock::time_point now) {
  if (request.prompt.empty()) {
    return Status(StatusCode::kInvalidArgument, "the prompt has no tokens");
  }
  if (request.max_new_tokens < 1) {
    return Status(StatusCode::kInvalidArgument, "max_new_tokens must be at least 1")
        .with("max_new_tokens", request.max_new_tokens);
  }
  const int64_t positions = static_cast<int64_t>(request.prompt.size()) + request.max_new_tokens;
  if (positions > cfg_.n_ctx) {
    return Status(StatusCode::kDoesNotFit, "prompt + max new tokens exceed the context")
        .with("prompt_tokens", request.prompt.size())
        .with("max_new_tokens", request.max_new_tokens)
        .with("n_ctx", cfg_.n_ctx);
  }
  MemoryPlan plan =
      planner_.plan(positions, request.drafter != nullptr ? request.snapshot_slots : 0);
  POWER_RETURN_IF_ERROR(admission_.check_ever(plan));
  if (static_cast<int>(waiting_.size()) >= cfg_.max_waiting) {
    return Status(StatusCode::kQueueFull, "the waiting queue is full")
        .with("waiting", waiting_.size())
        .with("max_waiting", cfg_.max_waiting)
        .with("running", running_.size());
  }
  auto s = std::make_unique<Seq>();
  s->tokens = request.prompt;
  s->n_prompt = static_cast<int64_t>(request.prompt.size());
  s->req = std::move(request);
  s->req.prompt.clear();
  s->arrival = now;
  s->arrival_order = next_order_++;
  s->plan = plan;
  waiting_.push_back(std::move(s));
  return Status();
}

void Scheduler::cancel(SeqId id) {
  for (auto& s : waiting_) {
    if (s->req.id == id) s->cancelled = true;
  }
  for (auto& s : running_) {
    if (s->req.id == id) s->cancelled = true;
  }
}

int Scheduler::effective_rank(const Seq& s, Clock::time_point now) const {
  int64_t lift = 0;
  if (cfg_.aging.count() > 0 && now > s.arrival) lift = (now - s.arrival) / cfg_.aging;
  return static_cast<int>(std::max<int64_t>(0, s.req.priority - lift));
}

Scheduler::Seq* Scheduler::find_running(SeqId id) {
  for (auto& s : running_) {
    if (s->req.id == id) return s.get();
  }
  return nullptr;
}

const KvSequence* Scheduler::kv_of(SeqId id) const {
  for (const auto& s : running_) {
    if (s->req.id == id) return s->kv.get();
  }
  return nullptr;
}

int64_t Scheduler::num_computed(SeqId id) const {
  for (const auto& s : running_) {
    if (s->req.id == id) return s->num_computed;
  }
  return -1;
}

std::optional<Clock::time_point> Scheduler::next_deadline() const {
  std::optional<Clock::time_point> d;
  for (const auto& s : waiting_) {
    if (s->req.deadline && (!d || *s->req.deadline < *d)) d = s->req.deadline;
  }
  return d;
}

bool Scheduler::ensure_blocks(KvSequence& kv, int64_t positions) {
  for (;;) {
    if (kv.reserve(static_cast<int>(positions)).ok()) return true;
    if (!prefix_.evict_one()) return false;
  }
}

bool Scheduler::admit(Seq& s, std::vector<SeqEvent>& events) {
  if (!admission_.reserve(s.plan)) return false;
  s.kv = std::make_unique<KvSequence>(kv_);
  if (recurrent_ != nullptr) {
    Result<int> slot = recurrent_->allocate();
    if (!slot.ok()) {  // more running sequences than slots: wait like for memory
      s.kv.reset();
      admission_.release(s.plan);
      return false;
    }
    s.kv->attach_recurrent(recurrent_, *slot);
  }
  int64_t cached = 0;
  s.checkpoint_blocks.clear();
  if (cfg_.prefix_reuse) {
    // Leave at least one token to compute: its logits give the next token.
    const int bt = kv_->config().block_tokens;
    const int64_t limit = (s.num_target() - 1) / bt;
    PrefixCache::Match m = prefix_.match(s.tokens, limit);
    s.kv->share_prefix(m.blocks);
    const auto used = static_cast<int64_t>(m.blocks.size());
    cached = used * bt;
    if (recurrent_ != nullptr) {
      if (m.checkpoint >= 0) recurrent_->copy(m.checkpoint, s.kv->recurrent_slot());
      if (m.chain_blocks > used) s.checkpoint_blocks.push_back(m.chain_blocks);
      if (limit > used && limit != m.chain_blocks) s.checkpoint_blocks.push_back(limit);
    }
  }
  s.num_computed = cached;
  s.admit_order = next_order_++;
  SeqEvent e;
  e.kind = SeqEvent::Kind::kAdmitted;
  e.id = s.req.id;
  e.cached_tokens = cached;
  e.resumed = s.admitted_before;
  s.admitted_before = true;
  events.push_back(std::move(e));
  return true;
}

void Scheduler::release(Seq& s) {
  for (const PrefixCache::Checkpoint& c : s.checkpoints_pending) prefix_.drop_checkpoint(c.slot);
  s.checkpoints_pending.clear();
  if (!s.kv) return;
  if (cfg_.prefix_reuse) prefix_.insert(s.tokens, s.kv->n_tokens(), s.kv->blocks());
  s.kv.reset();
  s.num_computed = 0;
  admission_.release(s.plan);
}

void Scheduler::plan_checkpoints(Seq& s, int64_t n) {
  s.checkpoint_slots.clear();
  if (s.checkpoint_blocks.empty()) return;
  const int64_t bt = kv_->config().block_tokens;
  for (int64_t b : s.checkpoint_blocks) {
    const int64_t end = b * bt;  // the state after token end - 1
    if (end <= s.num_computed || end > s.num_computed + n) continue;
    const int slot = prefix_.take_checkpoint();
    if (slot < 0) continue;  // none to spare: a later prompt recomputes these blocks
    s.checkpoint_slots.resize(static_cast<size_t>(n), -1);
    s.checkpoint_slots[static_cast<size_t>(end - 1 - s.num_computed)] = slot;
    s.checkpoints_pending.push_back({b - 1, slot});
  }
}

void Scheduler::preempt(size_t running_index, Clock::time_point now,
                        std::vector<SeqEvent>& events) {
  std::unique_ptr<Seq> s = std::move(running_[running_index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  release(*s);
  SeqEvent e;
  e.kind = SeqEvent::Kind::kPreempted;
  e.id = s->req.id;
  events.push_back(std::move(e));
  waiting_.push_back(std::move(s));
}

StepPlan Scheduler::plan(Clock::time_point now) {
  StepPlan plan;
  auto end_event = [&](const Seq& s, SeqEnd end, Status st) {
    SeqEvent e;
    e.kind = SeqEvent::Kind::kFinished;
    e.id = s.req.id;
    e.end = end;
    e.status = std::move(st);
    plan.events.push_back(std::move(e));
  };
  // 1. Cancellations free their sequence and KV.
  for (size_t i = 0; i < running_.size();) {
    if (running_[i]->cancelled) {
      release(*running_[i]);
      end_event(*running_[i], SeqEnd::kCancelled, Status(StatusCode::kCancelled, "cancelled"));
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  // 2. Cancelled or expired waiting requests leave the queue.
  for (size_t i = 0; i < waiting_.size();) {
    Seq& s = *waiting_[i];
    if (s.cancelled) {
      end_event(s, SeqEnd::kCancelled, Status(StatusCode::kCancelled, "cancelled"));
    } else if (s.req.deadline && now >= *s.req.deadline) {
      end_event(
          s, SeqEnd::kRejected,
          Status(StatusCode::kDeadlineExceeded, "the request did not fit before its deadline")
              .with("needed_bytes", s.plan.total_bytes())
              .with("reserved_bytes", admission_.reserved_bytes())
              .with("budget_bytes", admission_.limits().budget_bytes)
              .with("running", admission_.running())
              .with("max_running", admission_.limits().max_running)
              .with(
                  "waited_ms",
                  std::chrono::duration_cast<std::chrono::milliseconds>(now - s.arrival).count()));
    } else {
      ++i;
      continue;
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
  }
  // 3. Admission in priority order (aging included); the head blocks the rest.
  std::stable_sort(waiting_.begin(), waiting_.end(), [&](const auto& a, const auto& b) {
    const int ra = effective_rank(*a, now), rb = effective_rank(*b, now);
    return ra != rb ? ra < rb : a->arrival_order < b->arrival_order;
  });
  while (!waiting_.empty()) {
    Seq& head = *waiting_.front();
    if (!admission_.fits_now(head.plan)) {
      std::vector<PreemptCandidate> cands;
      for (const auto& r : running_) {
        cands.push_back({r->req.priority, effective_rank(*r, now), r->admit_order});
      }
      const int victim = Preemption::pick_victim(cands, head.req.priority);
      if (victim < 0) break;
      preempt(static_cast<size_t>(victim), now, plan.events);
      continue;
    }
    // admit() fails only when the recurrent-state pool has no slot left (admission counts
    // them, so not while its accounting holds): the head waits like for memory.
    if (!admit(*waiting_.front(), plan.events)) break;
    running_.push_back(std::move(waiting_.front()));
    waiting_.erase(waiting_.begin());
  }
  // 4. One batch: decode tokens first, then prompt chunks, under the token budget.
  int64_t budget = cfg_.step_token_budget;
  auto add_item = [&](Seq& s, int64_t n, int n_draft = 0) {
    if (!ensure_blocks(*s.kv, s.num_computed + n)) {
      // Cannot happen while reservations hold; fail the sequence rather than the process.
      s.cancelled = true;
      return;
    }
    BatchItem it;
    it.id = s.req.id;
    it.kv = s.kv.get();
    it.drafter = s.req.drafter;
    it.snapshots = s.req.snapshot_slots;
    if (n_draft > 0) {
      it.tokens = s.verify;
      it.n_draft = n_draft;
    } else {
      it.tokens = std::span<const int32_t>(s.tokens).subspan(static_cast<size_t>(s.num_computed),
                                                             static_cast<size_t>(n));
      plan_checkpoints(s, n);
      if (!s.checkpoints_pending.empty()) it.checkpoints = s.checkpoint_slots;
    }
    it.wants_token = s.num_computed + n == s.num_target() + n_draft;
    it.runner_state = s.req.runner_state;
    plan.items.push_back(it);
    budget -= n;
  };
  // Drafts use what the budget leaves once every decoding sequence has its token.
  int64_t spare = budget;
  for (auto& s : running_) {
    if (s->num_target() - s->num_computed == 1) --spare;
  }
  for (auto& s : running_) {
    if (budget <= 0 || s->num_target() - s->num_computed != 1) continue;
    int n_draft = 0;
    const int64_t room = s->req.max_new_tokens - s->n_generated() - 1;
    if (s->req.drafter != nullptr && spare > 0 && room > 0 && !s->cancelled) {
      const int cap = static_cast<int>(std::min<int64_t>({room, spare, kMaxDraftTokens}));
      s->verify.assign(1, s->tokens.back());
      n_draft = std::clamp(s->req.drafter->draft(s->tokens, cap, s->verify), 0, cap);
      s->verify.resize(1 + static_cast<size_t>(n_draft));
      spare -= n_draft;
    }
    add_item(*s, 1 + n_draft, n_draft);
  }
  for (auto& s : running_) {
    const int64_t left = s->num_target() - s->num_computed;
    if (budget > 0 && left > 1) add_item(*s, std::min(left, budget));
  }
  return plan;
}

std::vector<SeqEvent> Scheduler::commit(const StepPlan& plan, std::span<const int32_t> next_tokens,
                                        const Status& run_status,
                                        std::span<const int32_t> accepted) {
  std::vector<SeqEvent> events;
  for (size_t i = 0; i < plan.items.size(); ++i) {
    const BatchItem& it = plan.items[i];
    Seq* s = find_running(it.id);
    if (s == nullptr) continue;
    SeqEvent e;
    e.id = it.id;
    if (!run_status.ok()) {
      release(*s);
      e.kind = SeqEvent::Kind::kFinished;
      e.end = SeqEnd::kFailed;
      e.status = run_status;
      events.push_back(std::move(e));
      running_.erase(std::find_if(running_.begin(), running_.end(),
                                  [&](const auto& p) { return p.get() == s; }));
      continue;
    }
    int n_accepted = 0;
    if (it.n_draft > 0) {
      n_accepted = i < accepted.size() ? accepted[i] : 0;
      POWER_CHECK(n_accepted >= 0 && n_accepted <= it.n_draft);
      // Rollback: keep the last committed token and the accepted drafts' keys/values.
      const int64_t keep = s->num_computed + 1 + n_accepted;
      Status st = s->kv->truncate(static_cast<int>(keep));
      if (!st.ok()) {
        release(*s);
        e.kind = SeqEvent::Kind::kFinished;
        e.end = SeqEnd::kFailed;
        e.status = std::move(st);
        events.push_back(std::move(e));
        running_.erase(std::find_if(running_.begin(), running_.end(),
                                    [&](const auto& p) { return p.get() == s; }));
        continue;
      }
      s->num_computed = keep;
      if (it.drafter != nullptr) it.drafter->verified(it.n_draft, n_accepted);
    } else {
      s->num_computed += static_cast<int64_t>(it.tokens.size());
      if (!s->checkpoints_pending.empty()) {  // the pass wrote them: the prefix cache takes them
        prefix_.insert(s->tokens, s->num_computed, s->kv->blocks(), s->checkpoints_pending);
        s->checkpoints_pending.clear();
      }
    }
    POWER_CHECK(s->kv->n_tokens() == s->num_computed);
    if (!it.wants_token || s->cancelled) continue;
    if (cfg_.prefix_reuse && !s->prefix_cached) {
      prefix_.insert(s->tokens, s->num_computed - n_accepted, s->kv->blocks());
      s->prefix_cached = true;
    }
    // The accepted drafts, then the runner's token.
    for (int j = 0; j <= n_accepted; ++j) {
      const int32_t t = j < n_accepted ? it.tokens[1 + static_cast<size_t>(j)] : next_tokens[i];
      s->tokens.push_back(t);
      e.kind = SeqEvent::Kind::kToken;
      e.token = t;
      events.push_back(e);
    }
    if (s->n_generated() >= s->req.max_new_tokens) {
      release(*s);
      e.kind = SeqEvent::Kind::kFinished;
      e.end = SeqEnd::kLength;
      e.token = -1;
      events.push_back(std::move(e));
      running_.erase(std::find_if(running_.begin(), running_.end(),
                                  [&](const auto& p) { return p.get() == s; }));
    }
  }
  return events;
}

void Scheduler::finish(SeqId id) {
  for (size_t i = 0; i < running_.size(); ++i) {
    if (running_[i]->req.id == id) {
      release(*running_[i]);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
  for (size_t i = 0; i < waiting_.size(); ++i) {
    if (waiting_[i]->req.id == id) {
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

std::vector<SeqEvent> Scheduler::step(Clock::time_point now, StepRunner& runner) {
  StepPlan p = plan(now);
  std::vector<int32_t> next(p.items.size(), -1);
  std::vector<int32_t> accepted(p.items.size(), 0);
  Status st;
  if (!p.items.empty()) st = runner.run_speculative(p.items, next, accepted);
  std::vector<SeqEvent> events = std::move(p.events);
  for (SeqEvent& e : commit(p, next, st, accepted)) events.push_back(std::move(e));
  return events;
}

Status StepRunner::run_speculative(std::span<const BatchItem> items, std::span<int32_t> next_tokens,
                                   std::span<int32_t> accepted) {
  for (const BatchItem& it : items) {
    if (it.n_draft > 0) {
      return Status(StatusCode::kUnsupported, "this runner cannot verify draft tokens");
    }
  }
  std::fill(accepted.begin(), accepted.end(), 0);
  return run(items, next_tokens);
}

}  // namespace power::runtime
