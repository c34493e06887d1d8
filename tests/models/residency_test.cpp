// Weights residency (device/residency.h, docs/RESIDENCY.md): the plan's rules on made-up
// tensor lists (expected tiers follow from the sizes by hand), budget strings, and on the peer
// fixture models: logits and greedy tokens bit-identical at budgets of 100 / 75 / 50 / 25 / 0 %
// of the weights, with and without read-ahead, from concurrent passes, and a read error that
// fails a pass without harming the next.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/crc32c.h"
#include "base/file.h"
#include "base/sha256.h"
#include "device/residency.h"
#include "device/weights_cache.h"
#include "device/weights_mirror.h"
#include "host/model.h"
#include "power/runtime.h"
#include "test_util.h"

namespace power {
namespace {

ResidencyTensor tensor(std::string name, uint64_t offset, uint64_t bytes, bool small = false,
                       bool rows = false) {
  ResidencyTensor t;
  t.name = std::move(name);
  t.type = small ? GgmlType::F32 : GgmlType::Q8_0;
  t.shape = {32, static_cast<int64_t>(bytes / 34)};
  t.file_offset = offset;
  t.file_bytes = bytes;
  t.resident_bytes = bytes;
  t.small = small;
  t.rows_only = rows;
  return t;
}

// token_embd (rows, 1000), blocks 0-2 of a norm (10) and two matrices (100 + 100), block 3 of
// a norm and two matrices of 200, the output norm (10) and the output matrix (300):
// 1000 + 3 * 210 + 410 + 10 + 300 = 2350 bytes.
std::vector<ResidencyTensor> toy() {
  std::vector<ResidencyTensor> ts;
  uint64_t off = 0;
  auto add = [&](std::string n, uint64_t b, bool small = false, bool rows = false) {
    ts.push_back(tensor(std::move(n), off, b, small, rows));
    off += b;
  };
  add("token_embd.weight", 1000, false, true);
  for (int i = 0; i < 4; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", 10, true);
    add(p + "attn_q.weight", i == 3 ? 200 : 100);
    add(p + "ffn_up.weight", i == 3 ? 200 : 100);
  }
  add("output_norm.weight", 10, true);
  add("output.weight", 300);
  std::reverse(ts.begin(), ts.end());  // the planner orders by offset itself
  return ts;
}

std::vector<std::string> streamed_names(const ResidencyPlan& p) {
  std::vector<std::string> out;
  for (int g : p.streamed) out.push_back(p.groups[static_cast<size_t>(g)].name);
  return out;
}

TEST(ResidencyPlan, PinsWholeGroupsFromTheFrontThenTheBack) {
  // Everything: 2350 bytes, of which 50 small (5 norms of 10); groups blk.0-2 (200 each),
  // blk.3 (400) and output.weight (300); token_embd is read by rows and charged nothing.
  ResidencyPlan all = plan_residency(toy(), UINT64_MAX, "ab");
  EXPECT_EQ(all.total_bytes, 2350u);
  EXPECT_EQ(all.small_bytes, 50u);
  EXPECT_FALSE(all.streams());
  ASSERT_EQ(all.groups.size(), 5u);
  EXPECT_EQ(all.groups[0].name, "blk.0");
  EXPECT_EQ(all.groups[4].name, "output.weight");
  EXPECT_EQ(plan_residency(toy(), 2350, "ab").streams(), false);
  // 50 + 200 + 200 + 100 left: blk.0 and blk.1 from the front, output (300) does not fit the
  // last 100, so blk.2, blk.3 and output stream.
  ResidencyPlan p = plan_residency(toy(), 550, "ab");
  EXPECT_EQ(streamed_names(p), (std::vector<std::string>{"blk.2", "blk.3", "output.weight"}));
  EXPECT_EQ(p.pinned_bytes, 450u);
  EXPECT_EQ(p.streamed_bytes, 900u);
  EXPECT_EQ(p.streamed_file_bytes, 900u);
  // 50 + 3 * 200 + 300 = 950: three blocks from the front; blk.3 (400) does not fit the 300
  // left, output (300) from the back does.
  ResidencyPlan q = plan_residency(toy(), 950, "ab");
  EXPECT_EQ(streamed_names(q), (std::vector<std::string>{"blk.3"}));
  // Below the small tensors: every group streams, the norms stay.
  ResidencyPlan z = plan_residency(toy(), 0, "ab");
  EXPECT_EQ(z.streamed.size(), 5u);
  EXPECT_EQ(z.pinned_bytes, 50u);
  for (size_t i = 0; i < z.tensors.size(); ++i) {
    const ResidencyTensor& t = z.tensors[i];
    const WeightTier want = t.small       ? WeightTier::kPinned
                            : t.rows_only ? WeightTier::kRows
                                          : WeightTier::kStreamed;
    EXPECT_EQ(z.tier[i], want) << t.name;
    EXPECT_EQ(z.group_of[i] >= 0, want == WeightTier::kStreamed) << t.name;
  }
  // Streamed groups are one run in pass order.
  for (size_t i = 1; i < p.streamed.size(); ++i) EXPECT_EQ(p.streamed[i], p.streamed[i - 1] + 1);
}

// A streamed matrix outside the blocks larger than the largest block (blk.3: 400 bytes) is
// split into pieces of whole groups of 8 rows of at most that size, so that the staging slots
// are sized by a block: an output matrix of 67 rows of 34 bytes (2278) gives 400 / 34 = 11 ->
// 8 rows per piece; the last piece takes the 11 rows left (no piece under 8 rows).
TEST(ResidencyPlan, SplitsAStreamedMatrixLargerThanABlockIntoRowPieces) {
  std::vector<ResidencyTensor> ts = toy();
  ResidencyTensor& out = ts.front();  // toy() is reversed: output.weight first
  ASSERT_EQ(out.name, "output.weight");
  out.file_bytes = out.resident_bytes = 67 * 34;
  out.shape = {32, 67};
  const ResidencyPlan z = plan_residency(ts, 0, "ab");
  std::vector<std::string> want = {"blk.0", "blk.1", "blk.2", "blk.3"};
  for (int r = 0; r < 56; r += 8) {
    want.push_back("output.weight[" + std::to_string(r) + ":" + std::to_string(r + 8) + "]");
  }
  want.push_back("output.weight[56:67]");
  EXPECT_EQ(streamed_names(z), want);
  size_t oi = 0;
  while (z.tensors[oi].name != "output.weight") ++oi;
  EXPECT_EQ(z.pieces[oi], 8);
  EXPECT_EQ(z.group_of[oi], 4);
  uint64_t sum = 0, next = z.tensors[oi].file_offset;
  for (size_t g = 4; g < z.groups.size(); ++g) {
    const ResidencyGroup& piece = z.groups[g];
    EXPECT_EQ(piece.members, std::vector<int>{static_cast<int>(oi)});
    EXPECT_EQ(piece.file_begin, next);  // contiguous, in row order
    EXPECT_EQ(piece.file_end - piece.file_begin,
              static_cast<uint64_t>(piece.row_end - piece.row_begin) * 34);
    next = piece.file_end;
    sum += piece.resident_bytes;
  }
  EXPECT_EQ(next, z.tensors[oi].file_offset + 67 * 34);
  EXPECT_EQ(sum, 67u * 34);
  EXPECT_EQ(z.streamed_bytes, 3u * 200 + 400 + 67 * 34);
  EXPECT_EQ(z.pieces[0], 0);  // not streamed: the output norm (offsets sort it before)
  // Every block pinned: the pieces are sized by the largest block still (staging is one
  // piece's size, not the matrix's).
  const ResidencyPlan b = plan_residency(ts, 50 + 1000, "ab");
  EXPECT_EQ(streamed_names(b), std::vector<std::string>(want.begin() + 4, want.end()));
  EXPECT_EQ(b.pinned_bytes, 1050u);
}

TEST(ResidencyPlan, DigestBindsBudgetAndArtifact) {
  const ResidencyPlan a = plan_residency(toy(), 550, "ab");
  EXPECT_EQ(a.digest.size(), 64u);
  EXPECT_EQ(plan_residency(toy(), 550, "ab").digest, a.digest);
  EXPECT_NE(plan_residency(toy(), 551, "ab").digest, a.digest);
  EXPECT_NE(plan_residency(toy(), 550, "cd").digest, a.digest);
  const nlohmann::json j = a.to_json();
  EXPECT_EQ(j["schema"], "power.residency-plan/1");
  EXPECT_EQ(j["digest"], a.digest);
  EXPECT_EQ(j["tensors"].size(), 15u);
  EXPECT_NE(a.to_text().find("blk.2                    streamed"), std::string::npos)
      << a.to_text();
}

TEST(ResidencyPlan, BudgetStrings) {
  auto b = parse_weights_budget("50%");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->resolve(1000), 500u);
  EXPECT_EQ(parse_weights_budget("0%")->resolve(1000), 0u);
  EXPECT_EQ(parse_weights_budget("100%")->resolve(1000), 1000u);
  EXPECT_EQ(parse_weights_budget("12.5%")->resolve(1000), 125u);
  EXPECT_EQ(parse_weights_budget("123456")->resolve(1), 123456u);
  EXPECT_EQ(parse_weights_budget("800M")->resolve(1), 800000000u);
  EXPECT_EQ(parse_weights_budget("1.5GiB")->resolve(1), 1610612736u);
  EXPECT_EQ(parse_weights_budget(" 2 kib ")->resolve(1), 2048u);
  EXPECT_EQ(WeightsBudget{}.resolve(5), UINT64_MAX);
  for (const char* bad : {"", "%", "-5", "101%", "12Q", "1e5", "abc", "5%%"}) {
    auto r = parse_weights_budget(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << bad;
    }
  }
}

struct PassResult {
  std::vector<float> logits;    // all positions of the 48 fixture tokens
  std::vector<int32_t> greedy;  // 16 prompt tokens, then 24 greedy ones
};

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

// `mirror_dir`: a partial mirror there (bound to the file's real digest).
Result<std::unique_ptr<Model>> open_model(const std::string& path, const std::string& budget,
                                          int prefetch, const std::string& mirror_dir = "",
                                          uint64_t mirror_bytes = UINT64_MAX, bool mlock = false) {
  POWER_ASSIGN_OR_RETURN(auto f, GgufFile::open(path));
  LoadModelOptions o;
  o.mlock = mlock;
  if (!budget.empty()) {
    POWER_ASSIGN_OR_RETURN(o.weights_budget, parse_weights_budget(budget));
  }
  o.prefetch = prefetch;
  o.sha256 = "00";
  if (!mirror_dir.empty()) {
    POWER_ASSIGN_OR_RETURN(Sha256Digest d, sha256_file(path));
    o.sha256 = to_hex(d);
    o.mirror_dir = mirror_dir;
    o.mirror_bytes = mirror_bytes;
  }
  return load_model(std::shared_ptr<const GgufFile>(std::move(f)), o);
}

PassResult run_model(const Model& m, const std::vector<int32_t>& tokens) {
  PassResult r;
  const int64_t n_vocab = m.hparams().n_vocab;
  auto ws = m.make_workspace(64, 256, 2);
  EXPECT_TRUE(ws.ok());
  auto kv = KvCache::create(m.kv_config(256, 2, GgmlType::F32));
  EXPECT_TRUE(kv.ok());
  std::unique_ptr<RecurrentState> state;
  {
    KvSequence seq(kv->get());
    EXPECT_TRUE(m.attach_state(seq, state).ok());
    ForwardChunk chunk{&seq, tokens, true};
    r.logits.resize(tokens.size() * static_cast<size_t>(n_vocab));
    Status st = m.forward(**ws, std::span<const ForwardChunk>(&chunk, 1), r.logits.data());
    EXPECT_TRUE(st.ok()) << st.to_string();
  }
  std::unique_ptr<RecurrentState> state2;  // outlives the sequence holding its slot
  KvSequence seq(kv->get());
  EXPECT_TRUE(m.attach_state(seq, state2).ok());
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 16);
  ForwardChunk chunk{&seq, prompt, false};
  EXPECT_TRUE(m.forward(**ws, std::span<const ForwardChunk>(&chunk, 1), logits.data()).ok());
  for (int i = 0; i < 24; ++i) {
    const int32_t next = argmax(logits.data(), n_vocab);
    r.greedy.push_back(next);
    std::vector<int32_t> one{next};
    ForwardChunk c{&seq, one, false};
    EXPECT_TRUE(m.forward(**ws, std::span<const ForwardChunk>(&c, 1), logits.data()).ok());
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<std::string> fixture_models() {
  std::vector<std::string> out;
  const std::string root = testing::shared_dir() + "/fixtures/models";
  // (gpt2 is the SDK example's plugin, not a built-in package.)
  for (const char* arch : {"llama", "qwen2", "qwen3", "phi3", "mamba"}) {
    const std::string dir = root + "/" + arch;
    if (!std::filesystem::exists(dir)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() == ".gguf") out.push_back(e.path().string());
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// Every fixture model, every budget, with and without read-ahead: the same bits as the model
// with all weights resident.
TEST(ResidencyModels, LogitsAndGreedyTokensAreBitIdenticalAtEveryBudget) {
  POWER_REQUIRE_SHARED();
  const std::vector<std::string> models = fixture_models();
  ASSERT_GE(models.size(), 10u);
  int streamed_runs = 0;
  for (const std::string& path : models) {
    SCOPED_TRACE(path);
    const auto tokens =
        testing::read_ids(std::filesystem::path(path).parent_path().string() + "/tokens.txt");
    ASSERT_EQ(tokens.size(), 48u);
    auto ref_model = open_model(path, "", 2);
    ASSERT_TRUE(ref_model.ok()) << ref_model.status().to_string();
    EXPECT_FALSE((*ref_model)->residency().streams());
    EXPECT_EQ((*ref_model)->streamer(), nullptr);
    const PassResult ref = run_model(**ref_model, tokens);
    for (const char* budget : {"100%", "75%", "50%", "25%", "0%"}) {
      for (int prefetch : {0, 2}) {
        SCOPED_TRACE(std::string(budget) + " prefetch " + std::to_string(prefetch));
        auto m = open_model(path, budget, prefetch);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        const ResidencyPlan& plan = (*m)->residency();
        EXPECT_EQ(plan.streams(), std::string(budget) != "100%");
        if (std::string(budget) == "0%") {
          EXPECT_EQ(plan.pinned_bytes, plan.small_bytes);
          EXPECT_EQ(plan.streamed.size(), plan.groups.size());
        }
        const PassResult got = run_model(**m, tokens);
        EXPECT_TRUE(same_bits(got.logits, ref.logits));
        EXPECT_EQ(got.greedy, ref.greedy);
        if (plan.streams()) {
          ++streamed_runs;
          const StreamStats s = (*m)->streamer()->stats();
          EXPECT_GT(s.loads, 0u);
          EXPECT_GE(s.bytes_read, plan.streamed_file_bytes);
          EXPECT_EQ(s.read_errors, 0u);
          if (prefetch == 0) {
            EXPECT_EQ(s.prefetch_loads, 0u);
          }
        }
      }
    }
  }
  EXPECT_GE(streamed_runs, 40);
}

// POWER_DIRECT_IO=1: reads around the page cache (O_DIRECT, 4 KiB-aligned spans into the read
// buffer) where the filesystem allows it, else the buffered path; the same bits either way.
TEST(ResidencyModels, DirectReadsGiveTheSameBits) {
  POWER_REQUIRE_SHARED();
  const std::string root = testing::shared_dir() + "/fixtures/models";
  for (const char* path : {"/llama/llama-Q8_0.gguf", "/qwen3/qwen3-Q4_K_M.gguf"}) {
    SCOPED_TRACE(path);
    const std::string file = root + path;
    if (!std::filesystem::exists(file)) continue;
    const auto tokens =
        testing::read_ids(std::filesystem::path(file).parent_path().string() + "/tokens.txt");
    auto ref_model = open_model(file, "", 2);
    ASSERT_TRUE(ref_model.ok()) << ref_model.status().to_string();
    const PassResult ref = run_model(**ref_model, tokens);
    ::setenv("POWER_DIRECT_IO", "1", 1);
    for (const char* budget : {"50%", "0%"}) {
      auto m = open_model(file, budget, 2);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const PassResult got = run_model(**m, tokens);
      EXPECT_TRUE(same_bits(got.logits, ref.logits)) << budget;
      EXPECT_EQ(got.greedy, ref.greedy) << budget;
      std::printf("  %s at %s: direct reads %s\n", path, budget,
                  (*m)->streamer()->stats().direct_io ? "yes" : "no (filesystem refused)");
    }
    ::unsetenv("POWER_DIRECT_IO");
  }
}

// Passes of two threads share one streamer (one model, two workspaces): same bits.
TEST(ResidencyModels, ConcurrentPassesShareTheStreamer) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::shared_dir() + "/fixtures/models/llama";
  const auto tokens = testing::read_ids(dir + "/tokens.txt");
  auto ref_model = open_model(dir + "/llama-Q4_0.gguf", "", 2);
  ASSERT_TRUE(ref_model.ok());
  const PassResult ref = run_model(**ref_model, tokens);
  auto m = open_model(dir + "/llama-Q4_0.gguf", "25%", 1);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE((*m)->residency().streams());
  std::vector<PassResult> got(4);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = run_model(**m, tokens); });
  }
  for (auto& t : threads) t.join();
  for (const PassResult& r : got) {
    EXPECT_TRUE(same_bits(r.logits, ref.logits));
    EXPECT_EQ(r.greedy, ref.greedy);
  }
}

