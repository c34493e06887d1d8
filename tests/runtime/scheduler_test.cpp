// The scheduler, admission, preemption and prefix reuse as a state machine, driven by a fake
// runner (no model): it stores each token id as the key of its KV position and "samples" a
// digest of everything its sequence's KV holds, so a sequence whose prefix came from the
// prefix cache produces the same tokens only if the shared blocks hold the right data.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "device/kv_cache.h"
#include "device/recurrent_state.h"
#include "runtime/admission.h"
#include "runtime/preemption.h"
#include "runtime/prefix_cache.h"
#include "runtime/scheduler.h"

namespace power::runtime {
namespace {

constexpr int kBlockTokens = 16;

KvCacheConfig tiny_kv(int n_blocks) {
  KvCacheConfig c;
  c.n_layer = 1;
  c.n_kv_heads = 1;
  c.head_dim_k = 1;
  c.head_dim_v = 1;
  c.block_tokens = kBlockTokens;
  c.n_blocks = n_blocks;
  c.dtype = GgmlType::F32;
  return c;
}

class FakeRunner : public StepRunner {
 public:
  Status run(std::span<const BatchItem> items, std::span<int32_t> next) override {
    int64_t tokens = 0;
    std::set<SeqId> ids;
    for (size_t i = 0; i < items.size(); ++i) {
      const BatchItem& it = items[i];
      EXPECT_TRUE(ids.insert(it.id).second) << "a sequence twice in one batch";
      KvSequence& kv = *it.kv;
      const int base = kv.n_tokens();
      EXPECT_GE(kv.capacity_tokens(), base + static_cast<int>(it.tokens.size()));
      for (size_t j = 0; j < it.tokens.size(); ++j) {
        const int pos = base + static_cast<int>(j);
        const float key = static_cast<float>(it.tokens[j]);
        kv.cache().write_k(0, kv.block_of(pos), kv.slot_of(pos), &key);
        kv.cache().write_v(0, kv.block_of(pos), kv.slot_of(pos), &key);
      }
      kv.set_n_tokens(base + static_cast<int>(it.tokens.size()));
      tokens += static_cast<int64_t>(it.tokens.size());
      if (it.wants_token) next[i] = digest(kv);
    }
    max_batch_tokens = std::max(max_batch_tokens, tokens);
    ++steps;
    return Status();
  }
  static int32_t digest(const KvSequence& kv) {
    uint64_t h = 7;
    for (int p = 0; p < kv.n_tokens(); ++p) {
      float k = 0;
      kv.cache().read_k(0, kv.block_of(p), kv.slot_of(p), 0, &k);
      h = h * 31 + static_cast<uint64_t>(k) + static_cast<uint64_t>(p);
    }
    return static_cast<int32_t>(h % 997) + 3;
  }
  int64_t max_batch_tokens = 0;
  int steps = 0;
};

struct Harness {
  explicit Harness(int n_blocks, int max_running, int64_t step_budget = 64,
                   uint64_t workspace_bytes = 0, bool prefix = true, int max_waiting = 64) {
    kv = std::move(KvCache::create(tiny_kv(n_blocks))).value();
    SchedulerConfig sc;
    sc.max_waiting = max_waiting;
    sc.step_token_budget = step_budget;
    sc.n_ctx = 1024;
    sc.aging = std::chrono::milliseconds(100);
    sc.prefix_reuse = prefix;
    MemoryPlanner planner(kv->block_bytes(), kBlockTokens, workspace_bytes, max_running);
    AdmissionLimits lim;
    lim.kv_pool_blocks = n_blocks;
    lim.budget_bytes = static_cast<uint64_t>(n_blocks) * kv->block_bytes() + workspace_bytes;
    lim.max_running = max_running;
    sched = std::make_unique<Scheduler>(sc, kv.get(), planner, lim);
  }
  ~Harness() { sched.reset(); }

