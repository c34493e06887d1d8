// Speculative rollback of a model with recurrent layers (issue #22), driven through the
// runner with drafts we choose: Mamba's state cannot be cut back like a KV cache, so each
// verify pass snapshots the state after the chunk's first S tokens, and afterwards the runner
// restores the snapshot at the last accepted position (a rejection inside the window) or
// restores the last snapshot and replays the accepted tokens after it (a rejection beyond).
// The drafts here are the model's own greedy tokens for the first m positions and wrong ones
// after, m from a fixed schedule, so every round accepts exactly m: rejections inside and
// beyond the window, and rounds that accept everything. Checks, for K in {1, 3, 7} x S in
// {1, 3, 7}: the committed tokens equal plain greedy decoding, the next-token logits after the
// last round equal those of a sequence fed the committed tokens plainly (bit for bit: the
// state is exactly right), and restores / replays are counted. Without the restore (or with
// the replay skipped) the logits differ.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "engine/sampler.h"
#include "host/model.h"
#include "runtime/model_runner.h"
#include "test_util.h"

namespace power::runtime {
namespace {

class CountingDrafter final : public DraftSource {
 public:
  int draft(std::span<const int32_t>, int, std::vector<int32_t>&) override { return 0; }
  void verified(int, int) override {}
  void rolled_back(bool replayed, int tokens) override {
    if (replayed) {
      ++replays;
      replayed_tokens += tokens;
    } else {
      ++restores;
    }
  }
  int restores = 0, replays = 0, replayed_tokens = 0;
};

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

struct Fixture {
  std::unique_ptr<Model> model;
  std::unique_ptr<Workspace> ws;
  std::unique_ptr<KvCache> kv;
  std::unique_ptr<RecurrentState> pool;
  int64_t V = 0;

