// Recurrent state declared through the SDK and managed by the runtime, with a small hybrid
// package written here: layer 0 a causal depthwise convolution whose window lives in the
// sequence's recurrent state (Ops::conv1d), layer 1 attention over paged KV, then a residual
// and the output head. Expected logits come from a float64 evaluation of the same formulas in
// the test. Checks: one pass matches the arithmetic; a prompt cut into passes gives the same
// bits (the state carries the window across passes); snapshot and restore of a slot give the
// logits of the uninterrupted sequence again; through the runtime, concurrent requests in one
// continuous batch each get what they get alone, the state pool is counted by admission
// (ModelInfo::recurrent_state_bytes, with the snapshot slots of speculative decoding; a budget
// without room for it is kDoesNotFit naming it), speculation gives the plain output, a prefix
// cache hit continues from a state checkpoint with the bits of a cold run (the attention
// layer's KV blocks shared, the conv window restored), and a sequence without a slot is an
// error, not a wrong answer.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>

#include "host/model.h"
#include "host/registry.h"
#include "power/runtime.h"
#include "power/sdk.h"
#include "test_util.h"
#include "toy_models.h"

namespace power {
namespace {

constexpr int64_t kE = 8, kV = 16, kK = 3, kHeads = 2, kHd = 4;

class Hybrid final : public sdk::Model {
 public:
  Status load(const sdk::ModelFile&, sdk::Weights& w, sdk::ModelSpec& spec) override {
    embd_ = w.require("token_embd.weight", {kE, kV}, sdk::kUseRows);
    conv_ = w.require("blk.0.conv.weight", {kK, kE}, sdk::kUseConv);
    conv_b_ = w.require("blk.0.conv.bias", {kE}, sdk::kUseVector);
    wq_ = w.require("blk.1.attn_q.weight", {kE, kE}, sdk::kUseMatmul);
    wk_ = w.require("blk.1.attn_k.weight", {kE, kE}, sdk::kUseMatmul);
    wv_ = w.require("blk.1.attn_v.weight", {kE, kE}, sdk::kUseMatmul);
    out_ = w.require("output.weight", {kE, kV}, sdk::kUseMatmul);
    spec.kind = sdk::ModelKind::kDecoder;
    spec.n_vocab = kV;
    spec.n_embd = kE;
    spec.n_ctx_train = 64;
    spec.state = {sdk::LayerState::recurrent(kE, kK, 0),
                  sdk::LayerState::attention(kHeads, kHd, kHd)};
    using sdk::Op;
    spec.uses({Op::kEmbed, Op::kConv1d, Op::kLinear, Op::kAttention, Op::kAdd, Op::kSelectRows});
    return Status();
  }
  void plan(sdk::Planner& p) override {
    x_ = p.rows(kE, "x");
    c_ = p.rows(kE, "c");
    q_ = p.rows(kE, "q");
    k_ = p.rows(kE, "k");
    v_ = p.rows(kE, "v");
    a_ = p.rows(kE, "a");
  }
  Status forward(sdk::Forward& f) const override {
    sdk::Ops& op = f.ops();
    const sdk::Act x = f.act(x_), c = f.act(c_), q = f.act(q_), k = f.act(k_), v = f.act(v_),
                   a = f.act(a_);
    op.embed(embd_, sdk::Index::kTokens, x);
    op.conv1d(0, x, conv_, &conv_b_, c);
    const sdk::LinearJob qkv[] = {{&wq_, nullptr, q}, {&wk_, nullptr, k}, {&wv_, nullptr, v}};
    op.linear_many(qkv, c);
    sdk::AttentionParams ap;
    ap.n_head = ap.n_head_kv = kHeads;
    ap.head_dim_k = ap.head_dim_v = kHd;
    op.attention(1, q, k, v, a, ap);
    op.add(c, a);
    const sdk::Act rows = f.act(x_).first_rows(f.n_outputs());
    op.select_output_rows(c, rows);
    op.linear(out_, nullptr, rows, f.output());
    return Status();
  }