  Status add(SeqId id, int n_prompt, int max_new, int priority = 1,
             std::optional<Clock::time_point> deadline = std::nullopt, int32_t salt = 0) {
    SeqRequest r;
    r.id = id;
    for (int i = 0; i < n_prompt; ++i) r.prompt.push_back(static_cast<int32_t>(i + 1 + salt));
    r.max_new_tokens = max_new;
    r.priority = priority;
    r.deadline = deadline;
    return sched->add(std::move(r), now);
  }
  // One step; records events per sequence.
  void step() {
    for (SeqEvent& e : sched->step(now, runner)) {
      if (e.kind == SeqEvent::Kind::kToken) tokens[e.id].push_back(e.token);
      if (e.kind == SeqEvent::Kind::kAdmitted) {
        admitted_order.push_back(e.id);
        cached[e.id] = e.cached_tokens;
      }
      if (e.kind == SeqEvent::Kind::kPreempted) preempted.push_back(e.id);
      if (e.kind == SeqEvent::Kind::kFinished) ended[e.id] = e;
    }
    EXPECT_LE(sched->admission().reserved_bytes(), sched->admission().limits().budget_bytes);
    EXPECT_LE(sched->admission().reserved_blocks(), sched->admission().limits().kv_pool_blocks);
    now += std::chrono::milliseconds(1);
  }
  void run_until_idle(int max_steps = 10000) {
    for (int i = 0; i < max_steps && sched->has_work(); ++i) step();
    ASSERT_FALSE(sched->has_work());
  }