// The artifact cut short under a streaming model: the pass that needs the missing bytes fails
// with the reason, and once the file is whole again the next pass gives the same bits.
TEST(ResidencyModels, ReadErrorFailsThePassNotTheModel) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::shared_dir() + "/fixtures/models/llama";
  const auto tokens = testing::read_ids(dir + "/tokens.txt");
  const std::string tmp = testing::make_temp_dir("power_residency");
  const std::string path = tmp + "/llama-Q8_0.gguf";
  std::filesystem::copy_file(dir + "/llama-Q8_0.gguf", path);
  const uint64_t size = std::filesystem::file_size(path);
  auto ref_model = open_model(path, "", 0);
  ASSERT_TRUE(ref_model.ok());
  const PassResult ref = run_model(**ref_model, tokens);
  auto m = open_model(path, "0%", 0);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto saved = read_file(path);
  ASSERT_TRUE(saved.ok());
  // Cut inside the streamed group that ends the file (blk.1 here; the output matrix comes
  // first in these files): its read comes up short. Nothing after the cut is read through the
  // mapping (that would be SIGBUS): the block's vectors were copied at load.
  const ResidencyPlan& plan = (*m)->residency();
  const ResidencyGroup* lastp = nullptr;
  for (int g : plan.streamed) {
    const ResidencyGroup& grp = plan.groups[static_cast<size_t>(g)];
    if (lastp == nullptr || grp.file_begin > lastp->file_begin) lastp = &grp;
  }
  ASSERT_NE(lastp, nullptr);
  const ResidencyGroup& last = *lastp;
  ASSERT_EQ(last.name, "blk.1");
  ASSERT_EQ(::truncate(path.c_str(), static_cast<off_t>(last.file_begin + 100)), 0);
  {
    auto ws = (*m)->make_workspace(64, 256, 1);
    ASSERT_TRUE(ws.ok());
    auto kv = KvCache::create((*m)->kv_config(256, 1, GgmlType::F32));
    ASSERT_TRUE(kv.ok());
    KvSequence seq(kv->get());
    ForwardChunk chunk{&seq, tokens, true};
    std::vector<float> logits(tokens.size() * static_cast<size_t>((*m)->hparams().n_vocab));
    Status st = (*m)->forward(**ws, std::span<const ForwardChunk>(&chunk, 1), logits.data());
    EXPECT_EQ(st.code(), StatusCode::kCorrupt) << st.to_string();
    EXPECT_NE(st.to_string().find("short read"), std::string::npos) << st.to_string();
    EXPECT_NE(st.to_string().find("group=blk.1"), std::string::npos) << st.to_string();
  }
  EXPECT_GT((*m)->streamer()->stats().read_errors, 0u);
  // The bytes written back into the same file: the same model's next pass reads them.
  {
    UniqueFd fd(::open(path.c_str(), O_WRONLY | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    const uint64_t from = last.file_begin + 100;
    ASSERT_EQ(::pwrite(fd.get(), saved->data() + from, size - from, static_cast<off_t>(from)),
              static_cast<ssize_t>(size - from));
  }
  ASSERT_EQ(std::filesystem::file_size(path), size);
  const PassResult got = run_model(**m, tokens);
  EXPECT_TRUE(same_bits(got.logits, ref.logits));
  EXPECT_EQ(got.greedy, ref.greedy);
  testing::remove_tree(tmp);
}

// CRC-32C against its published check value and the table version on odd lengths.
TEST(WeightsMirror, Crc32cMatchesTheCheckValue) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_portable("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<uint8_t> bytes(4099);
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  for (size_t n : {1u, 7u, 8u, 9u, 63u, 4099u}) {
    EXPECT_EQ(crc32c(bytes.data(), n), crc32c_portable(bytes.data(), n)) << n;
  }
  // Three chains at once equal three single calls.
  const uint8_t* blocks[3] = {bytes.data(), bytes.data() + 1, bytes.data() + 2};
  for (size_t n : {0u, 5u, 8u, 4000u, 4097u}) {
    uint32_t got[3];
    crc32c_x3(blocks, n, got);
    for (int i = 0; i < 3; ++i) EXPECT_EQ(got[i], crc32c_portable(blocks[i], n)) << n << " " << i;
  }
  // Continued over two parts equals one call.
  EXPECT_EQ(crc32c(bytes.data() + 1000, 3099, crc32c(bytes.data(), 1000)),
            crc32c(bytes.data(), bytes.size()));
}

// A mirror's cap takes a budget's byte units (1.5 x 2^30 for 1.5GiB), no percentage.
TEST(WeightsMirror, ByteCapStrings) {
  EXPECT_EQ(*parse_mirror_bytes(""), UINT64_MAX);
  EXPECT_EQ(*parse_mirror_bytes("1.5GiB"), 1610612736u);
  EXPECT_EQ(*parse_mirror_bytes("20G"), 20000000000u);
  auto pct = parse_mirror_bytes("50%");
  ASSERT_FALSE(pct.ok());
  EXPECT_EQ(pct.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(parse_mirror_bytes("lots").ok());
}

// The artifact's bytes at [offset, offset + n).
std::vector<uint8_t> artifact_bytes(const std::string& path, uint64_t offset, uint64_t n) {
  std::vector<uint8_t> out(n);
  UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  EXPECT_TRUE(fd.valid());
  EXPECT_EQ(::pread(fd.get(), out.data(), n, static_cast<off_t>(offset)), static_cast<ssize_t>(n));
  return out;
}

// Mirrors at 50 % and 0 %, with and without read-ahead, on fixture models of four
// architectures and three weight types: the first load builds it, later loads reuse it; the
// streamer reads every streamed group from it and none from the artifact; the bits are those
// of the resident model. The mirror's data is the artifact's bytes, and its per-tensor
// manifest holds each tensor's SHA-256 as computed here from the file.
TEST(ResidencyModels, MirrorsServeTheSameBitsAndHoldTheArtifactsBytes) {
  POWER_REQUIRE_SHARED();
  const std::string root = testing::shared_dir() + "/fixtures/models";
  const std::string tmp = testing::make_temp_dir("power_mirror");
  int checked = 0;
  for (const char* rel : {"/llama/llama-Q8_0.gguf", "/qwen3/qwen3-Q4_K_M.gguf",
                          "/phi3/phi3-Q4_K_M.gguf", "/mamba/mamba-F32.gguf"}) {
    const std::string path = root + rel;
    if (!std::filesystem::exists(path)) continue;
    SCOPED_TRACE(path);
    const auto tokens =
        testing::read_ids(std::filesystem::path(path).parent_path().string() + "/tokens.txt");
    auto ref_model = open_model(path, "", 2);
    ASSERT_TRUE(ref_model.ok()) << ref_model.status().to_string();
    const PassResult ref = run_model(**ref_model, tokens);
    const std::string dir = tmp + "/mirror";
    bool built = false;
    for (const char* budget : {"0%", "50%"}) {
      for (int prefetch : {0, 2}) {
        SCOPED_TRACE(std::string(budget) + " prefetch " + std::to_string(prefetch));
        auto m = open_model(path, budget, prefetch, dir);
        ASSERT_TRUE(m.ok()) << m.status().to_string();
        const WeightsMirror* mirror = (*m)->mirror();
        ASSERT_NE(mirror, nullptr);
        EXPECT_EQ(mirror->built_now(), !built);  // built once (at 0 %: everything), then reused
        built = true;
        const PassResult got = run_model(**m, tokens);
        EXPECT_TRUE(same_bits(got.logits, ref.logits));
        EXPECT_EQ(got.greedy, ref.greedy);
        const StreamStats s = (*m)->streamer()->stats();
        EXPECT_GT(s.mirror_loads, 0u);
        EXPECT_EQ(s.mirror_loads, s.loads);
        EXPECT_GE(s.mirror_bytes_read, (*m)->residency().streamed_file_bytes);
        EXPECT_EQ(s.bytes_read, 0u);
        EXPECT_EQ(s.mirror_fallbacks, 0u);
      }
    }
    auto m = open_model(path, "0%", 0, dir);
    ASSERT_TRUE(m.ok());
    const WeightsMirror& mirror = *(*m)->mirror();
    ASSERT_FALSE(mirror.ranges().empty());
    const auto data = read_file(mirror.data_path());
    ASSERT_TRUE(data.ok());
    for (const WeightsMirror::Range& r : mirror.ranges()) {
      const auto want = artifact_bytes(path, r.begin, r.end - r.begin);
      ASSERT_LE(r.data_offset + want.size(), data->size());
      EXPECT_EQ(std::memcmp(data->data() + r.data_offset, want.data(), want.size()), 0);
      EXPECT_EQ(r.sha256, to_hex(sha256(want.data(), want.size())));
    }
    const ResidencyPlan& plan = (*m)->residency();
    ASSERT_EQ(mirror.tensors().size(), plan.tensors.size());
    for (const TensorDigest& t : mirror.tensors()) {
      const auto want = artifact_bytes(path, t.offset, t.length);
      EXPECT_EQ(t.sha256, to_hex(sha256(want.data(), want.size()))) << t.name;
    }
    ++checked;
    testing::remove_tree(dir);
  }
  EXPECT_GE(checked, 3);
  testing::remove_tree(tmp);
}

// One flipped byte in the mirror: the read that covers it fails its checksum, the group is
// read from the artifact (counted), and the bits do not change. A mirror cut short: the same
// through a short read.
TEST(ResidencyModels, ACorruptMirrorIsDetectedAndServedFromTheArtifact) {
  POWER_REQUIRE_SHARED();
  const std::string path = testing::shared_dir() + "/fixtures/models/llama/llama-Q8_0.gguf";
  const auto tokens =
      testing::read_ids(testing::shared_dir() + "/fixtures/models/llama/tokens.txt");
  const std::string tmp = testing::make_temp_dir("power_mirror");
  auto ref_model = open_model(path, "", 2);
  ASSERT_TRUE(ref_model.ok());
  const PassResult ref = run_model(**ref_model, tokens);
  std::string data_path;
  uint64_t data_size = 0;
  {
    auto m = open_model(path, "0%", 2, tmp);
    ASSERT_TRUE(m.ok());
    ASSERT_NE((*m)->mirror(), nullptr);
    data_path = (*m)->mirror()->data_path();
    data_size = std::filesystem::file_size(data_path);
  }
  ::chmod(data_path.c_str(), 0644);
  {
    UniqueFd fd(::open(data_path.c_str(), O_RDWR | O_CLOEXEC));
    ASSERT_TRUE(fd.valid());
    uint8_t b = 0;
    ASSERT_EQ(::pread(fd.get(), &b, 1, static_cast<off_t>(data_size / 2)), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd.get(), &b, 1, static_cast<off_t>(data_size / 2)), 1);
  }
  {
    auto m = open_model(path, "0%", 2, tmp);
    ASSERT_TRUE(m.ok());
    ASSERT_NE((*m)->mirror(), nullptr);
    EXPECT_FALSE((*m)->mirror()->built_now());  // published mirrors are never rebuilt
    const PassResult got = run_model(**m, tokens);
    EXPECT_TRUE(same_bits(got.logits, ref.logits));
    EXPECT_EQ(got.greedy, ref.greedy);
    const StreamStats s = (*m)->streamer()->stats();
    EXPECT_GE(s.mirror_fallbacks, 1u);  // every pass that reads that group
    EXPECT_GT(s.bytes_read, 0u);
    EXPECT_GT(s.mirror_loads, 0u);
    EXPECT_EQ(s.read_errors, 0u);
  }
  ASSERT_EQ(::truncate(data_path.c_str(), static_cast<off_t>(data_size / 3)), 0);
  {
    auto m = open_model(path, "0%", 0, tmp);
    ASSERT_TRUE(m.ok());
    const PassResult got = run_model(**m, tokens);
    EXPECT_TRUE(same_bits(got.logits, ref.logits));
    EXPECT_EQ(got.greedy, ref.greedy);
    const StreamStats s = (*m)->streamer()->stats();
    EXPECT_GE(s.mirror_fallbacks, 1u);
    EXPECT_EQ(s.read_errors, 0u);
  }
  testing::remove_tree(tmp);
}

// A byte cap: the mirror holds whole groups, the streamed ones first in pass order, no more
// bytes than the cap; the groups it lacks come from the artifact; same bits. An index that
// cannot be read leaves the model streaming from the artifact (warned), never rewritten.
TEST(ResidencyModels, AMirrorCapKeepsTheFirstStreamedGroupsAndABadIndexIsLeftAlone) {
  POWER_REQUIRE_SHARED();
  const std::string path = testing::shared_dir() + "/fixtures/models/qwen3/qwen3-Q4_K_M.gguf";
  const auto tokens =
      testing::read_ids(testing::shared_dir() + "/fixtures/models/qwen3/tokens.txt");
  const std::string tmp = testing::make_temp_dir("power_mirror");
  auto ref_model = open_model(path, "", 2);
  ASSERT_TRUE(ref_model.ok());
  const PassResult ref = run_model(**ref_model, tokens);
  auto probe = open_model(path, "0%", 0);
  ASSERT_TRUE(probe.ok());
  const ResidencyPlan& plan = (*probe)->residency();
  ASSERT_GE(plan.streamed.size(), 3u);
  auto span_of = [&](size_t i) {
    const ResidencyGroup& g = plan.groups[static_cast<size_t>(plan.streamed[i])];
    return g.file_end - g.file_begin;
  };
  const uint64_t cap = span_of(0) + span_of(1);
  auto m = open_model(path, "0%", 1, tmp, cap);
  ASSERT_TRUE(m.ok());
  const WeightsMirror& mirror = *(*m)->mirror();
  EXPECT_LE(mirror.data_bytes(), cap);
  for (size_t i = 0; i < plan.streamed.size(); ++i) {
    const ResidencyGroup& g = plan.groups[static_cast<size_t>(plan.streamed[i])];
    EXPECT_EQ(mirror.covers(g.file_begin, g.file_end), i < 2) << g.name;
  }
  const PassResult got = run_model(**m, tokens);
  EXPECT_TRUE(same_bits(got.logits, ref.logits));
  EXPECT_EQ(got.greedy, ref.greedy);
  const StreamStats s = (*m)->streamer()->stats();
  EXPECT_GT(s.mirror_loads, 0u);
  EXPECT_GT(s.bytes_read, 0u);
  EXPECT_EQ(s.mirror_fallbacks, 0u);

  const std::string index = mirror.dir() + "/index.json";
  ASSERT_EQ(::chmod(index.c_str(), 0644), 0);
  ASSERT_TRUE(write_file_atomic(index, std::string_view("{\"schema\": 7")).ok());
  auto bad = open_model(path, "0%", 1, tmp, cap);
  ASSERT_TRUE(bad.ok()) << bad.status().to_string();
  EXPECT_EQ((*bad)->mirror(), nullptr);
  const PassResult got2 = run_model(**bad, tokens);
  EXPECT_TRUE(same_bits(got2.logits, ref.logits));
  auto text = read_file_text(index);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(*text, "{\"schema\": 7");
  testing::remove_tree(tmp);
}

// Two loads at once build one mirror: the directory lock lets one build while the other
// waits and then reads the published index.
TEST(ResidencyModels, ConcurrentLoadsBuildOneMirror) {
  POWER_REQUIRE_SHARED();
  const std::string path = testing::shared_dir() + "/fixtures/models/llama/llama-Q4_0.gguf";
  const std::string tmp = testing::make_temp_dir("power_mirror");
  std::vector<Result<std::unique_ptr<Model>>> got;
  for (int i = 0; i < 3; ++i) got.emplace_back(Status(StatusCode::kInternal, "not run"));
  std::vector<std::thread> threads;
  for (size_t i = 0; i < got.size(); ++i) {
    threads.emplace_back([&, i] { got[i] = open_model(path, "25%", 1, tmp); });
  }
  for (auto& t : threads) t.join();
  int built = 0;
  for (auto& m : got) {
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    ASSERT_NE((*m)->mirror(), nullptr);
    built += (*m)->mirror()->built_now() ? 1 : 0;
    EXPECT_EQ((*m)->mirror()->data_bytes(), (*got[0])->mirror()->data_bytes());
  }
  EXPECT_EQ(built, 1);
  size_t entries = 0;
  for (const auto& e : std::filesystem::directory_iterator((*got[0])->mirror()->dir())) {
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
    ++entries;
  }
  EXPECT_EQ(entries, 3u);  // .lock, data, index.json
  testing::remove_tree(tmp);
}

// The bytes of `plan`'s streamed groups.
uint64_t streamed_span_bytes(const ResidencyPlan& plan) {
  uint64_t n = 0;
  for (int g : plan.streamed) {
    n += plan.groups[static_cast<size_t>(g)].file_end -
         plan.groups[static_cast<size_t>(g)].file_begin;
  }
  return n;
}

// A mirror built at 50 % under a cap the 50 % plan's streamed groups fill: a load at 0 % under
// the same cap gains nothing and reuses it; a load at 0 % with no cap grows it to generation 2,
// which holds every group, byte for byte the artifact's; generation 1's files are gone, yet the
// model opened on it keeps reading it through its descriptor; bits never change. A load under
// the small cap again reuses generation 2 (a mirror never shrinks).
TEST(ResidencyModels, AMirrorGrowsWhenALaterLoadStreamsMore) {
  POWER_REQUIRE_SHARED();
  const std::string path = testing::shared_dir() + "/fixtures/models/llama/llama-Q8_0.gguf";
  const auto tokens =
      testing::read_ids(testing::shared_dir() + "/fixtures/models/llama/tokens.txt");
  const std::string tmp = testing::make_temp_dir("power_mirror");
  auto ref_model = open_model(path, "", 2);
  ASSERT_TRUE(ref_model.ok());
  const PassResult ref = run_model(**ref_model, tokens);

  auto probe = open_model(path, "50%", 0);
  ASSERT_TRUE(probe.ok());
  const uint64_t cap = streamed_span_bytes((*probe)->residency());
  ASSERT_GT(cap, 0u);
  auto half = open_model(path, "50%", 1, tmp, cap);
  ASSERT_TRUE(half.ok()) << half.status().to_string();
  ASSERT_NE((*half)->mirror(), nullptr);
  const WeightsMirror& first = *(*half)->mirror();
  EXPECT_TRUE(first.built_now());
  EXPECT_EQ(first.generation(), 1);
  EXPECT_EQ(first.data_bytes(), cap);
  const std::string dir = first.dir();
  EXPECT_EQ(first.data_path(), dir + "/data");
  const ResidencyPlan& half_plan = (*half)->residency();

  auto full = open_model(path, "0%", 1, tmp, cap);
  ASSERT_TRUE(full.ok());
  ASSERT_NE((*full)->mirror(), nullptr);
  EXPECT_FALSE((*full)->mirror()->built_now());
  EXPECT_EQ((*full)->mirror()->generation(), 1);
  {
    const PassResult got = run_model(**full, tokens);
    EXPECT_TRUE(same_bits(got.logits, ref.logits));
    const StreamStats s = (*full)->streamer()->stats();
    EXPECT_GT(s.mirror_loads, 0u);
    EXPECT_GT(s.bytes_read, 0u);  // the half the mirror lacks
  }

  auto all = open_model(path, "0%", 1, tmp);
  ASSERT_TRUE(all.ok()) << all.status().to_string();
  ASSERT_NE((*all)->mirror(), nullptr);
  const WeightsMirror& grown = *(*all)->mirror();
  EXPECT_TRUE(grown.built_now());
  EXPECT_EQ(grown.generation(), 2);
  EXPECT_EQ(grown.data_path(), dir + "/data.2");
  EXPECT_GT(grown.data_bytes(), first.data_bytes());
  const ResidencyPlan& all_plan = (*all)->residency();
  for (const ResidencyGroup& grp : all_plan.groups) {
    EXPECT_TRUE(grown.covers(grp.file_begin, grp.file_end)) << grp.name;
  }
  EXPECT_FALSE(std::filesystem::exists(dir + "/data"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/index.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/index.2.json"));
  const auto data = read_file(grown.data_path());
  ASSERT_TRUE(data.ok());
  for (const WeightsMirror::Range& r : grown.ranges()) {
    const auto want = artifact_bytes(path, r.begin, r.end - r.begin);
    ASSERT_LE(r.data_offset + want.size(), data->size());
    EXPECT_EQ(std::memcmp(data->data() + r.data_offset, want.data(), want.size()), 0);
  }
  EXPECT_EQ(grown.tensors().size(), first.tensors().size());

  for (auto* m : {&half, &all}) {
    const PassResult got = run_model(***m, tokens);
    EXPECT_TRUE(same_bits(got.logits, ref.logits));
    EXPECT_EQ(got.greedy, ref.greedy);
    const StreamStats s = (**m)->streamer()->stats();
    EXPECT_GT(s.mirror_loads, 0u);
    EXPECT_EQ(s.mirror_loads, s.loads);
    EXPECT_EQ(s.bytes_read, 0u);
    EXPECT_EQ(s.mirror_fallbacks, 0u);
  }
  EXPECT_FALSE(half_plan.streamed.empty());
  auto again = open_model(path, "50%", 1, tmp, cap);
  ASSERT_TRUE(again.ok());
  ASSERT_NE((*again)->mirror(), nullptr);
  EXPECT_FALSE((*again)->mirror()->built_now());
  EXPECT_EQ((*again)->mirror()->generation(), 2);
  testing::remove_tree(tmp);
}

}  // namespace
}  // namespace power

namespace power {
namespace {

// VmLck of this process, in bytes.
uint64_t locked_kb_bytes() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  uint64_t kb = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::sscanf(line, "VmLck: %lu kB", &kb) == 1) break;
  }
  std::fclose(f);
  return kb * 1024;
}