 private:
  sdk::Weight embd_, conv_, conv_b_, wq_, wk_, wv_, out_;
  sdk::Buffer x_, c_, q_, k_, v_, a_;
};

struct Weights {
  std::vector<float> embd = testing::toy_values(kE * kV, 11, 1.0f);
  std::vector<float> conv = testing::toy_values(kK * kE, 12, 0.8f);
  std::vector<float> conv_b = testing::toy_values(kE, 13, 0.2f);
  std::vector<float> wq = testing::toy_values(kE * kE, 14, 0.6f);
  std::vector<float> wk = testing::toy_values(kE * kE, 15, 0.6f);
  std::vector<float> wv = testing::toy_values(kE * kE, 16, 0.6f);
  std::vector<float> out = testing::toy_values(kE * kV, 17, 1.0f);
};

// The same formulas in float64.
std::vector<double> reference_logits(const Weights& w, const std::vector<int32_t>& tokens) {
  const size_t n = tokens.size();
  std::vector<std::vector<double>> x(n, std::vector<double>(kE)), c = x, q = x, k = x, v = x;
  for (size_t t = 0; t < n; ++t) {
    for (int64_t e = 0; e < kE; ++e) x[t][e] = w.embd[tokens[t] * kE + e];
  }
  for (size_t t = 0; t < n; ++t) {
    for (int64_t ch = 0; ch < kE; ++ch) {
      double s = w.conv_b[ch];
      for (int64_t j = 0; j < kK; ++j) {
        const int64_t src = static_cast<int64_t>(t) - (kK - 1) + j;
        if (src >= 0) s += double(w.conv[ch * kK + j]) * x[static_cast<size_t>(src)][ch];
      }
      c[t][ch] = s;
    }
  }
  auto mat = [](const std::vector<float>& m, const std::vector<double>& in, int64_t rows) {
    std::vector<double> o(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
      for (size_t e = 0; e < in.size(); ++e) o[r] += double(m[r * in.size() + e]) * in[e];
    }
    return o;
  };
  for (size_t t = 0; t < n; ++t) {
    q[t] = mat(w.wq, c[t], kE);
    k[t] = mat(w.wk, c[t], kE);
    v[t] = mat(w.wv, c[t], kE);
  }
  std::vector<double> logits;
  for (size_t t = 0; t < n; ++t) {
    std::vector<double> h = c[t];
    for (int64_t hd = 0; hd < kHeads; ++hd) {
      std::vector<double> s(t + 1);
      double mx = -1e300;
      for (size_t j = 0; j <= t; ++j) {
        double d = 0;
        for (int64_t i = 0; i < kHd; ++i) d += q[t][hd * kHd + i] * k[j][hd * kHd + i];
        s[j] = d / std::sqrt(double(kHd));
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (double& e : s) sum += (e = std::exp(e - mx));
      for (size_t j = 0; j <= t; ++j) {
        for (int64_t i = 0; i < kHd; ++i) h[hd * kHd + i] += s[j] / sum * v[j][hd * kHd + i];
      }
    }
    const std::vector<double> row = mat(w.out, h, kV);
    logits.insert(logits.end(), row.begin(), row.end());
  }
  return logits;
}

class RecurrentModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (ArchitectureRegistry::global().find("sdktest_hybrid") == nullptr) {
      sdk::Architecture a;
      a.name = "sdktest_hybrid";
      a.create = [] { return std::make_unique<Hybrid>(); };
      a.tokenizer = [](const sdk::ModelFile&) -> Result<sdk::TokenizerSpec> {
        return testing::toy_vocabulary();
      };
      ASSERT_TRUE(sdk::register_architecture(std::move(a)).ok());
    }
    dir_ = testing::make_temp_dir("power-recurrent");
    path_ = testing::write_toy_gguf(dir_, "sdktest_hybrid",
                                    {{"token_embd.weight", {kE, kV}, w_.embd},
                                     {"blk.0.conv.weight", {kK, kE}, w_.conv},
                                     {"blk.0.conv.bias", {kE}, w_.conv_b},
                                     {"blk.1.attn_q.weight", {kE, kE}, w_.wq},
                                     {"blk.1.attn_k.weight", {kE, kE}, w_.wk},
                                     {"blk.1.attn_v.weight", {kE, kE}, w_.wv},
                                     {"output.weight", {kE, kV}, w_.out}});
    auto f = GgufFile::open(path_);
    ASSERT_TRUE(f.ok());
    auto m = load_model(std::shared_ptr<const GgufFile>(std::move(*f)));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  void TearDown() override { testing::remove_tree(dir_); }

  // Logits of `tokens` fed in passes of the given sizes to one sequence (all logits).
  std::vector<float> run_cut(const std::vector<int32_t>& tokens, const std::vector<size_t>& cuts) {
    auto ws = model_->make_workspace(32, 32, 2);
    auto kv = KvCache::create(model_->kv_config(32, 1, GgmlType::F32));
    auto rec = RecurrentState::create(model_->recurrent_config(1));
    EXPECT_TRUE(ws.ok() && kv.ok() && rec.ok());
    KvSequence seq(kv->get());
    auto slot = (*rec)->allocate();
    EXPECT_TRUE(slot.ok());
    seq.attach_recurrent(rec->get(), *slot);
    std::vector<float> all;
    size_t at = 0;
    for (size_t n : cuts) {
      std::vector<int32_t> part(tokens.begin() + at, tokens.begin() + at + n);
      std::vector<float> out(n * kV);
      const ForwardChunk c{&seq, part, true};
      Status st = model_->forward(**ws, std::span<const ForwardChunk>(&c, 1), out.data());
      EXPECT_TRUE(st.ok()) << st.to_string();
      all.insert(all.end(), out.begin(), out.end());
      at += n;
    }
    return all;  // the sequence gives its slot back when it goes
  }

  Weights w_;
  std::string dir_, path_;
  std::unique_ptr<Model> model_;
};

const std::vector<int32_t> kTokens = {1, 5, 9, 3, 3, 14, 7, 2, 11, 6, 6, 10};

TEST_F(RecurrentModel, OnePassMatchesTheArithmetic) {
  EXPECT_TRUE(model_->has_recurrent_state());
  EXPECT_EQ(model_->kv_config(32, 1, GgmlType::F32).n_layer, 1);
  const RecurrentStateConfig rc = model_->recurrent_config(3);
  ASSERT_EQ(rc.layer_floats.size(), 1u);
  EXPECT_EQ(rc.layer_floats[0], (kK - 1) * kE);  // the convolution's window
  const auto got = run_cut(kTokens, {kTokens.size()});
  const auto want = reference_logits(w_, kTokens);
  ASSERT_EQ(got.size(), want.size());
  double max_err = 0;
  for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
  EXPECT_LT(max_err, 1e-5);
}

TEST_F(RecurrentModel, PassesCutAnywhereGiveTheSameBits) {
  const auto whole = run_cut(kTokens, {kTokens.size()});
  for (const auto& cuts : std::vector<std::vector<size_t>>{{1, 5, 6}, {1, 1, 1, 9}, {2, 10}}) {
    const auto cut = run_cut(kTokens, cuts);
    ASSERT_EQ(cut.size(), whole.size());
    EXPECT_EQ(0, std::memcmp(cut.data(), whole.data(), whole.size() * sizeof(float)));
  }
}

TEST_F(RecurrentModel, SnapshotAndRestoreGiveTheUninterruptedLogits) {
  auto ws = model_->make_workspace(32, 32, 1);
  auto kv = KvCache::create(model_->kv_config(32, 1, GgmlType::F32));
  auto rec = RecurrentState::create(model_->recurrent_config(2));  // the sequence + a snapshot
  ASSERT_TRUE(ws.ok() && kv.ok() && rec.ok());
  KvSequence seq(kv->get());
  auto slot = (*rec)->allocate();
  auto snap = (*rec)->allocate();
  ASSERT_TRUE(slot.ok() && snap.ok());
  seq.attach_recurrent(rec->get(), *slot);
  auto feed = [&](std::vector<int32_t> toks) {
    std::vector<float> out(toks.size() * kV);
    const ForwardChunk c{&seq, toks, true};
    EXPECT_TRUE(model_->forward(**ws, std::span<const ForwardChunk>(&c, 1), out.data()).ok());
    return out;
  };
  feed({1, 5, 9, 3, 3, 14});
  (*rec)->copy(*slot, *snap);  // snapshot at 6 positions
  const auto right = feed({7, 2, 11});
  feed({4, 4, 4});             // a wrong continuation: the state moves on
  (*rec)->copy(*snap, *slot);  // restore, and cut the KV back to the same position
  ASSERT_TRUE(seq.truncate(6).ok());
  const auto again = feed({7, 2, 11});
  EXPECT_EQ(0, std::memcmp(right.data(), again.data(), right.size() * sizeof(float)));
  const auto want = reference_logits(w_, kTokens);
  for (size_t i = 0; i < right.size(); ++i) EXPECT_NEAR(right[i], want[6 * kV + i], 1e-5);
  (*rec)->release(*snap);  // the sequence gives back its own slot
}

TEST_F(RecurrentModel, ASequenceWithoutASlotIsAnError) {
  auto ws = model_->make_workspace(32, 32, 1);
  auto kv = KvCache::create(model_->kv_config(32, 1, GgmlType::F32));
  ASSERT_TRUE(ws.ok() && kv.ok());
  KvSequence seq(kv->get());
  std::vector<int32_t> toks = {1, 2};
  std::vector<float> out(2 * kV);
  const ForwardChunk c{&seq, toks, true};
  Status st = model_->forward(**ws, std::span<const ForwardChunk>(&c, 1), out.data());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.to_string().find("recurrent state slot"), std::string::npos) << st.to_string();
  EXPECT_EQ(seq.n_tokens(), 0);
}

LoadOptions runtime_options() {
  LoadOptions o;
  o.n_ctx = 32;
  o.max_running = 3;
  o.threads = 2;
  o.kv_type = "f32";
  return o;
}

GenerateRequest greedy(std::vector<int32_t> prompt) {
  GenerateRequest r;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = 10;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  return r;
}

TEST_F(RecurrentModel, TheRuntimeBatchesSequencesWithTheirOwnState) {
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(path_, runtime_options());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  // A slot of (kK - 1) * kE floats per running sequence and per state snapshot of speculative
  // decoding (LoadOptions::speculative.s, default min(k, 7) = 4): 3 x (1 + 4).
  EXPECT_EQ(m->info().recurrent_state_bytes, 3u * 5u * (kK - 1) * kE * sizeof(float));
  // The scoring API runs the same pass.
  auto scored = (*rt)->logits(*m, kTokens);
  ASSERT_TRUE(scored.ok()) << scored.status().to_string();
  const auto want = reference_logits(w_, kTokens);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR((*scored)[i], want[i], 1e-5) << i;

  const std::vector<std::vector<int32_t>> prompts = {
      {1, 5, 9, 3}, {1, 14, 7, 2, 11, 6}, {1, 3, 3, 3, 3, 3, 10}};
  std::vector<std::vector<int32_t>> alone;
  for (const auto& p : prompts) {
    auto h = (*rt)->submit(*m, greedy(p));
    ASSERT_TRUE(h.ok());
    Completion c = h->wait();
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    ASSERT_EQ(c.tokens.size(), 10u);
    alone.push_back(c.tokens);
  }
  // The first generated token is the argmax of the reference's last prompt row.
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto ref = reference_logits(w_, prompts[i]);
    const double* last = ref.data() + (prompts[i].size() - 1) * kV;
    EXPECT_EQ(alone[i][0], std::max_element(last, last + kV) - last) << i;
  }
  // All three at once, twice over: each gets what it got alone.
  for (int round = 0; round < 2; ++round) {
    std::vector<RequestHandle> hs;
    for (const auto& p : prompts) {
      auto h = (*rt)->submit(*m, greedy(p));
      ASSERT_TRUE(h.ok());
      hs.push_back(*h);
    }
    for (size_t i = 0; i < hs.size(); ++i) EXPECT_EQ(hs[i].wait().tokens, alone[i]) << i;
  }
  // Speculation rolls the state back through snapshots: the output is the plain one.
  for (const char* mode : {"ngram", "auto"}) {
    GenerateRequest spec = greedy(prompts[0]);
    spec.speculative = SpeculativeOptions{};
    spec.speculative->mode = mode;
    auto h = (*rt)->submit(*m, spec);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    EXPECT_EQ(h->wait().tokens, alone[0]) << mode;
  }
}