  std::unique_ptr<KvCache> kv;
  std::unique_ptr<Scheduler> sched;
  FakeRunner runner;
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  std::map<SeqId, std::vector<int32_t>> tokens;
  std::map<SeqId, int64_t> cached;
  std::map<SeqId, SeqEvent> ended;
  std::vector<SeqId> admitted_order, preempted;
};

TEST(MemoryPlanner, BlocksBytesAndScratchShare) {
  MemoryPlanner p(/*block bytes*/ 1000, 16, /*workspace*/ 4000, /*max running*/ 4);
  MemoryPlan m = p.plan(33);
  EXPECT_EQ(m.kv_blocks, 3);
  EXPECT_EQ(m.kv_bytes, 3000u);
  EXPECT_EQ(m.scratch_bytes, 1000u);
  EXPECT_EQ(m.total_bytes(), 4000u);
}

TEST(Admission, ReservationsNeverExceedTheLimits) {
  Admission a({/*budget*/ 10000, /*blocks*/ 8, /*running*/ 2});
  MemoryPlanner p(1000, 16, 0, 2);
  EXPECT_TRUE(a.check_ever(p.plan(16 * 8)).ok());
  Status never = a.check_ever(p.plan(16 * 9));
  EXPECT_EQ(never.code(), StatusCode::kDoesNotFit);
  EXPECT_NE(never.to_string().find("kv_pool_blocks=8"), std::string::npos) << never.to_string();
  EXPECT_TRUE(a.reserve(p.plan(16 * 5)));
  EXPECT_FALSE(a.reserve(p.plan(16 * 4)));  // 9 blocks > 8
  EXPECT_TRUE(a.reserve(p.plan(16 * 3)));
  EXPECT_FALSE(a.reserve(p.plan(1)));  // max running
  EXPECT_EQ(a.reserved_blocks(), 8);
  a.release(p.plan(16 * 5));
  EXPECT_EQ(a.reserved_blocks(), 3);
  EXPECT_EQ(a.running(), 1);
}

TEST(Scheduler, ServesEverySequenceItsTokens) {
  Harness h(64, 4);
  for (SeqId id = 1; id <= 6; ++id) ASSERT_TRUE(h.add(id, 10 + static_cast<int>(id), 5).ok());
  h.run_until_idle();
  for (SeqId id = 1; id <= 6; ++id) {
    EXPECT_EQ(h.tokens[id].size(), 5u) << id;
    EXPECT_EQ(h.ended[id].end, SeqEnd::kLength);
  }
  EXPECT_EQ(h.sched->admission().reserved_bytes(), 0u);
  EXPECT_EQ(h.sched->admission().running(), 0);
  // Only the prefix cache still holds blocks, all idle.
  EXPECT_EQ(h.kv->blocks_used(), h.sched->prefix_cache().idle_blocks());
}

// A sequence gives the same tokens whatever else runs beside it.
TEST(Scheduler, TokensDoNotDependOnTheBatch) {
  Harness alone(64, 1, 64, 0, /*prefix*/ false);
  ASSERT_TRUE(alone.add(1, 40, 8, 1, std::nullopt, 5).ok());
  alone.run_until_idle();
  Harness crowd2(64, 4, 16, 0, false);
  ASSERT_TRUE(crowd2.add(7, 33, 8).ok());
  ASSERT_TRUE(crowd2.add(1, 40, 8, 1, std::nullopt, 5).ok());
  ASSERT_TRUE(crowd2.add(8, 50, 8).ok());
  crowd2.run_until_idle();
  EXPECT_EQ(crowd2.tokens[1], alone.tokens[1]);
}

TEST(Scheduler, StepTokenBudgetAndChunkedPrefill) {
  Harness h(64, 4, /*step budget*/ 24);
  ASSERT_TRUE(h.add(1, 100, 3).ok());
  ASSERT_TRUE(h.add(2, 5, 3).ok());
  h.step();  // 24 tokens of prompt 1 (admitted first), nothing left for 2
  EXPECT_EQ(h.sched->num_computed(1), 24);
  EXPECT_EQ(h.sched->num_computed(2), 0);
  h.run_until_idle();
  EXPECT_LE(h.runner.max_batch_tokens, 24);
  EXPECT_EQ(h.tokens[1].size(), 3u);
  EXPECT_EQ(h.tokens[2].size(), 3u);
}

TEST(Scheduler, DecodeTokensGoFirst) {
  Harness h(64, 4, /*step budget*/ 8);
  ASSERT_TRUE(h.add(1, 4, 20).ok());
  h.step();  // prefill of 1
  ASSERT_TRUE(h.add(2, 60, 2).ok());
  for (int i = 0; i < 5; ++i) h.step();
  // Sequence 1 kept decoding one token per step while 2 was prefilled in chunks of 7.
  EXPECT_EQ(h.tokens[1].size(), 6u);
  EXPECT_EQ(h.sched->num_computed(2), 35);
}

TEST(Scheduler, RejectionReasons) {
  Harness h(8, 2, 64, 0, true, /*max waiting*/ 2);
  Status st = h.add(1, 0, 4);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  st = h.add(1, 10, 0);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  st = h.add(1, 1000, 100);  // beyond the context
  EXPECT_EQ(st.code(), StatusCode::kDoesNotFit);
  EXPECT_NE(st.to_string().find("n_ctx=1024"), std::string::npos) << st.to_string();
  st = h.add(1, 130, 10);  // 9 blocks, the pool has 8
  EXPECT_EQ(st.code(), StatusCode::kDoesNotFit);
  EXPECT_NE(st.to_string().find("needed_bytes="), std::string::npos) << st.to_string();
  EXPECT_NE(st.to_string().find("budget_bytes="), std::string::npos) << st.to_string();
  ASSERT_TRUE(h.add(1, 10, 4).ok());
  ASSERT_TRUE(h.add(2, 10, 4).ok());
  st = h.add(3, 10, 4);
  EXPECT_EQ(st.code(), StatusCode::kQueueFull);
  EXPECT_NE(st.to_string().find("max_waiting=2"), std::string::npos) << st.to_string();
}

TEST(Scheduler, WaitsForMemoryThenRuns) {
  Harness h(8, 4);
  ASSERT_TRUE(h.add(1, 100, 20).ok());  // 8 blocks: the whole pool
  ASSERT_TRUE(h.add(2, 10, 4).ok());
  h.step();
  EXPECT_EQ(h.sched->n_running(), 1);
  EXPECT_EQ(h.sched->n_waiting(), 1);
  h.run_until_idle();
  EXPECT_EQ(h.tokens[2].size(), 4u);
  EXPECT_EQ(h.admitted_order, (std::vector<SeqId>{1, 2}));
}

TEST(Scheduler, DeadlineExceededWhileWaiting) {
  Harness h(8, 4);
  ASSERT_TRUE(h.add(1, 100, 20).ok());
  ASSERT_TRUE(h.add(2, 10, 4, 1, h.now + std::chrono::milliseconds(5)).ok());
  for (int i = 0; i < 10; ++i) h.step();
  ASSERT_TRUE(h.ended.count(2));
  EXPECT_EQ(h.ended[2].end, SeqEnd::kRejected);
  EXPECT_EQ(h.ended[2].status.code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(h.ended[2].status.to_string().find("needed_bytes="), std::string::npos);
  EXPECT_TRUE(h.tokens[2].empty());
  h.run_until_idle();
  EXPECT_EQ(h.tokens[1].size(), 20u);
}

TEST(Scheduler, CancellationFreesMemoryAtTheNextStep) {
  Harness h(16, 4, 64, 0, /*prefix*/ false);
  ASSERT_TRUE(h.add(1, 40, 50).ok());
  ASSERT_TRUE(h.add(2, 40, 50).ok());
  h.step();
  h.step();
  const uint64_t both = h.sched->admission().reserved_bytes();
  const int used = h.kv->blocks_used();
  h.sched->cancel(1);
  EXPECT_EQ(h.sched->admission().reserved_bytes(), both);  // not before the next step
  h.step();
  EXPECT_EQ(h.ended[1].end, SeqEnd::kCancelled);
  EXPECT_EQ(h.sched->admission().reserved_bytes(), both / 2);
  EXPECT_LT(h.kv->blocks_used(), used);
  EXPECT_EQ(h.sched->kv_of(1), nullptr);
  h.sched->cancel(2);
  h.step();
  EXPECT_EQ(h.sched->admission().reserved_bytes(), 0u);
  EXPECT_EQ(h.kv->blocks_used(), 0);
  EXPECT_FALSE(h.sched->has_work());
  // A waiting request can be cancelled too.
  ASSERT_TRUE(h.add(3, 200, 50).ok());
  ASSERT_TRUE(h.add(4, 200, 50).ok());
  h.sched->cancel(4);
  h.step();
  EXPECT_EQ(h.ended[4].end, SeqEnd::kCancelled);
}

TEST(Scheduler, PriorityOrderAtAdmission) {
  Harness h(8, 1);
  ASSERT_TRUE(h.add(1, 10, 2, /*high: nothing preempts it*/ 0).ok());
  h.step();  // 1 runs
  ASSERT_TRUE(h.add(2, 10, 2, /*low*/ 2).ok());
  ASSERT_TRUE(h.add(3, 10, 2, /*normal*/ 1).ok());
  ASSERT_TRUE(h.add(4, 10, 2, /*high*/ 0).ok());
  h.run_until_idle();
  EXPECT_EQ(h.admitted_order, (std::vector<SeqId>{1, 4, 3, 2}));
}

// High-priority requests keep arriving; the low one still runs once it has aged.
TEST(Scheduler, NoStarvation) {
  Harness h(8, 1);
  ASSERT_TRUE(h.add(1000, 10, 2, /*low*/ 2).ok());
  SeqId next = 1;
  for (int i = 0; i < 2000 && !h.ended.count(1000); ++i) {
    if (h.sched->n_waiting() < 3) {
      ASSERT_TRUE(h.add(next++, 10, 2, /*high*/ 0).ok());
    }
    h.step();
  }
  ASSERT_TRUE(h.ended.count(1000)) << "the low-priority request starved";
  EXPECT_EQ(h.tokens[1000].size(), 2u);
}

TEST(Scheduler, HighPriorityPreemptsLowAndTheLowResumes) {
  Harness h(8, 1);
  ASSERT_TRUE(h.add(1, 20, 30, /*low*/ 2).ok());
  for (int i = 0; i < 5; ++i) h.step();
  ASSERT_EQ(h.tokens[1].size(), 5u);
  ASSERT_TRUE(h.add(2, 20, 3, /*high*/ 0).ok());
  h.step();
  EXPECT_EQ(h.preempted, (std::vector<SeqId>{1}));
  h.run_until_idle();
  EXPECT_EQ(h.tokens[2].size(), 3u);
  EXPECT_EQ(h.tokens[1].size(), 30u);
  EXPECT_EQ(h.ended[1].end, SeqEnd::kLength);
  // Its tokens are those of an uninterrupted run.
  Harness solo(8, 1);
  ASSERT_TRUE(solo.add(1, 20, 30, 2).ok());
  solo.run_until_idle();
  EXPECT_EQ(h.tokens[1], solo.tokens[1]);
}

TEST(Preemption, PicksLowestPriorityNewestAndRespectsAging) {
  std::vector<PreemptCandidate> running = {{1, 1, 1}, {2, 2, 2}, {2, 2, 3}, {2, 0, 4}};
  EXPECT_EQ(Preemption::pick_victim(running, 0), 2);
  EXPECT_EQ(Preemption::pick_victim(running, 2), -1);
  std::vector<PreemptCandidate> aged = {{2, 0, 1}};
  EXPECT_EQ(Preemption::pick_victim(aged, 0), -1);
}

TEST(Scheduler, PrefixBlocksAreSharedWithRefCounts) {
  Harness h(32, 4);
  ASSERT_TRUE(h.add(1, 40, 4).ok());  // blocks 0,1 full, block 2 partial
  h.step();                           // prefill done: full prompt blocks go to the cache
  ASSERT_TRUE(h.add(2, 40, 4).ok());
  h.step();
  EXPECT_EQ(h.cached[2], 32);
  const KvSequence* a = h.sched->kv_of(1);
  const KvSequence* b = h.sched->kv_of(2);
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->blocks()[0], b->blocks()[0]);
  EXPECT_EQ(a->blocks()[1], b->blocks()[1]);
  EXPECT_NE(a->blocks()[2], b->blocks()[2]);
  EXPECT_EQ(h.kv->block_refs(a->blocks()[0]), 3);  // two sequences + the cache
  const int shared0 = a->blocks()[0];
  h.run_until_idle();
  EXPECT_EQ(h.tokens[1], h.tokens[2]);      // the shared KV holds the right data
  EXPECT_EQ(h.kv->block_refs(shared0), 1);  // only the cache
  EXPECT_EQ(h.sched->prefix_cache().idle_blocks(), h.kv->blocks_used());
  // A different prompt with the same first block shares exactly one block.
  SeqRequest r;
  r.id = 3;
  for (int i = 0; i < 40; ++i) r.prompt.push_back(i < 16 ? i + 1 : 500 + i);
  r.max_new_tokens = 2;
  ASSERT_TRUE(h.sched->add(r, h.now).ok());
  h.step();
  EXPECT_EQ(h.cached[3], 16);
  h.run_until_idle();
}

// Idle cached blocks give way to new work: the pool can be filled by the cache and still
// admit a request that needs all of it.
TEST(Scheduler, IdleCachedBlocksAreEvictedUnderPressure) {
  Harness h(8, 2);
  for (SeqId id = 1; id <= 4; ++id) {
    ASSERT_TRUE(h.add(id, 33, 2, 1, std::nullopt, static_cast<int32_t>(id) * 100).ok());
  }
  h.run_until_idle();
  EXPECT_GT(h.sched->prefix_cache().idle_blocks(), 0);
  ASSERT_TRUE(h.add(9, 120, 8, 1, std::nullopt, 7).ok());  // 8 blocks
  h.run_until_idle();
  EXPECT_EQ(h.tokens[9].size(), 8u);
}

TEST(Scheduler, FinishFreesAtOnce) {
  Harness h(16, 2);
  ASSERT_TRUE(h.add(1, 10, 100).ok());
  h.step();
  EXPECT_GT(h.sched->admission().reserved_bytes(), 0u);
  h.sched->finish(1);
  EXPECT_EQ(h.sched->admission().reserved_bytes(), 0u);
  EXPECT_FALSE(h.sched->has_work());
}

// Overload on the state machine: 10x more than fits, random sizes; every request is served or
// rejected with a reason, and reservations never exceed the budget (checked every step).
TEST(Scheduler, OverloadEachServedOrRejected) {
  Harness h(32, 4, 64, /*workspace*/ 4096, true, /*max waiting*/ 8);
  uint32_t rng = 12345;
  auto rnd = [&](int n) {
    rng = rng * 1664525u + 1013904223u;
    return static_cast<int>((rng >> 8) % static_cast<uint32_t>(n));
  };
  std::map<SeqId, StatusCode> rejected_at_submit;
  for (SeqId id = 1; id <= 200; ++id) {
    Status st =
        h.add(id, 1 + rnd(300), 1 + rnd(200), rnd(3),
              rnd(2) ? std::optional(h.now + std::chrono::milliseconds(rnd(50))) : std::nullopt);
    if (!st.ok()) rejected_at_submit[id] = st.code();
    h.step();
  }
  h.run_until_idle();
  for (SeqId id = 1; id <= 200; ++id) {
    if (rejected_at_submit.count(id)) {
      EXPECT_TRUE(rejected_at_submit[id] == StatusCode::kDoesNotFit ||
                  rejected_at_submit[id] == StatusCode::kQueueFull);
      continue;
    }
    ASSERT_TRUE(h.ended.count(id)) << id;
    const SeqEvent& e = h.ended[id];
    EXPECT_TRUE(e.end == SeqEnd::kLength ||
                (e.end == SeqEnd::kRejected && e.status.code() == StatusCode::kDeadlineExceeded))
        << id;
  }
  EXPECT_GT(rejected_at_submit.size(), 0u);
  EXPECT_LE(h.sched->admission().peak_reserved_bytes(), h.sched->admission().limits().budget_bytes);
}

TEST(KvCache, TruncateIntoASharedBlockCopiesIt) {
  auto kv = std::move(KvCache::create(tiny_kv(8))).value();
  KvSequence a(kv.get());
  ASSERT_TRUE(a.reserve(32).ok());
  for (int p = 0; p < 32; ++p) {
    const float x = static_cast<float>(p);
    kv->write_k(0, a.block_of(p), a.slot_of(p), &x);
  }
  a.set_n_tokens(32);
  KvSequence b(kv.get());
  b.share_prefix(a.blocks());
  EXPECT_EQ(b.n_tokens(), 32);
  EXPECT_EQ(kv->block_refs(a.blocks()[1]), 2);
  const int shared = a.blocks()[1];
  ASSERT_TRUE(b.truncate(20).ok());  // position 20 is inside the shared second block
  EXPECT_EQ(b.n_tokens(), 20);
  EXPECT_NE(b.blocks()[1], shared);
  EXPECT_EQ(kv->block_refs(shared), 1);
  EXPECT_EQ(b.blocks()[0], a.blocks()[0]);
  float x = -1;
  kv->read_k(0, b.block_of(19), b.slot_of(19), 0, &x);
  EXPECT_EQ(x, 19.0f);  // the copy holds the data
  const float y = 99;
  kv->write_k(0, b.block_of(20), b.slot_of(20), &y);
  kv->read_k(0, a.block_of(20), a.slot_of(20), 0, &x);
  EXPECT_EQ(x, 20.0f);               // a's block is untouched
  ASSERT_TRUE(b.truncate(16).ok());  // block boundary: no copy needed
  EXPECT_EQ(b.blocks().size(), 1u);
}

// Recurrent state through the prefix cache, with a fake recurrent model: each sequence's state
// is one float, a running hash of every token it has consumed (exact in f32), kept in its
// RecurrentState slot; a chunk's checkpoint slots receive the state after their token, and the
// "sampled" token is a function of the state alone. A sequence continued from a wrong
// checkpoint (or with none) samples differently from its cold run, which is the reference.
class RecurrentFakeRunner : public StepRunner {
 public:
  explicit RecurrentFakeRunner(RecurrentState* state) : state_(state) {}
  Status run(std::span<const BatchItem> items, std::span<int32_t> next) override {
    if (++passes == fail_pass) return Status(StatusCode::kInternal, "injected failure");
    for (size_t i = 0; i < items.size(); ++i) {
      const BatchItem& it = items[i];
      KvSequence& kv = *it.kv;
      float* s = state_->layer(kv.recurrent_slot(), 0);
      for (size_t j = 0; j < it.tokens.size(); ++j) {
        s[0] = static_cast<float>(
            (static_cast<uint64_t>(s[0]) * 31 + static_cast<uint64_t>(it.tokens[j]) + 1) %
            16777213);
        if (j < it.checkpoints.size() && it.checkpoints[j] >= 0) {
          *state_->layer(it.checkpoints[j], 0) = s[0];
          ++checkpoints_written;
        }
      }
      kv.set_n_tokens(kv.n_tokens() + static_cast<int>(it.tokens.size()));
      if (it.wants_token) next[i] = static_cast<int32_t>(static_cast<uint64_t>(s[0]) % 997) + 3;
    }
    return Status();
  }
  int checkpoints_written = 0;
  int passes = 0;
  int fail_pass = -1;  // this pass fails (a device error), writing nothing

