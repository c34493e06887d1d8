// MTP (NextN) speculative decoding against a synthetic MTP model made by our own tool:
// `power dev synth --shape tiny --mtp 1` writes a random-weight llama with one MTP layer in
// llama.cpp's layout (no real MTP model is available here, see docs/SPECULATIVE.md). Checks:
//  - the file loads (the main model runs block_count - nextn_predict_layers blocks) and
//    greedy output with `mtp`, k in {1, 3, 7}, equals plain greedy output token for token,
//    alone, under concurrency (mixed with plain and n-gram requests) and with the MTP KV of
//    every request back in its pool afterwards (later requests still draft);
//  - `auto` picks mtp on such a file, and plain decoding of the file equals decoding the same
//    file with its MTP tensors removed (the main model ignores them);
//  - a missing or misshaped MTP tensor is a load error naming the tensor; the runtime keeps
//    serving; `mtp` on a file without MTP layers names the missing key;
//  - `power run --spec mtp` reports the mode and its counts; sampling with mtp is seeded and
//    reproducible;
//  - the drafter's rollback: after rounds of drafts with rejections (verify chunks whose
//    rejected rows it observed, chains it wrote past the committed pairs), it drafts exactly
//    what a fresh drafter fed the same committed tokens in one prefill drafts.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "device/kv_cache.h"
#include "engine/speculative_mtp.h"
#include "format/gguf.h"
#include "host/model.h"
#include "power/runtime.h"
#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

std::string vocab() {
  return testing::shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf";
}

// One synthetic MTP model per test binary (written once, ~3 MB).
const std::string& mtp_model() {
  static const std::string path = [] {
    const std::string p = ::testing::TempDir() + "/spec_mtp_tiny.gguf";
    auto r = testing::run_power({"dev", "synth", "--shape", "tiny", "--type", "f32", "--mtp", "1",
                                 "--std", "0.3", "--vocab", vocab(), "-o", p});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return p;
  }();
  return path;
}

LoadOptions opts(int max_running) {
  LoadOptions o;
  o.n_ctx = 256;
  o.max_running = max_running;
  o.threads = 1;
  o.prefix_reuse = false;
  return o;
}

std::vector<int32_t> prompt_ids(int variant) {
  std::vector<int32_t> p = {1};
  for (int rep = 0; rep < 3; ++rep) {
    for (int i = 0; i < 6; ++i) p.push_back(300 + 17 * i + variant);
  }
  return p;
}

GenerateRequest greedy(std::vector<int32_t> prompt, int max_tokens,
                       std::optional<SpeculativeOptions> spec) {
  GenerateRequest r;
  r.prompt_tokens = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.temperature = 0;
  r.ignore_eos = true;
  r.speculative = std::move(spec);
  return r;
}

SpeculativeOptions spec(const std::string& mode, int k, bool adaptive = false) {
  SpeculativeOptions s;
  s.mode = mode;
  s.k = k;
  s.adaptive = adaptive;
  return s;
}

Completion run_one(Runtime& rt, const ModelHandle& m, GenerateRequest req) {
  auto h = rt.submit(m, std::move(req));
  EXPECT_TRUE(h.ok()) << h.status().to_string();
  if (!h.ok()) return {};
  return h->wait();
}

// A copy of `src` with tensor `drop` left out, or with `reshape` given a wrong shape.
std::string edited_copy(const std::string& src_path, const std::string& name,
                        const std::string& drop, const std::string& reshape) {
  auto src = GgufFile::open(src_path);
  EXPECT_TRUE(src.ok());
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) w.set(kv.key, kv.value);
  for (const auto& t : (*src)->tensors()) {
    if (t.name == drop) continue;
    std::vector<uint64_t> ne = t.ne;
    if (t.name == reshape) {  // same bytes, rows and columns swapped
      std::swap(ne[0], ne[1]);
    }
    EXPECT_TRUE(w.add_tensor_view(t.name, t.type, ne, {t.data, t.n_bytes}).ok());
  }
  const std::string out = ::testing::TempDir() + "/" + name;
  EXPECT_TRUE(w.write(out).ok());
  return out;
}