  Fixture() {
    auto f = GgufFile::open(testing::shared_dir() + "/fixtures/models/mamba/mamba-F32.gguf");
    EXPECT_TRUE(f.ok());
    auto m = load_model(std::shared_ptr<const GgufFile>(std::move(*f)));
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    model = std::move(*m);
    ws = std::move(*model->make_workspace(64, 128, 2));
    kv = std::move(*KvCache::create(model->kv_config(128, 2, GgmlType::F32)));
    pool = std::move(*RecurrentState::create(model->recurrent_config(2 + 7)));
    V = model->hparams().n_vocab;
  }
  std::unique_ptr<KvSequence> sequence() {
    auto s = std::make_unique<KvSequence>(kv.get());
    auto slot = pool->allocate();
    EXPECT_TRUE(slot.ok());
    s->attach_recurrent(pool.get(), *slot);
    return s;
  }
  // Feeds tokens in one pass; returns the last row's logits.
  std::vector<float> feed(KvSequence& seq, const std::vector<int32_t>& toks) {
    std::vector<float> out(static_cast<size_t>(V));
    const ForwardChunk c{&seq, toks, false};
    EXPECT_TRUE(model->forward(*ws, std::span<const ForwardChunk>(&c, 1), out.data()).ok());
    return out;
  }
};

const std::vector<int32_t> kPrompt = {1, 291, 410, 456, 425, 417, 340, 268, 420, 327, 416, 272};
// Accepted drafts per round (clamped to K).
const int kSchedule[] = {0, 1, 2, 5, 7, 3, 6, 4, 0, 7, 2};

// `skip_restore` (a mutation check) leaves the state where the verify pass left it.
struct Outcome {
  std::vector<int32_t> committed;
  std::vector<float> next_logits;
  CountingDrafter counts;
};

Outcome run_spec(Fixture& fx, int K, int S, const std::vector<int32_t>& greedy) {
  Outcome o;
  auto seq = fx.sequence();
  ModelRunner runner(*fx.model, *fx.ws, 2, fx.pool.get());
  SamplerParams sp;
  sp.temperature = 0;
  Sampler sampler(sp, fx.V);
  // The prompt but its last token, as the scheduler leaves it; then rounds of verify chunks
  // [last committed token, drafts...].
  std::vector<int32_t> head(kPrompt.begin(), kPrompt.end() - 1);
  fx.feed(*seq, head);
  std::vector<int32_t> committed = {kPrompt.back()};
  size_t g = 0;  // greedy tokens committed so far
  for (int m : kSchedule) {
    m = std::min(m, K);
    std::vector<int32_t> chunk = {committed.back()};
    for (int j = 0; j < K; ++j) {
      const int32_t right = greedy[g + static_cast<size_t>(j)];
      chunk.push_back(j < m ? right : (right + 1) % static_cast<int32_t>(fx.V));
    }
    BatchItem it;
    it.kv = seq.get();
    it.tokens = chunk;
    it.n_draft = K;
    it.wants_token = true;
    it.runner_state = &sampler;
    it.drafter = &o.counts;
    it.snapshots = S;
    const int64_t pos0 = seq->n_tokens();
    int32_t next = -1, accepted = -1;
    Status st =
        runner.run_speculative(std::span<const BatchItem>(&it, 1), std::span<int32_t>(&next, 1),
                               std::span<int32_t>(&accepted, 1));
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(accepted, m);
    // The scheduler's commit: keep the last token and the accepted drafts.
    EXPECT_TRUE(seq->truncate(static_cast<int>(pos0 + 1 + accepted)).ok());
    for (int j = 0; j < accepted; ++j) committed.push_back(chunk[1 + static_cast<size_t>(j)]);
    committed.push_back(next);
    g += static_cast<size_t>(accepted) + 1;
  }
  // The next pass's logits (the last committed token goes in now).
  o.next_logits = fx.feed(*seq, {committed.back()});
  o.committed.assign(committed.begin() + 1, committed.end());
  return o;
}

TEST(RecurrentSpeculation, RestoreAndReplayGiveExactlyThePlainState) {
  POWER_REQUIRE_SHARED();
  Fixture fx;
  ASSERT_TRUE(fx.model);
  // Plain greedy decoding: the reference tokens and, after them, the reference logits.
  std::vector<int32_t> greedy;
  {
    auto seq = fx.sequence();
    std::vector<float> logits = fx.feed(*seq, kPrompt);
    for (int i = 0; i < 100; ++i) {
      greedy.push_back(argmax(logits.data(), fx.V));
      logits = fx.feed(*seq, {greedy.back()});
    }
  }
  for (int K : {1, 3, 7}) {
    for (int S : {1, 3, 7}) {
      SCOPED_TRACE("K=" + std::to_string(K) + " S=" + std::to_string(S));
      Outcome o = run_spec(fx, K, S, greedy);
      ASSERT_LE(o.committed.size(), greedy.size());
      EXPECT_TRUE(std::equal(o.committed.begin(), o.committed.end(), greedy.begin()));
      // The same tokens fed plainly give bit for bit the same next logits.
      auto plain = fx.sequence();
      std::vector<int32_t> all = kPrompt;
      all.insert(all.end(), o.committed.begin(), o.committed.end());
      const std::vector<float> want = fx.feed(*plain, all);
      EXPECT_EQ(0, std::memcmp(o.next_logits.data(), want.data(), want.size() * sizeof(float)));
      // Rounds that rejected inside the window were restored, those beyond it replayed.
      int inside = 0, beyond = 0, replayed = 0;
      for (int m : kSchedule) {
        m = std::min(m, K);
        if (m == K) continue;
        const int window = std::min(S, K);
        if (m < window) {
          ++inside;
        } else {
          ++beyond;
          replayed += m - window + 1;
        }
      }
      EXPECT_EQ(o.counts.restores, inside);
      EXPECT_EQ(o.counts.replays, beyond);
      EXPECT_EQ(o.counts.replayed_tokens, replayed);
      // Every snapshot slot went back to the pool (the two sequences' own slots are held).
      EXPECT_EQ(fx.pool->slots_free(), 9 - 1);
    }
  }
}

}  // namespace
}  // namespace power::runtime