 private:
  RecurrentState* state_;
};

struct RecurrentHarness {
  RecurrentHarness(int max_running, int checkpoints, bool prefix) {
    KvCacheConfig c = tiny_kv(256);
    c.n_layer = 0;  // recurrent layers only: blocks count positions
    kv = std::move(KvCache::create(c)).value();
    RecurrentStateConfig rc;
    rc.layer_floats = {1};
    rc.n_slots = max_running + checkpoints;
    state = std::move(RecurrentState::create(rc)).value();
    SchedulerConfig sc;
    sc.step_token_budget = 24;  // prompts are cut into several passes
    sc.n_ctx = 1024;
    sc.prefix_reuse = prefix;
    sc.state_checkpoints = checkpoints;
    MemoryPlanner planner(0, kBlockTokens, 0, max_running, state->slot_bytes());
    AdmissionLimits lim;
    lim.kv_pool_blocks = 256;
    lim.budget_bytes = static_cast<uint64_t>(max_running) * state->slot_bytes();
    lim.max_running = max_running;
    sched = std::make_unique<Scheduler>(sc, kv.get(), planner, lim, state.get());
    runner = std::make_unique<RecurrentFakeRunner>(state.get());
  }
  ~RecurrentHarness() { sched.reset(); }
  void add(SeqId id, std::vector<int32_t> prompt, int max_new, int priority = 1) {
    SeqRequest r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new;
    r.priority = priority;
    ASSERT_TRUE(sched->add(std::move(r), now).ok());
  }
  void step() {
    for (SeqEvent& e : sched->step(now, *runner)) {
      if (e.kind == SeqEvent::Kind::kToken) tokens[e.id].push_back(e.token);
      if (e.kind == SeqEvent::Kind::kAdmitted) cached[e.id].push_back(e.cached_tokens);
      if (e.kind == SeqEvent::Kind::kPreempted) preempted.push_back(e.id);
    }
    now += std::chrono::milliseconds(1);
  }
  void run_until_idle() {
    for (int i = 0; i < 10000 && sched->has_work(); ++i) step();
    ASSERT_FALSE(sched->has_work());
  }
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<RecurrentState> state;
  std::unique_ptr<Scheduler> sched;
  std::unique_ptr<RecurrentFakeRunner> runner;
  Clock::time_point now = Clock::time_point() + std::chrono::hours(1);
  std::map<SeqId, std::vector<int32_t>> tokens;
  std::map<SeqId, std::vector<int64_t>> cached;
  std::vector<SeqId> preempted;
};

std::vector<int32_t> join(std::vector<int32_t> head, int32_t from, int n) {
  for (int i = 0; i < n; ++i) head.push_back(from + i);
  return head;
}

TEST(SchedulerRecurrent, PrefixHitsContinueFromCheckpointsAndMatchColdRuns) {
  const std::vector<int32_t> p = join({}, 1, 40);                 // 40 tokens
  const std::vector<int32_t> q = join(join({}, 1, 20), 100, 20);  // shares 20 with p
  const std::vector<int32_t> r = join(join({}, 1, 20), 200, 20);  // shares 20 with p and q
  const std::vector<std::vector<int32_t>> prompts = {p, p, q, r, r, join(p, 300, 9)};
  auto run_all = [&](RecurrentHarness& h) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      h.add(i + 1, prompts[i], 6);
      h.run_until_idle();
    }
  };
  RecurrentHarness cold(1, 0, /*prefix=*/false);
  run_all(cold);
  RecurrentHarness warm(1, 4, /*prefix=*/true);
  run_all(warm);
  for (SeqId id = 1; id <= prompts.size(); ++id) {
    ASSERT_EQ(warm.tokens[id].size(), 6u) << id;
    EXPECT_EQ(warm.tokens[id], cold.tokens[id]) << id;
    EXPECT_EQ(cold.cached[id], std::vector<int64_t>{0}) << id;  // no prefix reuse
  }
  // p cold; p again from the checkpoint after its last full block that leaves a token to
  // compute (32); q shares only block 0 with p, which has no checkpoint yet: cold, and it
  // checkpoints where it left the chain (16); r continues from there, then from its own 32;
  // p + 9 tokens from p's 32 (p's generated tokens differ from 300..308).
  EXPECT_EQ(warm.cached[1], std::vector<int64_t>{0});
  EXPECT_EQ(warm.cached[2], std::vector<int64_t>{32});
  EXPECT_EQ(warm.cached[3], std::vector<int64_t>{0});
  EXPECT_EQ(warm.cached[4], std::vector<int64_t>{16});
  EXPECT_EQ(warm.cached[5], std::vector<int64_t>{32});
  EXPECT_EQ(warm.cached[6], std::vector<int64_t>{32});
  EXPECT_GT(warm.runner->checkpoints_written, 0);
  EXPECT_LE(warm.sched->prefix_cache().checkpoints(), 4);
  // Every slot is back: the running sequences' and the pending checkpoints'.
  EXPECT_EQ(warm.state->slots_free(),
            warm.state->config().n_slots - warm.sched->prefix_cache().checkpoints());
}