TEST(SpecMtp, GreedyEqualsPlainForEveryK) {
  POWER_REQUIRE_SHARED();
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(mtp_model(), opts(1));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->info().n_layer, 2);  // block_count 3 minus the MTP layer
  for (int variant = 0; variant < 2; ++variant) {
    const auto prompt = prompt_ids(variant);
    Completion plain = run_one(**rt, *m, greedy(prompt, 40, std::nullopt));
    ASSERT_TRUE(plain.status.ok()) << plain.status.to_string();
    ASSERT_EQ(plain.tokens.size(), 40u);
    for (int k : {1, 3, 7}) {
      SCOPED_TRACE("k=" + std::to_string(k) + " variant=" + std::to_string(variant));
      Completion c = run_one(**rt, *m, greedy(prompt, 40, spec("mtp", k)));
      ASSERT_TRUE(c.status.ok()) << c.status.to_string();
      EXPECT_EQ(c.tokens, plain.tokens);
      EXPECT_EQ(c.speculative.mode, "mtp");
      EXPECT_GT(c.speculative.drafted, 0);
      EXPECT_LE(c.speculative.accepted, c.speculative.drafted);
      EXPECT_LE(c.speculative.drafted, c.speculative.verify_passes * k);
    }
    Completion a = run_one(**rt, *m, greedy(prompt, 40, spec("mtp", 6, true)));
    EXPECT_EQ(a.tokens, plain.tokens);
  }
}

TEST(SpecMtp, ConcurrentMixedRequestsEqualPlainAndReleaseTheMtpKv) {
  POWER_REQUIRE_SHARED();
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(mtp_model(), opts(4));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::vector<std::vector<int32_t>> want;
  for (int v = 0; v < 4; ++v) {
    want.push_back(run_one(**rt, *m, greedy(prompt_ids(v), 30, std::nullopt)).tokens);
  }
  for (int round = 0; round < 2; ++round) {  // the second round needs the MTP KV back
    const char* modes[] = {"mtp", "off", "mtp", "ngram"};
    std::vector<RequestHandle> hs;
    for (int v = 0; v < 4; ++v) {
      auto h = (*rt)->submit(*m, greedy(prompt_ids(v), 30, spec(modes[v], 3 + v, v == 2)));
      ASSERT_TRUE(h.ok()) << h.status().to_string();
      hs.push_back(std::move(*h));
    }
    for (int v = 0; v < 4; ++v) {
      SCOPED_TRACE("round " + std::to_string(round) + " request " + std::to_string(v));
      Completion c = hs[static_cast<size_t>(v)].wait();
      ASSERT_TRUE(c.status.ok()) << c.status.to_string();
      EXPECT_EQ(c.tokens, want[static_cast<size_t>(v)]);
      EXPECT_EQ(c.speculative.mode, modes[v]);
      if (std::string(modes[v]) == "mtp") EXPECT_GT(c.speculative.drafted, 0);
    }
  }
}

TEST(SpecMtp, AutoPicksMtpAndTheMainModelIgnoresTheMtpLayers) {
  POWER_REQUIRE_SHARED();
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(mtp_model(), opts(1));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const auto prompt = prompt_ids(0);
  Completion a = run_one(**rt, *m, greedy(prompt, 16, spec("auto", 3)));
  EXPECT_EQ(a.speculative.mode, "mtp");
  Completion plain = run_one(**rt, *m, greedy(prompt, 16, std::nullopt));
  EXPECT_EQ(a.tokens, plain.tokens);

  // Without the MTP block's tensors and key, the file is an ordinary 2-layer llama whose
  // plain output must be the same.
  auto src = GgufFile::open(mtp_model());
  ASSERT_TRUE(src.ok());
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    if (kv.key == "llama.nextn_predict_layers") continue;
    w.set(kv.key, kv.key == "llama.block_count" ? GgufValue::u32(2) : kv.value);
  }
  for (const auto& t : (*src)->tensors()) {
    if (t.name.rfind("blk.2.", 0) == 0) continue;
    ASSERT_TRUE(w.add_tensor_view(t.name, t.type, t.ne, {t.data, t.n_bytes}).ok());
  }
  const std::string stripped = ::testing::TempDir() + "/spec_mtp_stripped.gguf";
  ASSERT_TRUE(w.write(stripped).ok());
  auto s = (*rt)->load(stripped, opts(1));
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(run_one(**rt, *s, greedy(prompt, 16, std::nullopt)).tokens, plain.tokens);
  Completion au = run_one(**rt, *s, greedy(prompt, 16, spec("auto", 3)));
  EXPECT_EQ(au.speculative.mode, "ngram");
  auto h = (*rt)->submit(*s, greedy(prompt, 4, spec("mtp", 3)));
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().to_string().find("nextn_predict_layers"), std::string::npos);
  std::filesystem::remove(stripped);
}