// LoadModelOptions::mlock locks what the kernels read: at 100 % every weight (the mapping's
// rows, packed copies), under a budget the pinned ones and the staging slots. The process's
// VmLck holds at least what the model says it locked, and the bits do not change.
TEST(ResidencyModels, MlockLocksWhatTheKernelsRead) {
  POWER_REQUIRE_SHARED();
  const std::string root = testing::shared_dir() + "/fixtures/models";
  for (const char* rel : {"/llama/llama-Q8_0.gguf", "/mamba/mamba-F32.gguf"}) {
    const std::string path = root + rel;
    SCOPED_TRACE(path);
    const auto tokens =
        testing::read_ids(std::filesystem::path(path).parent_path().string() + "/tokens.txt");
    auto plain = open_model(path, "", 2);
    ASSERT_TRUE(plain.ok()) << plain.status().to_string();
    const PassResult ref = run_model(**plain, tokens);
    EXPECT_EQ((*plain)->locked_weight_bytes(), 0u);
    for (const char* budget : {"", "50%", "0%"}) {
      SCOPED_TRACE(std::string("budget ") + budget);
      auto m = open_model(path, budget, 2, "", UINT64_MAX, true);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      const Model& model = **m;
      if (!model.lock_status().ok() && ::geteuid() != 0) {
        GTEST_SKIP() << "RLIMIT_MEMLOCK is too low here: " << model.lock_status().to_string();
      }
      ASSERT_TRUE(model.lock_status().ok()) << model.lock_status().to_string();
      const uint64_t locked = model.locked_weight_bytes();
      EXPECT_EQ(locked, model.lockable_weight_bytes());
      EXPECT_GE(locked_kb_bytes(), locked);
      const ResidencyPlan& plan = model.residency();
      // What the plan keeps resident (every weight at 100 %; the pinned ones and the staging
      // slots under a budget), each region rounded out to whole pages at most.
      const uint64_t want =
          plan.streams() ? plan.pinned_bytes + model.streamer()->staging_bytes() : plan.total_bytes;
      const uint64_t slack = 2 * 4096 * (plan.tensors.size() + 8);
      std::fprintf(stderr, "%s budget '%s': %lu bytes locked, plan resident %lu\n", rel, budget,
                   static_cast<unsigned long>(locked), static_cast<unsigned long>(want));
      EXPECT_GE(locked, want);
      EXPECT_LE(locked, want + slack);
      const PassResult got = run_model(model, tokens);
      ASSERT_EQ(got.logits.size(), ref.logits.size());
      EXPECT_EQ(std::memcmp(got.logits.data(), ref.logits.data(), ref.logits.size() * 4), 0);
      EXPECT_EQ(got.greedy, ref.greedy);
    }
  }
}

}  // namespace
}  // namespace power