TEST_F(RecurrentModel, PrefixCacheHitsRestoreTheStateAndShareTheBlocks) {
  // Prompts of 36-40 tokens over the 16-token vocabulary; the second and fourth repeat or
  // extend earlier ones.
  std::vector<int32_t> a, b;
  for (int i = 0; i < 36; ++i) a.push_back(static_cast<int32_t>((i * 5 + 1) % kV));
  b.assign(a.begin(), a.begin() + 17);
  for (int i = 0; i < 20; ++i) b.push_back(static_cast<int32_t>((i * 3 + 2) % kV));
  std::vector<int32_t> a2 = a;
  a2.insert(a2.end(), {4, 9, 1, 12});
  const std::vector<std::vector<int32_t>> prompts = {a, a, b, a2, b};
  auto run = [&](int checkpoints, std::vector<Completion>& out, RuntimeStats& stats) {
    auto rt = Runtime::create({});
    ASSERT_TRUE(rt.ok());
    LoadOptions o = runtime_options();
    o.n_ctx = 64;
    o.state_checkpoints = checkpoints;
    auto m = (*rt)->load(path_, o);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    // 3 running x (1 + 4) slots, then the checkpoints, (kK - 1) x kE floats each.
    EXPECT_EQ(m->info().state_checkpoint_bytes,
              static_cast<uint64_t>(checkpoints) * (kK - 1) * kE * sizeof(float));
    for (const auto& p : prompts) {
      GenerateRequest r = greedy(p);
      r.max_tokens = 6;
      r.top_logprobs = 20;
      auto h = (*rt)->submit(*m, r);
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      out.push_back(h->wait());
      ASSERT_TRUE(out.back().status.ok()) << out.back().status.to_string();
    }
    stats = m->stats();
  };
  std::vector<Completion> cold, warm;
  RuntimeStats cold_stats, warm_stats;
  run(0, cold, cold_stats);
  run(8, warm, warm_stats);
  ASSERT_EQ(warm.size(), prompts.size());
  ASSERT_EQ(cold.size(), prompts.size());
  // a: cold, checkpoint at 32; a: 32; b leaves a's chain after block 0: cold, checkpoints at
  // 16 and 32; a2: 32; b: 32.
  const std::vector<int64_t> want_cached = {0, 32, 0, 32, 32};
  for (size_t i = 0; i < prompts.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(cold[i].usage.cached_prompt_tokens, 0);
    EXPECT_EQ(warm[i].usage.cached_prompt_tokens, want_cached[i]);
    testing::expect_identical_completions(warm[i], cold[i]);
  }
  EXPECT_EQ(cold_stats.prefix_state_checkpoints, 0);
  EXPECT_EQ(warm_stats.prefix_state_checkpoints, 3);
  EXPECT_GT(warm_stats.prefix_cache_blocks, 0);  // the attention layer's blocks are shared
}

TEST_F(RecurrentModel, AdmissionCountsTheStatePool) {
  RuntimeOptions ro;
  ro.memory_budget_bytes = 1;  // nothing fits
  auto rt = Runtime::create(ro);
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(path_, runtime_options());
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kDoesNotFit);
  // 3 running x (1 + 4 snapshots) slots of 64 bytes.
  EXPECT_NE(m.status().to_string().find("recurrent_state_bytes=960"), std::string::npos)
      << m.status().to_string();
}

}  // namespace
}  // namespace power