TEST(SpecMtp, MissingOrMisshapedMtpTensorsAreLoadErrors) {
  POWER_REQUIRE_SHARED();
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  struct Case {
    const char* file;
    const char* drop;
    const char* reshape;
    StatusCode code;
    const char* tensor;
  };
  const Case cases[] = {
      {"mtp_no_eh_proj.gguf", "blk.2.nextn.eh_proj.weight", "", StatusCode::kNotFound,
       "blk.2.nextn.eh_proj.weight"},
      {"mtp_no_hnorm.gguf", "blk.2.nextn.hnorm.weight", "", StatusCode::kNotFound,
       "blk.2.nextn.hnorm.weight"},
      {"mtp_no_attn_q.gguf", "blk.2.attn_q.weight", "", StatusCode::kNotFound,
       "blk.2.attn_q.weight"},
      {"mtp_bad_eh_proj.gguf", "", "blk.2.nextn.eh_proj.weight", StatusCode::kInvalidArgument,
       "blk.2.nextn.eh_proj.weight"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    const std::string path = edited_copy(mtp_model(), c.file, c.drop, c.reshape);
    auto m = (*rt)->load(path, opts(1));
    ASSERT_FALSE(m.ok());
    EXPECT_EQ(m.status().code(), c.code) << m.status().to_string();
    EXPECT_NE(m.status().to_string().find(c.tensor), std::string::npos) << m.status().to_string();
    std::filesystem::remove(path);
  }
  // nextn_predict_layers not below block_count.
  auto src = GgufFile::open(mtp_model());
  ASSERT_TRUE(src.ok());
  GgufWriter w;
  for (const auto& kv : (*src)->metadata()) {
    w.set(kv.key, kv.key == "llama.nextn_predict_layers" ? GgufValue::u32(3) : kv.value);
  }
  for (const auto& t : (*src)->tensors()) {
    ASSERT_TRUE(w.add_tensor_view(t.name, t.type, t.ne, {t.data, t.n_bytes}).ok());
  }
  const std::string all_mtp = ::testing::TempDir() + "/mtp_all_layers.gguf";
  ASSERT_TRUE(w.write(all_mtp).ok());
  auto bad = (*rt)->load(all_mtp, opts(1));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().to_string().find("nextn_predict_layers"), std::string::npos)
      << bad.status().to_string();
  std::filesystem::remove(all_mtp);
  // Still serving.
  auto m = (*rt)->load(mtp_model(), opts(1));
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(run_one(**rt, *m, greedy(prompt_ids(0), 4, spec("mtp", 2))).tokens.size(), 4u);
}

TEST(SpecMtp, SamplingWithMtpIsSeededAndReproducible) {
  POWER_REQUIRE_SHARED();
  auto rt = Runtime::create({});
  ASSERT_TRUE(rt.ok());
  auto m = (*rt)->load(mtp_model(), opts(1));
  ASSERT_TRUE(m.ok());
  auto req = [] {
    GenerateRequest r = greedy(prompt_ids(1), 24, spec("mtp", 4));
    r.sampling.temperature = 0.8f;
    r.sampling.seed = 1234;
    return r;
  };
  Completion a = run_one(**rt, *m, req());
  Completion b = run_one(**rt, *m, req());
  ASSERT_TRUE(a.status.ok());
  EXPECT_EQ(a.tokens.size(), 24u);
  EXPECT_EQ(a.tokens, b.tokens);
  EXPECT_GT(a.speculative.drafted, 0);
}