namespace power {
namespace {

// The weights cache's policies (device/weights_cache.h), by arithmetic on small pieces.
constexpr uint64_t kPiece = 64;

std::vector<uint8_t> piece_of(uint64_t item) {
  std::vector<uint8_t> p(kPiece);
  for (uint64_t i = 0; i < kPiece; ++i) p[i] = static_cast<uint8_t>(item * 131 + i * 7);
  return p;
}

// One access the way CachedRows does it: a hit's bytes are checked, a miss offers the piece.
bool access(WeightsCache& c, uint64_t item) {
  std::vector<uint8_t> got(kPiece);
  const std::vector<uint8_t> want = piece_of(item);
  if (c.lookup(1, item, got.data(), kPiece)) {
    EXPECT_EQ(got, want) << "item " << item;
    return true;
  }
  c.offer(1, item, want.data(), kPiece);
  return false;
}

TEST(WeightsCache, PolicyNames) {
  EXPECT_EQ(*parse_cache_policy("lfru"), CachePolicy::kLfru);
  EXPECT_EQ(*parse_cache_policy("lru"), CachePolicy::kLru);
  for (const char* bad : {"", "LFRU", "lfu", "arc"}) {
    auto p = parse_cache_policy(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
  }
}

// Four pieces used ten times each, then a scan of 1000 pieces used once, through a cache of 8
// pieces: under lfru the four are still held (a once-used piece has heat 1, each of them 10,
// so admission refuses to evict them); under lru the scan wiped them.
TEST(WeightsCache, ACyclicScanDoesNotWipeHotPiecesUnderLfru) {
  for (CachePolicy policy : {CachePolicy::kLfru, CachePolicy::kLru}) {
    SCOPED_TRACE(std::string(cache_policy_name(policy)));
    WeightsCache c(8 * kPiece, policy);
    for (int round = 0; round < 10; ++round) {
      for (uint64_t hot = 0; hot < 4; ++hot) EXPECT_EQ(access(c, hot), round > 0);
    }
    for (uint64_t cold = 100; cold < 1100; ++cold) {
      EXPECT_FALSE(access(c, cold));
      EXPECT_LE(c.stats().bytes, 8 * kPiece);
    }
    int hot_hits = 0;
    for (uint64_t hot = 0; hot < 4; ++hot) hot_hits += access(c, hot) ? 1 : 0;
    const WeightsCacheStats s = c.stats();
    EXPECT_EQ(s.hits + s.misses, 40u + 1000u + 4u);
    if (policy == CachePolicy::kLfru) {
      EXPECT_EQ(hot_hits, 4);
      EXPECT_GT(s.rejected, 0u);
    } else {
      EXPECT_EQ(hot_hits, 0);
      EXPECT_EQ(s.rejected, 0u);
      EXPECT_EQ(s.evictions, 1000u - 4u + 4u);  // the scan fills 4 free slots, then evicts
    }
  }
}

// heat = accesses (the first one counted by the sketch), halved every 4096 accesses; score =
// heat * 256 + 255 - min(age / 16, 255).
TEST(WeightsCache, HeatAndScoreFollowTheFormula) {
  WeightsCache c(64 * kPiece, CachePolicy::kLfru);
  EXPECT_FALSE(access(c, 7));  // clock 1: a miss, admitted with heat 1
  EXPECT_EQ(*c.heat(1, 7), 1u);
  EXPECT_EQ(*c.score(1, 7), 1u * 256 + 255);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(access(c, 7));  // clock 5
  EXPECT_EQ(*c.heat(1, 7), 5u);
  EXPECT_EQ(*c.score(1, 7), 5u * 256 + 255);
  std::vector<uint8_t> scratch(kPiece);
  for (int i = 0; i < 32; ++i) c.lookup(1, 99, scratch.data(), kPiece);  // clock 37: age 32
  EXPECT_EQ(*c.score(1, 7), 5u * 256 + 255 - 2);
  for (uint64_t t = 37; t < WeightsCache::kHalvingPeriod; ++t) {
    c.lookup(1, 99, scratch.data(), kPiece);
  }
  // Clock 4096: heat 5 -> 2; age 4091 accesses, 255 units at most.
  EXPECT_EQ(*c.heat(1, 7), 2u);
  EXPECT_EQ(*c.score(1, 7), 2u * 256 + 0);
  EXPECT_FALSE(c.heat(1, 99).has_value());  // looked up, never offered
}

// A cache of one piece holding a piece of heat 3: a piece seen once is refused; seen five
// times, it is hotter and evicts it.
TEST(WeightsCache, AdmissionComparesScores) {
  WeightsCache c(kPiece, CachePolicy::kLfru);
  for (int i = 0; i < 3; ++i) access(c, 1);
  EXPECT_FALSE(access(c, 2));
  EXPECT_EQ(c.stats().rejected, 1u);
  EXPECT_TRUE(c.heat(1, 1).has_value());
  std::vector<uint8_t> scratch(kPiece);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(c.lookup(1, 2, scratch.data(), kPiece));
  EXPECT_FALSE(access(c, 2));  // heat 5 > 3: admitted
  EXPECT_EQ(c.stats().evictions, 1u);
  EXPECT_FALSE(c.heat(1, 1).has_value());
  EXPECT_EQ(*c.heat(1, 2), 5u);
  // Larger than the whole cache: refused.
  std::vector<uint8_t> big(2 * kPiece, 1);
  EXPECT_FALSE(c.offer(1, 3, big.data(), big.size()));
}

TEST(WeightsCache, LruEvictsTheLeastRecentAndOwnersDropTheirs) {
  WeightsCache c(2 * kPiece, CachePolicy::kLru);
  access(c, 1);
  access(c, 2);
  EXPECT_TRUE(access(c, 1));
  access(c, 3);  // evicts 2
  EXPECT_TRUE(c.heat(1, 1).has_value());
  EXPECT_FALSE(c.heat(1, 2).has_value());
  EXPECT_TRUE(c.heat(1, 3).has_value());
  const uint64_t other = c.new_owner();
  EXPECT_NE(other, c.new_owner());
  c.drop_owner(1);
  EXPECT_EQ(c.stats().entries, 0u);
  EXPECT_EQ(c.stats().bytes, 0u);
}

// Threads hammering one cache: every hit returns the piece's own bytes, the byte count stays
// within the capacity, every access is counted once.
TEST(WeightsCache, ConcurrentAccessKeepsPiecesIntact) {
  for (CachePolicy policy : {CachePolicy::kLfru, CachePolicy::kLru}) {
    WeightsCache c(64 * kPiece, policy);
    constexpr int kThreads = 4, kAccesses = 20000;
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&c, t] {
        uint64_t x = 12345 + static_cast<uint64_t>(t);
        for (int i = 0; i < kAccesses; ++i) {
          x = x * 6364136223846793005ULL + 1442695040888963407ULL;
          const uint64_t r = (x >> 33) % 1000;
          access(c, r < 700 ? r % 32 : r);  // 70 % on 32 hot pieces
        }
      });
    }
    for (auto& th : threads) th.join();
    const WeightsCacheStats s = c.stats();
    EXPECT_EQ(s.hits + s.misses, static_cast<uint64_t>(kThreads) * kAccesses);
    EXPECT_LE(s.bytes, 64 * kPiece);
    EXPECT_EQ(s.bytes, s.entries * kPiece);
    EXPECT_GT(s.hits, s.misses);
  }
}

