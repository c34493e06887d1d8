// Black-box tests of the weights-residency surfaces (docs/RESIDENCY.md): `power residency plan`
// (text and JSON, digest bound to the budget) and `power run --weights-budget`, whose greedy
// text with every matrix streamed equals llama2.c's on stories260K, receipts that bind the plan
// while the weights digest stays, and the peak RSS at every budget.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

using testing::run_power;
using testing::stories;

TEST(CliResidency, PlanPrintsTiersAndABudgetBoundDigest) {
  POWER_REQUIRE_SHARED();
  const std::string model = stories("stories260K-ftypeQ6_K_fallback-Q8_0-F16.gguf");
  auto text = run_power({"residency", "plan", "-m", model, "--budget", "50%"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("streamed"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("digest"), std::string::npos) << text.out;
  auto j1 = run_power({"residency", "plan", "-m", model, "--budget", "50%", "--json"});
  ASSERT_EQ(j1.exit_code, 0) << j1.err;
  const nlohmann::json a = nlohmann::json::parse(j1.out);
  EXPECT_EQ(a["schema"], "power.residency-plan/1");
  EXPECT_EQ(a["artifact_sha256"].get<std::string>().size(), 64u);
  EXPECT_EQ(a["digest"].get<std::string>().size(), 64u);
  EXPECT_LE(a["pinned_bytes"].get<uint64_t>(), a["total_bytes"].get<uint64_t>() / 2 + 1);
  int streamed = 0;
  for (const auto& t : a["tensors"]) streamed += t["tier"] == "streamed";
  EXPECT_GT(streamed, 0);
  // Same file, same budget: same digest; another budget: another digest.
  auto j2 = run_power({"residency", "plan", "-m", model, "--budget", "50%", "--json"});
  EXPECT_EQ(nlohmann::json::parse(j2.out)["digest"], a["digest"]);
  auto j3 = run_power({"residency", "plan", "-m", model, "--budget", "10%", "--json"});
  EXPECT_NE(nlohmann::json::parse(j3.out)["digest"], a["digest"]);
  auto bad = run_power({"residency", "plan", "-m", model, "--budget", "lots"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("bad weights budget"), std::string::npos) << bad.err;
}

TEST(CliResidency, RunWithEveryMatrixStreamedEqualsLlama2c) {
  POWER_REQUIRE_SHARED();
  auto r =
      run_power({"run", "-m", stories("stories260K-F32.gguf"), "-n", "256", "--temp", "0", "--ctx",
                 "512", "-t", "2", "--weights-budget", "0%", "--prefetch", "1", "--verbose"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, testing::read_file(stories("expected_greedy_t0_n256.txt")));
  EXPECT_NE(r.err.find("streamed"), std::string::npos) << r.err;
  auto bad = run_power(
      {"run", "-m", stories("stories260K-F32.gguf"), "--weights-budget", "120%", "-p", "x"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("bad weights budget"), std::string::npos) << bad.err;
}

// `power run --weights-cache`: token-embedding rows through the LFRU (or LRU) cache give
// llama2.c's text too, and --verbose counts the cache's hits and misses.
TEST(CliResidency, WeightsCacheServesEmbeddingRows) {
  POWER_REQUIRE_SHARED();
  for (const char* policy : {"lfru", "lru"}) {
    SCOPED_TRACE(policy);
    auto r = run_power({"run", "-m", stories("stories260K-F32.gguf"), "-n", "256", "--temp", "0",
                        "--ctx", "512", "-t", "2", "--weights-budget", "0%", "--weights-cache",
                        "64KiB", "--weights-cache-policy", policy, "--verbose"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, testing::read_file(stories("expected_greedy_t0_n256.txt")));
    unsigned long long hits = 0, misses = 0, read = 0, held = 0, cap = 0;
    const size_t at = r.err.find("weights cache: ");
    ASSERT_NE(at, std::string::npos) << r.err;
    ASSERT_EQ(std::sscanf(r.err.c_str() + at,
                          "weights cache: %llu hits, %llu misses (%llu bytes read), %llu of %llu",
                          &hits, &misses, &read, &held, &cap),
              5)
        << r.err.substr(at);
    // 256 lookups: BOS, then each generated token but the last is fed back; most of them
    // repeats in a 512-token vocabulary. A row is 64 floats.
    EXPECT_EQ(hits + misses, 256u);
    EXPECT_GT(hits, misses);
    EXPECT_EQ(read, misses * 64 * 4);
    EXPECT_EQ(cap, 65536u);
    EXPECT_LE(held, cap);
  }
  auto bad = run_power({"run", "-m", stories("stories260K-F32.gguf"), "--weights-budget", "0%",
                        "--weights-cache", "lots", "-p", "x"});
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("bad weights cache size"), std::string::npos) << bad.err;
  auto bad_policy = run_power(
      {"run", "-m", stories("stories260K-F32.gguf"), "--weights-cache-policy", "mru", "-p", "x"});
  EXPECT_NE(bad_policy.exit_code, 0);
}

// `power run --mlock` locks the weights in RAM (-v says how much) and gives the same text.
// Under a memlock limit of 64 KiB (and, as root, without CAP_IPC_LOCK, which ignores the
// limit) it warns and still answers; with --require-mlock it refuses with the numbers.
TEST(CliResidency, MlockLocksTheWeightsOrSaysWhyNot) {
  POWER_REQUIRE_SHARED();
  const std::vector<std::string> base = {"run",
                                         "-m",
                                         stories("stories260K-F32.gguf"),
                                         "-p",
                                         "Once upon a time",
                                         "-n",
                                         "24",
                                         "--temp",
                                         "0",
                                         "--ctx",
                                         "256",
                                         "-t",
                                         "1",
                                         "--verbose"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = base;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  auto locked_mib = [](const std::string& err) {
    const size_t at = err.find("; locked ");
    return at == std::string::npos ? -1.0 : std::atof(err.c_str() + at + 9);
  };
  auto plain = run_power(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  EXPECT_EQ(locked_mib(plain.err), 0.0) << plain.err;
  for (const char* budget : {"100%", "0%"}) {
    auto locked = run_power(with({"--mlock", "--weights-budget", budget}));
    ASSERT_EQ(locked.exit_code, 0) << locked.err;
    EXPECT_EQ(locked.out, plain.out);
    // stories260K-F32 holds 1.0 MiB of weights; at 0 % the staging slots are locked instead.
    EXPECT_GT(locked_mib(locked.err), 0.5) << locked.err;
    EXPECT_EQ(locked.err.find("cannot lock"), std::string::npos) << locked.err;
  }

  std::vector<std::string> prefix;
  if (::geteuid() == 0) {
    if (!std::filesystem::exists("/usr/bin/setpriv")) {
      GTEST_SKIP() << "running as root without /usr/bin/setpriv (util-linux) to drop "
                      "CAP_IPC_LOCK: the memlock limit cannot be tested";
    }
    prefix = {"/usr/bin/setpriv", "--inh-caps=-ipc_lock", "--bounding-set=-ipc_lock", "--"};
  }
  struct rlimit saved {};
  ASSERT_EQ(::getrlimit(RLIMIT_MEMLOCK, &saved), 0);
  struct rlimit low = saved;
  low.rlim_cur = 64 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_MEMLOCK, &low), 0);
  auto warned = run_power(with({"--mlock"}), prefix);
  auto refused = run_power(with({"--mlock", "--require-mlock"}), prefix);
  ASSERT_EQ(::setrlimit(RLIMIT_MEMLOCK, &saved), 0);
  ASSERT_EQ(warned.exit_code, 0) << warned.err;
  EXPECT_EQ(warned.out, plain.out);
  EXPECT_NE(warned.err.find("cannot lock the weights in RAM"), std::string::npos) << warned.err;
  EXPECT_LT(locked_mib(warned.err), 0.0625) << warned.err;
  EXPECT_NE(refused.exit_code, 0) << refused.out;
  EXPECT_NE(refused.err.find("cannot lock the weights in RAM"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("memlock_limit=65536"), std::string::npos) << refused.err;
}

// Receipts name the plan the weights were read under; the weights' identity does not change.
// stories260K at 0 % (every matrix streamed) and 100 %: the same model.tensors_sha256 and output
// digests, different plan digests, both verified by `power verify`.
TEST(CliResidency, ReceiptsBindThePlanAndKeepTheWeightsDigest) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::make_temp_dir("power-residency-receipt");
  nlohmann::json receipts[2];
  const char* budgets[2] = {"0%", "100%"};
  for (int i = 0; i < 2; ++i) {
    const std::string out = dir + "/receipt-" + std::to_string(i) + ".json";
    auto r = run_power({"run", "-m", stories("stories260K-F32.gguf"), "-p", "Once upon a time",
                        "-n", "32", "--temp", "0", "--ctx", "256", "-t", "2", "--weights-budget",
                        budgets[i], "--receipt", out});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto v = run_power({"verify", out});
    EXPECT_EQ(v.exit_code, 0) << v.out << v.err;
    receipts[i] = nlohmann::json::parse(testing::read_file(out));
  }
  const nlohmann::json& streamed = receipts[0];
  const nlohmann::json& resident = receipts[1];
  EXPECT_EQ(streamed["model"]["tensors_sha256"], resident["model"]["tensors_sha256"]);
  EXPECT_EQ(streamed["model"]["sha256"], resident["model"]["sha256"]);
  EXPECT_EQ(streamed["output"]["tokens_sha256"], resident["output"]["tokens_sha256"]);
  const nlohmann::json& a = streamed["config"]["weights_residency"];
  const nlohmann::json& b = resident["config"]["weights_residency"];
  EXPECT_EQ(a["plan_sha256"].get<std::string>().size(), 64u);
  EXPECT_NE(a["plan_sha256"], b["plan_sha256"]);
  EXPECT_GT(a["streamed_bytes"].get<uint64_t>(), 0u);
  EXPECT_EQ(b["streamed_bytes"].get<uint64_t>(), 0u);
  // The plan digest is the one `power residency plan` prints for that budget.
  auto plan = run_power(
      {"residency", "plan", "-m", stories("stories260K-F32.gguf"), "--budget", "0%", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  EXPECT_EQ(nlohmann::json::parse(plan.out)["digest"], a["plan_sha256"]);
  testing::remove_tree(dir);
}

// A matrix larger than a block (the output layer) streams in row pieces: `power logits` gives
// the same bytes at every budget. The "tiny" synthetic llama (64 wide, 2 blocks of 38 KiB in
// Q8_0, a 32000-row output matrix of 2.1 MB) streams its output in 56 pieces of 576 rows.
TEST(CliResidency, LogitsOfAMatrixStreamedInRowPiecesAreBitIdentical) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::make_temp_dir("power-residency-pieces");
  std::string ids;
  for (int i = 0; i < 24; ++i) ids += (i ? "," : "") + std::to_string(1 + (i * 7919) % 31999);
  for (const char* type : {"q8_0", "f32"}) {
    const std::string model = dir + "/tiny-" + type + ".gguf";
    auto s = run_power({"dev", "synth", "--shape", "tiny", "--type", type, "--vocab",
                        testing::shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf",
                        "-o", model});
    ASSERT_EQ(s.exit_code, 0) << s.err;
    auto plan = run_power({"residency", "plan", "-m", model, "--budget", "0%"});
    ASSERT_EQ(plan.exit_code, 0) << plan.err;
    EXPECT_NE(plan.out.find("output.weight[0:"), std::string::npos) << plan.out;
    std::string reference;
    for (const char* budget : {"100%", "50%", "0%"}) {
      for (const char* prefetch : {"0", "2"}) {
        const std::string out = dir + "/logits.f32";
        auto r = run_power({"logits", "-m", model, "--tokens", ids, "--out", out, "-t", "2",
                            "--weights-budget", budget, "--prefetch", prefetch});
        ASSERT_EQ(r.exit_code, 0) << r.err;
        const std::string bytes = testing::read_file(out);
        ASSERT_EQ(bytes.size(), 24u * 32000 * sizeof(float));
        if (reference.empty()) {
          reference = bytes;
        } else {
          EXPECT_TRUE(bytes == reference) << type << " at " << budget << ", prefetch " << prefetch;
        }
      }
    }
  }
  testing::remove_tree(dir);
}

// `--mirror-dir` on `power logits`: the first run at 0 % builds DIR/sha256-<digest>/ (the digest
// `power residency plan --json` reports), the logits equal the resident run's at 0 and 50 %
// with and without read-ahead; a flipped byte in the mirror's data is reported on stderr and
// the logits do not change.
TEST(CliResidency, LogitsFromAMirrorAreBitIdenticalAndDamageIsServedFromTheArtifact) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::make_temp_dir("power-residency-mirror");
  const std::string model = dir + "/tiny.gguf";
  auto s = run_power({"dev", "synth", "--shape", "tiny", "--type", "q8_0", "--vocab",
                      testing::shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf", "-o",
                      model});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  const std::string ids = "1,450,4996,17354,1701,975,263,931,29892,727";
  auto logits = [&](std::vector<std::string> extra) {
    const std::string out = dir + "/logits.f32";
    std::vector<std::string> args = {"logits", "-m", model, "--tokens", ids, "--out", out};
    args.insert(args.end(), extra.begin(), extra.end());
    auto r = run_power(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::make_pair(testing::read_file(out), r.err);
  };
  const std::string reference = logits({}).first;
  ASSERT_EQ(reference.size(), 10u * 32000 * sizeof(float));
  const std::string mirror = dir + "/mirror";
  for (const char* budget : {"0%", "50%"}) {
    for (const char* prefetch : {"0", "2"}) {
      EXPECT_TRUE(
          logits({"--weights-budget", budget, "--prefetch", prefetch, "--mirror-dir", mirror})
              .first == reference)
          << budget << " prefetch " << prefetch;
    }
  }
  auto plan = run_power({"residency", "plan", "-m", model, "--budget", "0%", "--json"});
  ASSERT_EQ(plan.exit_code, 0) << plan.err;
  const std::string digest = nlohmann::json::parse(plan.out)["artifact_sha256"];
  const std::string entry = mirror + "/sha256-" + digest;
  const auto index = nlohmann::json::parse(testing::read_file(entry + "/index.json"));
  EXPECT_EQ(index["schema"], "power.weights-mirror/1");
  EXPECT_EQ(index["artifact_sha256"], digest);
  EXPECT_GT(index["data_bytes"].get<uint64_t>(), 0u);
  EXPECT_FALSE(index["tensors"].empty());
  // Flip one byte in the middle of the data.
  std::string data = testing::read_file(entry + "/data");
  ASSERT_FALSE(data.empty());
  data[data.size() / 2] = static_cast<char>(data[data.size() / 2] ^ 0x01);
  std::filesystem::permissions(entry + "/data", std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);  // published read-only
  {
    std::ofstream f(entry + "/data", std::ios::binary | std::ios::trunc);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
  }
  auto [bytes, err] = logits({"--weights-budget", "0%", "--mirror-dir", mirror});
  EXPECT_TRUE(bytes == reference);
  EXPECT_NE(err.find("weights mirror read failed"), std::string::npos) << err;
  EXPECT_NE(err.find("checksum mismatch"), std::string::npos) << err;
  testing::remove_tree(dir);
}

double mib_after(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  EXPECT_NE(at, std::string::npos) << key << " not in: " << text;
  return at == std::string::npos ? 0.0 : std::stod(text.substr(at + key.size()));
}

// Memory: at every budget the peak RSS of `power run` (getrusage ru_maxrss, load included)
// stays within what it reports with --verbose: the resident weights (pinned + staging slots
// when streaming; at 100 % the mapping's pages the kernels read + packed copies) + KV cache +
// scratch, plus the process's baseline (the peak RSS of `power tokenize` on the same file: the
// binary, the file's metadata, the tokenizer) and 16 MiB for logits, sampling, the token rows
// read from the mapping and allocator slack. A 134M Q8_0 file (144 MB; its packed copy as large
// again): a load that kept a matrix's mapped pages beside its copy, or staging slots sized by
// the 26 MB output matrix instead of a 7.5 MB block, breaks the bound by tens of MiB. At 100 %
// the weights are at most the file's size: a Q8_0 copy has the bytes of the rows it replaces
// (8 x 34 per block of 8 rows), and the replaced rows leave the process (they used to stay,
// the weights then counting the file plus its copies: 248 MiB).
TEST(CliResidency, PeakRssStaysWithinTheBudgetAtEveryBudget) {
  POWER_REQUIRE_SHARED();
  const std::string dir = testing::make_temp_dir("power-residency-rss");
  const std::string model = dir + "/134m-q8_0.gguf";
  auto s = run_power({"dev", "synth", "--shape", "134m", "--type", "q8_0", "--vocab",
                      testing::shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf", "-o",
                      model});
  ASSERT_EQ(s.exit_code, 0) << s.err;
  // The process, the file's metadata and the tokenizer: what `power tokenize` holds.
  const long base_kb = run_power({"tokenize", "-m", model, "--text", "hi"}).max_rss_kb;
  std::string first_out;
  double full_weights_mib = 0;
  for (const char* budget : {"100%", "50%", "25%", "0%"}) {
    auto r =
        run_power({"run", "-m", model, "-p", "Once upon a time", "-n", "4", "--temp", "0", "--ctx",
                   "256", "-t", "2", "--ignore-eos", "--verbose", "--weights-budget", budget});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const double weights_mib = mib_after(r.err, "weights mapped ");
    const double kv_mib = mib_after(r.err, "kv cache ");
    const double scratch_mib = mib_after(r.err, "scratch ");
    const double bound_kb = (weights_mib + kv_mib + scratch_mib + 16.0) * 1024 + base_kb;
    std::printf(
        "  %s: peak RSS %ld KiB; bound %.0f KiB (weights %.2f MiB, kv %.2f MiB, scratch %.2f "
        "MiB, baseline %ld KiB)\n",
        budget, r.max_rss_kb, bound_kb, weights_mib, kv_mib, scratch_mib, base_kb);
    EXPECT_LE(r.max_rss_kb, bound_kb) << budget;
    if (first_out.empty()) {
      // --verbose prints MiB to 2 decimals: 0.005 MiB of rounding.
      EXPECT_LE(weights_mib - 0.005,
                static_cast<double>(std::filesystem::file_size(model)) / 1048576.0);
      first_out = r.out;
      full_weights_mib = weights_mib;
    } else {
      EXPECT_EQ(r.out, first_out) << budget;  // the same tokens at every budget
      EXPECT_LT(weights_mib, full_weights_mib) << budget;
    }
  }
  testing::remove_tree(dir);
}

}  // namespace
}  // namespace power
