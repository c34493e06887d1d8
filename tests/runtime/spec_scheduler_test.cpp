// Speculative steps in the scheduler without a model: a fake target whose next token is a
// hash of everything its sequence's KV holds (so a rollback that left a rejected draft's
// keys behind changes every later token), and a fake drafter that knows the target's rule
// and proposes a right prefix followed by wrong tokens. Checked: output equals plain decoding
// with sequences that do and do not speculate in the same steps, the KV holds exactly the
// committed positions after every step, rejected drafts' blocks go back to the pool, drafts
// stay within max_new_tokens and the step budget.
#include <gtest/gtest.h>

#include <map>

#include "device/kv_cache.h"
#include "runtime/admission.h"
#include "runtime/scheduler.h"

namespace power::runtime {
namespace {

constexpr int kBt = 16;

int32_t rule(std::span<const int32_t> tokens) {
  uint64_t h = 11;
  for (size_t p = 0; p < tokens.size(); ++p) h = h * 131 + static_cast<uint64_t>(tokens[p]) + p;
  return static_cast<int32_t>(h % 997) + 3;
}

class SpecFakeRunner : public StepRunner {
 public:
  Status run(std::span<const BatchItem> items, std::span<int32_t> next) override {
    std::vector<int32_t> acc(items.size());
    return run_speculative(items, next, acc);
  }
  Status run_speculative(std::span<const BatchItem> items, std::span<int32_t> next,
                         std::span<int32_t> accepted) override {
    int64_t tokens = 0;
    for (size_t i = 0; i < items.size(); ++i) {
      const BatchItem& it = items[i];
      KvSequence& kv = *it.kv;
      const int base = kv.n_tokens();
      for (size_t j = 0; j < it.tokens.size(); ++j) {
        const int pos = base + static_cast<int>(j);
        const float key = static_cast<float>(it.tokens[j]);
        kv.cache().write_k(0, kv.block_of(pos), kv.slot_of(pos), &key);
        kv.cache().write_v(0, kv.block_of(pos), kv.slot_of(pos), &key);
      }
      kv.set_n_tokens(base + static_cast<int>(it.tokens.size()));
      tokens += static_cast<int64_t>(it.tokens.size());
      accepted[i] = 0;
      if (!it.wants_token) continue;
      // The target's token after position p: the rule over the KV's keys [0, p].
      auto target_after = [&](int p) {
        std::vector<int32_t> held;
        for (int q = 0; q <= p; ++q) {
          float k = 0;
          kv.cache().read_k(0, kv.block_of(q), kv.slot_of(q), 0, &k);
          held.push_back(static_cast<int32_t>(k));
        }
        return rule(held);
      };
      const int first = kv.n_tokens() - 1 - it.n_draft;  // the last committed token
      int a = 0;
      while (a < it.n_draft && it.tokens[1 + a] == target_after(first + a)) ++a;
      accepted[i] = a;
      next[i] = target_after(first + a);
      drafted += it.n_draft;
    }
    max_batch_tokens = std::max(max_batch_tokens, tokens);
    return Status();
  }
  int64_t max_batch_tokens = 0;
  int64_t drafted = 0;
};

// Proposes the target's continuation but spoils token number `good` of each draft (cycling
// 0, 1, 2, ...), so every round has a different accepted prefix (all of it sometimes).
class FakeDrafter : public DraftSource {
 public:
  explicit FakeDrafter(int k) : k_(k) {}
  int draft(std::span<const int32_t> tokens, int max_k, std::vector<int32_t>& out) override {
    EXPECT_GE(max_k, 1);
    max_k_seen = std::max(max_k_seen, max_k);
    const int n = std::min(k_, max_k);
    std::vector<int32_t> t(tokens.begin(), tokens.end());
    const int good = round_++ % (k_ + 1);
    for (int j = 0; j < n; ++j) {
      int32_t d = rule(t);
      if (j == good) d = d == 5 ? 6 : 5;  // wrong on purpose
      out.push_back(d);
      t.push_back(d);
    }
    return n;
  }
  void verified(int drafted, int accepted) override {
    EXPECT_LE(accepted, drafted);
    total_drafted += drafted;
    total_accepted += accepted;
  }
  int k_;
  int round_ = 0;
  int max_k_seen = 0;
  int64_t total_drafted = 0, total_accepted = 0;
};

struct SpecRun {
  std::map<SeqId, std::vector<int32_t>> tokens;
  int64_t max_batch_tokens = 0;
  int blocks_used_after = -1;
};

SpecRun run_all(const std::vector<std::vector<int32_t>>& prompts, const std::vector<int>& max_new,
                std::vector<FakeDrafter*> drafters, int64_t budget = 64) {
  KvCacheConfig c;
  c.n_layer = 1;
  c.n_kv_heads = 1;
  c.head_dim_k = 1;
  c.head_dim_v = 1;
  c.block_tokens = kBt;
  c.n_blocks = 64;
  c.dtype = GgmlType::F32;
  auto kv = std::move(KvCache::create(c)).value();
  SchedulerConfig sc;
  sc.step_token_budget = budget;
  sc.n_ctx = 512;
  sc.prefix_reuse = false;
  AdmissionLimits limits;
  limits.budget_bytes = uint64_t{1} << 30;
  limits.kv_pool_blocks = c.n_blocks;
  limits.max_running = static_cast<int>(std::min<int64_t>(8, budget));
  MemoryPlanner planner(64, kBt, 0, limits.max_running);
  Scheduler sched(sc, kv.get(), planner, limits);
  const auto now = Clock::now();
  for (size_t i = 0; i < prompts.size(); ++i) {
    SeqRequest r;
    r.id = i + 1;
    r.prompt = prompts[i];
    r.max_new_tokens = max_new[i];
    r.drafter = drafters[i];
    EXPECT_TRUE(sched.add(std::move(r), now).ok());
  }
  SpecFakeRunner runner;
  SpecRun out;
  for (int step = 0; step < 1000 && sched.has_work(); ++step) {
    for (const SeqEvent& e : sched.step(now, runner)) {
      if (e.kind == SeqEvent::Kind::kToken) out.tokens[e.id].push_back(e.token);
      EXPECT_FALSE(e.kind == SeqEvent::Kind::kFinished && e.end == SeqEnd::kFailed)
          << e.status.to_string();
    }
    // After every step a running sequence's KV holds exactly its committed positions but
    // the last token: prompt + generated - 1, and the blocks for them, no more.
    for (size_t i = 0; i < prompts.size(); ++i) {
      const KvSequence* s = sched.kv_of(i + 1);
      if (s == nullptr || out.tokens[i + 1].empty()) continue;
      const int committed = static_cast<int>(prompts[i].size() + out.tokens[i + 1].size()) - 1;
      EXPECT_EQ(s->n_tokens(), committed);
      EXPECT_EQ(sched.num_computed(i + 1), committed);
      EXPECT_LE(static_cast<int>(s->blocks().size()), (committed + kBt - 1) / kBt + 0);
    }
  }
  EXPECT_FALSE(sched.has_work());
  out.max_batch_tokens = runner.max_batch_tokens;
  out.blocks_used_after = kv->blocks_used();
  return out;
}

std::vector<int32_t> prompt(int n, int seed) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((seed * 37 + i * 13) % 500 + 3);
  return p;
}

TEST(SpecScheduler, SpeculatingAndPlainSequencesEqualPlainDecoding) {
  const std::vector<std::vector<int32_t>> prompts = {prompt(5, 1), prompt(20, 2), prompt(31, 3),
                                                     prompt(1, 4)};
  const std::vector<int> max_new = {40, 33, 17, 50};
  SpecRun plain = run_all(prompts, max_new, {nullptr, nullptr, nullptr, nullptr});
  FakeDrafter d1(3), d3(7), d4(1);
  SpecRun spec = run_all(prompts, max_new, {&d1, nullptr, &d3, &d4});
  for (SeqId id = 1; id <= 4; ++id) {
    ASSERT_EQ(plain.tokens[id].size(), static_cast<size_t>(max_new[id - 1]));
    EXPECT_EQ(spec.tokens[id], plain.tokens[id]) << "sequence " << id;
  }
  // The plain tokens follow the rule over the committed sequence (the fake's own check).
  std::vector<int32_t> all = prompts[0];
  for (int32_t t : plain.tokens[1]) {
    EXPECT_EQ(t, rule(all));
    all.push_back(t);
  }
  EXPECT_GT(d1.total_accepted, 0);
  EXPECT_LT(d1.total_accepted, d1.total_drafted);  // some drafts were rolled back
  EXPECT_GT(d3.total_drafted, d3.total_accepted);
  EXPECT_EQ(spec.blocks_used_after, 0);
  EXPECT_EQ(plain.blocks_used_after, 0);
}

TEST(SpecScheduler, DraftsStayWithinMaxNewTokensAndTheStepBudget) {
  FakeDrafter d(16);
  // max_new 3: at most 2 drafts after the first token, then 1, then none.
  SpecRun r = run_all({prompt(4, 9)}, {3}, {&d});
  EXPECT_EQ(r.tokens[1].size(), 3u);
  EXPECT_LE(d.max_k_seen, 2);
  // Budget 6 with three decoding sequences: 3 tokens for them, drafts share the other 3
  // (a sequence left alone may draft 5).
  FakeDrafter a(8), b(8), c(8);
  SpecRun r2 = run_all({prompt(2, 1), prompt(2, 2), prompt(2, 3)}, {30, 30, 30}, {&a, &b, &c}, 6);
  EXPECT_LE(r2.max_batch_tokens, 6);
  EXPECT_LE(std::max({a.max_k_seen, b.max_k_seen, c.max_k_seen}), 5);
  EXPECT_GT(a.total_drafted, 0);
  SpecRun p2 = run_all({prompt(2, 1), prompt(2, 2), prompt(2, 3)}, {30, 30, 30},
                       {nullptr, nullptr, nullptr}, 6);
  EXPECT_EQ(r2.tokens, p2.tokens);
}

TEST(SpecScheduler, RollbackAcrossABlockBoundaryFreesTheBlock) {
  // Prompt of 15: the KV holds 15 positions (one block) before the first draft; drafts of 7
  // reach into a second block; rejected ones must give it back, and the output stays exact.
  FakeDrafter d(7);
  SpecRun spec = run_all({prompt(15, 5)}, {60}, {&d});
  SpecRun plain = run_all({prompt(15, 5)}, {60}, {nullptr});
  EXPECT_EQ(spec.tokens, plain.tokens);
  EXPECT_EQ(spec.blocks_used_after, 0);
}

class PlainOnlyRunner : public StepRunner {
 public:
  Status run(std::span<const BatchItem> items, std::span<int32_t> next) override {
    for (size_t i = 0; i < items.size(); ++i) {
      items[i].kv->set_n_tokens(items[i].kv->n_tokens() + static_cast<int>(items[i].tokens.size()));
      next[i] = 5;
    }
    return Status();
  }
};

TEST(SpecScheduler, ARunnerWithoutVerificationFailsTheStepWithAReason) {
  KvCacheConfig c;
  c.n_layer = c.n_kv_heads = c.head_dim_k = c.head_dim_v = 1;
  c.block_tokens = kBt;
  c.n_blocks = 8;
  c.dtype = GgmlType::F32;
  auto kv = std::move(KvCache::create(c)).value();
  SchedulerConfig sc;
  sc.n_ctx = 64;
  AdmissionLimits limits;
  limits.budget_bytes = uint64_t{1} << 30;
  limits.kv_pool_blocks = 8;
  limits.max_running = 2;
  Scheduler sched(sc, kv.get(), MemoryPlanner(64, kBt, 0, 2), limits);
  FakeDrafter d(2);
  SeqRequest r;
  r.id = 1;
  r.prompt = {3, 4, 3, 4};
  r.max_new_tokens = 10;
  r.drafter = &d;
  ASSERT_TRUE(sched.add(std::move(r), Clock::now()).ok());
  PlainOnlyRunner runner;
  Status failed;
  for (int i = 0; i < 10 && sched.has_work(); ++i) {
    for (const SeqEvent& e : sched.step(Clock::now(), runner)) {
      if (e.kind == SeqEvent::Kind::kFinished) failed = e.status;
    }
  }
  EXPECT_EQ(failed.code(), StatusCode::kUnsupported);
  EXPECT_EQ(kv->blocks_used(), 0);
}

}  // namespace
}  // namespace power::runtime