// A model whose weights stream reads its token-embedding rows through the cache: the same
// bits as the resident model, one miss per distinct token and a hit for every repeat.
TEST(ResidencyModels, EmbeddingRowsThroughTheWeightsCacheAreTheSameBits) {
  POWER_REQUIRE_SHARED();
  const std::string path = testing::shared_dir() + "/fixtures/models/llama/llama-Q8_0.gguf";
  const auto tokens =
      testing::read_ids(std::filesystem::path(path).parent_path().string() + "/tokens.txt");
  auto plain = open_model(path, "", 2);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  const PassResult ref = run_model(**plain, tokens);
  uint64_t row_bytes = 0;
  for (const GgufTensor& t : (*plain)->file().tensors()) {
    if (t.name == "token_embd.weight") row_bytes = t.n_bytes / t.rows();
  }
  ASSERT_GT(row_bytes, 0u);
  for (CachePolicy policy : {CachePolicy::kLfru, CachePolicy::kLru}) {
    // Room for every row, and for three (evictions, and under lfru refusals).
    for (uint64_t capacity : {uint64_t{1} << 20, 3 * row_bytes}) {
      SCOPED_TRACE(std::string(cache_policy_name(policy)) + " " + std::to_string(capacity));
      auto cache = std::make_shared<WeightsCache>(capacity, policy);
      auto f = GgufFile::open(path);
      ASSERT_TRUE(f.ok());
      LoadModelOptions o;
      o.weights_budget = *parse_weights_budget("0%");
      o.sha256 = "00";
      o.weights_cache = cache;
      auto m = load_model(std::shared_ptr<const GgufFile>(std::move(*f)), o);
      ASSERT_TRUE(m.ok()) << m.status().to_string();
      ASSERT_EQ((*m)->weights_cache(), cache.get());
      const PassResult got = run_model(**m, tokens);
      EXPECT_TRUE(same_bits(got.logits, ref.logits));
      EXPECT_EQ(got.greedy, ref.greedy);
      // Rows looked up: the 48 tokens, then the first 16 again, then the 24 greedy ones (each
      // fed back).
      std::vector<int32_t> looked(tokens.begin(), tokens.end());
      looked.insert(looked.end(), tokens.begin(), tokens.begin() + 16);
      looked.insert(looked.end(), got.greedy.begin(), got.greedy.end());
      std::vector<int32_t> distinct = looked;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      const CachedRows::Counters n = (*m)->cached_rows_counters();
      EXPECT_EQ(n.hits + n.misses, looked.size());
      EXPECT_EQ(n.read_bytes, n.misses * row_bytes);
      if (policy == CachePolicy::kLfru && capacity > 4096) {
        // --mlock with the cache locks what it locks without one less the table, whose rows
        // come through the cache instead of the mapping.
        auto bare = open_model(path, "0%", 2, "", UINT64_MAX, true);
        ASSERT_TRUE(bare.ok());
        auto f2 = GgufFile::open(path);
        ASSERT_TRUE(f2.ok());
        o.mlock = true;
        auto locked = load_model(std::shared_ptr<const GgufFile>(std::move(*f2)), o);
        ASSERT_TRUE(locked.ok());
        if ((*bare)->lock_status().ok() && (*locked)->lock_status().ok()) {
          EXPECT_EQ((*bare)->locked_weight_bytes() - (*locked)->locked_weight_bytes(),
                    row_bytes * static_cast<uint64_t>((*plain)->hparams().n_vocab));
        }
        o.mlock = false;
      }
      const WeightsCacheStats cs = cache->stats();
      if (capacity > distinct.size() * row_bytes) {  // holds every row: one miss per row
        EXPECT_EQ(n.misses, distinct.size());
        EXPECT_EQ(cs.evictions, 0u);
        EXPECT_EQ(cs.bytes, distinct.size() * row_bytes);
      } else {
        EXPECT_GT(n.misses, distinct.size());
        EXPECT_GT(cs.evictions + cs.rejected, 0u);
        EXPECT_LE(cs.bytes, capacity);
      }
    }
  }
}

}  // namespace
}  // namespace power