TEST(SchedulerRecurrent, FewCheckpointsEvictTheLeastRecentAndStayCorrect) {
  // 12 prompts from 4 families through 2 checkpoints and 3 running sequences at once.
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    const int family = (i * 7) % 4;
    prompts.push_back(join(join({}, 1 + 50 * family, 18 + 5 * family), 500 + i, 3 + 4 * (i % 5)));
  }
  auto run_all = [&](RecurrentHarness& h) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      h.add(i + 1, prompts[i], 5);
      if (i % 3 == 2) h.run_until_idle();
    }
    h.run_until_idle();
  };
  RecurrentHarness cold(3, 0, false);
  run_all(cold);
  RecurrentHarness warm(3, 2, true);
  run_all(warm);
  int64_t hits = 0;
  for (SeqId id = 1; id <= prompts.size(); ++id) {
    EXPECT_EQ(warm.tokens[id], cold.tokens[id]) << id;
    hits += warm.cached[id][0] > 0 ? 1 : 0;
  }
  EXPECT_GT(hits, 0);
  EXPECT_EQ(warm.sched->prefix_cache().checkpoints(), 2);
  EXPECT_EQ(warm.state->slots_free(), warm.state->config().n_slots - 2);
}

TEST(SchedulerRecurrent, CancellingOrAFailedPassFreesTheStateSlots) {
  RecurrentHarness h(2, 4, true);
  h.add(1, join({}, 1, 40), 50);
  h.add(2, join({}, 100, 40), 50);
  h.step();  // both admitted; 24 prompt tokens in the pass: sequence 1's first chunk
  EXPECT_EQ(h.state->slots_free(), h.state->config().n_slots - 2);
  h.step();
  h.step();
  h.sched->cancel(1);
  h.sched->cancel(2);
  h.step();  // the next plan ends both
  EXPECT_FALSE(h.sched->has_work());
  // Only the checkpoints their prefills wrote stay taken (in the prefix cache).
  EXPECT_GT(h.sched->prefix_cache().checkpoints(), 0);
  EXPECT_EQ(h.state->slots_free(),
            h.state->config().n_slots - h.sched->prefix_cache().checkpoints());

  // The second pass, which would write the checkpoint at 32, fails: the sequence ends with the
  // error, and its slot and the checkpoint slot it had taken go back.
  RecurrentHarness f(1, 4, true);
  f.runner->fail_pass = 2;
  f.add(1, join({}, 1, 40), 5);
  f.step();
  f.step();
  EXPECT_FALSE(f.sched->has_work());
  EXPECT_EQ(f.sched->prefix_cache().checkpoints(), 0);
  EXPECT_EQ(f.state->slots_free(), f.state->config().n_slots);
}

TEST(SchedulerRecurrent, APreemptedSequenceResumesFromItsCheckpoint) {
  const std::vector<int32_t> low = join({}, 1, 37), high = join({}, 900, 21);
  RecurrentHarness cold(1, 0, false);
  cold.add(1, low, 20, /*priority=*/2);
  cold.run_until_idle();
  cold.add(2, high, 4, 0);
  cold.run_until_idle();
  RecurrentHarness warm(1, 4, true);
  warm.add(1, low, 20, 2);
  for (int i = 0; i < 8; ++i) warm.step();  // prefilled (two passes), decoding
  ASSERT_FALSE(warm.tokens[1].empty());
  warm.add(2, high, 4, 0);
  warm.run_until_idle();
  EXPECT_EQ(warm.preempted, std::vector<SeqId>{1});
  EXPECT_EQ(warm.tokens[1], cold.tokens[1]);
  EXPECT_EQ(warm.tokens[2], cold.tokens[2]);
  // Readmitted with its prompt's checkpoint (32 of 37 + generated), not from the start.
  ASSERT_EQ(warm.cached[1].size(), 2u);
  EXPECT_EQ(warm.cached[1][1], 32);
}

}  // namespace
}  // namespace power::runtime