// Drives Model + MtpDrafter by hand: drafter A goes through verify rounds that accept 0, 1, 2
// and all drafts (each rejection leaves stale MTP chain positions and stale hidden rows behind);
// drafter B sees only the committed tokens, prefilled at once. Both must draft the same tokens
// (and A must hold exactly the committed pairs). Fails if the MTP KV keeps a rejected chain
// position or a hidden row is paired with the wrong token.
TEST(SpecMtp, DrafterAfterRollbacksDraftsWhatAFreshDrafterDrafts) {
  POWER_REQUIRE_SHARED();
  auto file = GgufFile::open(mtp_model());
  ASSERT_TRUE(file.ok());
  std::shared_ptr<const GgufFile> f(std::move(*file));
  auto model = load_model(f);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  auto head = load_draft_head(**model);
  ASSERT_TRUE(head.ok()) << head.status().to_string();
  const int64_t n_ctx = 128, n_vocab = (*model)->hparams().n_vocab;
  auto kv = KvCache::create((*model)->kv_config(n_ctx, 2, GgmlType::F32));
  auto mkv = KvCache::create((*head)->kv_config(n_ctx, 2, GgmlType::F32));
  ASSERT_TRUE(kv.ok() && mkv.ok());
  auto ws = (*model)->make_workspace(64, n_ctx, 1);
  auto mws = (*head)->make_workspace(64, n_ctx, 1);
  ASSERT_TRUE(ws.ok() && mws.ok());
  SamplerParams sp;
  sp.temperature = 0;
  spec::MtpDrafter a(**head, **mws, mkv->get(), sp);
  KvSequence seq_a(kv->get());
  std::vector<float> logits(static_cast<size_t>(64 * n_vocab));  // ws: 64 tokens
  auto pass = [&](KvSequence& seq, spec::MtpDrafter& dr, std::span<const int32_t> toks) {
    const int64_t pos0 = seq.n_tokens();
    ForwardChunk c{&seq, toks, true};
    ASSERT_TRUE((*model)->forward(**ws, std::span<const ForwardChunk>(&c, 1), logits.data()).ok());
    dr.observe(pos0, (*ws)->hidden_row(0), static_cast<int64_t>(toks.size()));
  };
  std::vector<int32_t> committed = prompt_ids(0);
  pass(seq_a, a, std::span<const int32_t>(committed).first(committed.size() - 1));
  // committed.back() is not in the KV yet (as in the scheduler: the last sampled token).
  for (int round = 0; round < 4; ++round) {
    std::vector<int32_t> drafts;
    auto n = a.draft(committed, 3, drafts);
    ASSERT_TRUE(n.ok());
    ASSERT_EQ(*n, 3);
    std::vector<int32_t> chunk = {committed.back()};
    chunk.insert(chunk.end(), drafts.begin(), drafts.end());
    const int64_t keep = seq_a.n_tokens();
    pass(seq_a, a, chunk);
    const int accepted = std::min(round, 3);  // 0, 1, 2, then all 3
    ASSERT_TRUE(seq_a.truncate(static_cast<int>(keep + 1 + accepted)).ok());
    for (int j = 0; j < accepted; ++j) committed.push_back(drafts[static_cast<size_t>(j)]);
    // The "correction": any token the drafts did not propose.
    committed.push_back(static_cast<int32_t>((1000 + 37 * round) % n_vocab));
  }
  std::vector<int32_t> da, db;
  ASSERT_TRUE(a.draft(committed, 4, da).ok());
  EXPECT_EQ(a.fed(), static_cast<int64_t>(committed.size()) - 1);

  spec::MtpDrafter b(**head, **mws, mkv->get(), sp);
  KvSequence seq_b(kv->get());
  pass(seq_b, b, std::span<const int32_t>(committed).first(committed.size() - 1));
  ASSERT_TRUE(b.draft(committed, 4, db).ok());
  EXPECT_EQ(da, db);
  EXPECT_EQ(b.fed(), a.fed());
}

TEST(SpecMtp, PowerRunSpecMtp) {
  POWER_REQUIRE_SHARED();
  auto r = testing::run_power({"run", "-m", mtp_model(), "-p", "one two three one two three", "-n",
                               "12", "--temp", "0", "--ignore-eos", "-t", "1", "--spec", "mtp",
                               "--spec-k", "3"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("speculative: mtp"), std::string::npos) << r.err;
  auto plain = testing::run_power({"run", "-m", mtp_model(), "-p", "one two three one two three",
                                   "-n", "12", "--temp", "0", "--ignore-eos", "-t", "1"});
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(r.out, plain.out);
}

}  // namespace
}  // namespace power