namespace power {
namespace {

// RuntimeOptions::weights_cache / weights_cache_policy (the server's config keys and power
// run's flags end here): bad values are refused with the reason; the cache is charged to the
// memory budget.
TEST(WeightsCache, RuntimeOptionsAreChecked) {
  auto make = [](std::string bytes, std::string policy, uint64_t budget = 0) {
    RuntimeOptions o;
    o.memory_budget_bytes = budget;
    o.weights_cache = std::move(bytes);
    o.weights_cache_policy = std::move(policy);
    return Runtime::create(o);
  };
  EXPECT_TRUE(make("64M", "lfru").ok());
  EXPECT_TRUE(make("", "lru").ok());
  EXPECT_TRUE(make("0", "lfru").ok());
  auto bad_size = make("lots", "lfru");
  ASSERT_FALSE(bad_size.ok());
  EXPECT_NE(bad_size.status().message().find("bad weights cache size"), std::string::npos);
  EXPECT_FALSE(make("50%", "lfru").ok());  // bytes, not a share of a model
  auto bad_policy = make("64M", "mru");
  ASSERT_FALSE(bad_policy.ok());
  EXPECT_EQ(bad_policy.status().code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(make("", "mru").ok());
  auto too_big = make("2G", "lfru", 1000000000);
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), StatusCode::kResourceExhausted);
}

// Two models under one runtime share its cache: each counts its own lookups, the cache holds
// the rows of both (F32 rows of 64 floats, F16 rows of 64 halves; no eviction in 1 MiB).
TEST(WeightsCache, ModelsOfOneRuntimeShareIt) {
  POWER_REQUIRE_SHARED();
  RuntimeOptions ro;
  ro.weights_cache = "1MiB";
  auto rt = Runtime::create(ro);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  const std::string dir = testing::shared_dir() + "/models/stories260K/";
  LoadOptions lo;
  lo.n_ctx = 256;
  lo.threads = 1;
  lo.weights_budget = "0%";
  auto f32 = (*rt)->load(dir + "stories260K-F32.gguf", lo);
  ASSERT_TRUE(f32.ok()) << f32.status().to_string();
  auto f16 = (*rt)->load(dir + "stories260K-F16.gguf", lo);
  ASSERT_TRUE(f16.ok()) << f16.status().to_string();
  uint64_t lookups = 0;
  for (ModelHandle* m : {&*f32, &*f16}) {
    GenerateRequest r;
    r.prompt = "Once upon a time";
    r.max_tokens = 32;
    r.sampling.temperature = 0;
    auto h = (*rt)->submit(*m, std::move(r));
    ASSERT_TRUE(h.ok());
    const Completion c = h->wait();
    ASSERT_TRUE(c.status.ok()) << c.status.to_string();
    lookups += c.usage.prompt_tokens + c.usage.completion_tokens - 1;
  }
  const RuntimeStats a = f32->stats(), b = f16->stats();
  EXPECT_EQ(
      a.weights_cache_hits + a.weights_cache_misses + b.weights_cache_hits + b.weights_cache_misses,
      lookups);
  EXPECT_GT(a.weights_cache_misses, 0u);
  EXPECT_GT(b.weights_cache_misses, 0u);
  EXPECT_EQ(a.weights_cache_capacity_bytes, 1048576u);
  EXPECT_EQ(a.weights_cache_bytes, b.weights_cache_bytes);
  EXPECT_EQ(a.weights_cache_evictions, 0u);
  EXPECT_EQ(a.weights_cache_bytes,
            a.weights_cache_misses * 64 * 4 + b.weights_cache_misses * 64 * 2);
}

}  // namespace
}  // namespace power
