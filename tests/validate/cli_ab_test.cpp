// `power ab` end to end on the 134M synthetic file (`power dev synth --shape 134m`), through
// the binary: an A/A comparison is never selected (20 seeded repetitions, machine noise
// included), a candidate that really is faster (-t 2 against -t 1; the threads split rows, so
// the output is bit-identical) is selected and --apply writes it, a candidate that changes
// the output (KV cache f16 against f32) is rejected under bit-exact, `power ab verify` fails
// on one changed byte, and --process fresh runs each measurement in its own process with the
// arm's environment. These tests run alone (RUN_SERIAL): the speed comparison needs the
// machine's cores.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

using json = nlohmann::json;
using testing::run_power;

class CliAbTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::shared_available()) return;
    dir_ = new std::string(testing::make_temp_dir("power_cli_ab"));
    ::setenv("POWER_HOME", (*dir_ + "/home").c_str(), 1);
    auto r = run_power({"dev", "synth", "--shape", "134m", "--type", "q8_0", "--vocab",
                        testing::shared_dir() + "/fixtures/tokenizer/ggml-vocab-llama-spm.gguf",
                        "-o", model()});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    write("t1.json", R"({"threads": 1})");
    write("t2.json", R"({"threads": 2})");
    write("f32.json", R"({"threads": 1, "kv_type": "f32"})");
    write("f16.json", R"({"threads": 1, "kv-type": "f16"})");
    write("env.json", R"({"threads": 1, "env": {"POWER_AB_TEST_MARK": "candidate"}})");
    write("w.jsonl",
          "{\"prompt\": \"Once upon a time\", \"max_tokens\": 8, \"ignore_eos\": true}\n");
    // Prompts of about 80 tokens: two threads split a prefill of that size almost evenly, so the
    // candidate's time to the first token is clearly shorter. On a 5-token prompt it was not: a
    // short two-thread pass is dominated by the pool's hand-offs, one thread's TTFT measured
    // level with two threads' on a 2-vCPU VM, and the TTFT gate (x1.10) kept the baseline in
    // about one run in three.
    write("w2.jsonl", "{\"prompt\": \"" + long_prompt("Once upon a time") +
                          "\", \"max_tokens\": 32, \"ignore_eos\": true}\n"
                          "{\"prompt\": \"" +
                          long_prompt("The quick brown fox") +
                          "\", \"max_tokens\": 32, \"ignore_eos\": true}\n");
  }
  static void TearDownTestSuite() {
    if (!dir_) return;
    ::unsetenv("POWER_HOME");
    testing::remove_tree(*dir_);
    delete dir_;
    dir_ = nullptr;
  }
  // `opening` followed by a story of some 80 tokens.
  static std::string long_prompt(const std::string& opening) {
    return opening +
           ", there was a little girl named Lily who lived in a small house near the woods. "
           "Every morning she walked to the river with her dog, looked at the fish and the "
           "birds, and told her mother everything she had seen. One day she found a shiny "
           "stone under a tree, and she wondered where it had come from";
  }
  static std::string path(const std::string& name) { return *dir_ + "/" + name; }
  static std::string model() { return path("134m-q8_0.gguf"); }
  static void write(const std::string& name, const std::string& text) {
    ASSERT_TRUE(write_file_atomic(path(name), std::string_view(text)).ok());
  }
  static testing::RunResult ab(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"ab", "-q", "-m", model()};
    args.insert(args.end(), extra.begin(), extra.end());
    return run_power(args);
  }
  static json evidence(const std::string& name) {
    auto t = read_file_text(path(name));
    EXPECT_TRUE(t.ok());
    return t.ok() ? json::parse(*t) : json();
  }
  static inline std::string* dir_ = nullptr;
};

TEST_F(CliAbTest, AaIsNeverSelected) {
  POWER_REQUIRE_SHARED();
  int retained = 0;
  // Four rounds: each round reloads both instances, and where a load lands in memory moves its
  // speed by several per cent; with two rounds both placements favoured the candidate by 5-8 %
  // in one of 20 seeds here (order medians 1.08 / 1.05 against an A/A floor of 0.017). With
  // four, CI still saw one seed in ten selected (order medians 1.13 / 1.11, every round of the
  // A/B phase 8 % or more in the candidate's favour, A/A floor 0.024): each instance was
  // reloaded right after its own release, took back the same memory and kept its bias in every
  // round. Now both are freed first and which loads first is counterbalanced (each instance in
  // two of the four rounds, in a seeded order): with a coin per round, CI saw seed 4 selected
  // (its candidate loaded first in 3 of 4 A/B rounds; order medians 1.045 / 1.044).
  for (int seed = 1; seed <= 10; ++seed) {
    const std::string out = "aa" + std::to_string(seed) + ".json";
    auto r = ab({"--baseline", path("t1.json"), "--candidate", path("t1.json"), "--workload",
                 path("w.jsonl"), "--rounds", "4", "--order", "random", "--seed",
                 std::to_string(seed), "--equivalence", "bit-exact", "--out", path(out)});
    // Exit 2: baseline retained (3 would be a parity failure of a setting against itself).
    EXPECT_EQ(r.exit_code, 2) << "seed " << seed << "\n" << r.out << r.err;
    EXPECT_EQ(r.out.find("candidate-selected"), std::string::npos) << r.out;
    retained += r.exit_code == 2;
    if (seed == 1) {
      const json e = evidence(out);
      EXPECT_EQ(e["decision"]["result"], "baseline-retained");
      EXPECT_EQ(e["runs"].size(), 2u * 4 * 4);  // A/A and A/B phases, 4 rounds, 4 runs each
      // Every round records which instance loaded first, each instance loads first in two
      // of a phase's four rounds, and both ran once untimed after loading (--cache warm, the
      // default).
      std::map<std::string, std::map<int64_t, std::string>> first_by_round;  // phase -> round
      for (const auto& run : e["runs"]) {
        const std::string first = run["reload"]["loaded_first"].get<std::string>();
        EXPECT_TRUE(first == "A" || first == "B") << first;
        EXPECT_TRUE(run["reload"]["warmed_up"].get<bool>());
        first_by_round[run["phase"].get<std::string>()][run["round"].get<int64_t>()] = first;
      }
      for (const auto& [phase, rounds] : first_by_round) {
        ASSERT_EQ(rounds.size(), 4u) << phase;
        int a_first = 0;
        for (const auto& [round, first] : rounds) a_first += first == "A";
        EXPECT_EQ(a_first, 2) << phase;
      }
      EXPECT_TRUE(e["derived"]["output"]["same_logits"].get<bool>());
      auto v = run_power({"ab", "verify", path(out)});
      EXPECT_EQ(v.exit_code, 0) << v.err;
    }
  }
  EXPECT_EQ(retained, 10);
}

TEST_F(CliAbTest, FasterCandidateIsSelectedAndApplied) {
  POWER_REQUIRE_SHARED();
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two cores";
  // Two threads on a 2-vCPU VM are the first to suffer when the hypervisor takes a core away
  // (a stalled thread holds the other at every barrier): one disturbed stretch can widen the
  // interval or the p99 token gap past its gate, and then keeping the baseline is the right
  // answer (measured here: about one attempt in four on a shared 2-vCPU VM, with the idle gate
  // flagging busy runs). So a retained baseline gets two more tries; a rejection, or three
  // misses, fails.
  testing::RunResult r;
  for (int attempt = 0; attempt < 3; ++attempt) {
    r = ab({"--baseline", path("t1.json"), "--candidate", path("t2.json"), "--workload",
            path("w2.jsonl"), "--rounds", "8", "--aa-rounds", "4", "--equivalence", "bit-exact",
            "--out", path("t2-ev.json"), "--apply", path("profile.json")});
    if (r.exit_code != 2) break;
    const json e = evidence("t2-ev.json");
    std::fprintf(stderr,
                 "attempt %d kept the baseline (noisy machine?):\n%spreflight %s, idle %s\n",
                 attempt + 1, r.out.c_str(), e["preflight"].dump().c_str(),
                 e["derived"]["idle"].dump().c_str());
  }
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("decision: candidate-selected"), std::string::npos) << r.out;
  const json e = evidence("t2-ev.json");
  EXPECT_GT(e["derived"]["speed"]["score"].get<double>(), 1.03);
  EXPECT_EQ(e["binding"]["candidate"]["settings"], json::parse(R"({"threads": 2})"));
  EXPECT_TRUE(e["derived"]["output"]["same_tokens"].get<bool>());
  EXPECT_TRUE(e["derived"]["output"]["same_logits"].get<bool>());
  for (const auto& run : e["runs"]) {
    EXPECT_EQ(run["threads"], run["settings"] == "candidate" ? 2 : 1);
  }
  auto profile = read_file_text(path("profile.json"));
  ASSERT_TRUE(profile.ok());
  EXPECT_EQ(*profile, "{\"threads\":2}\n");
  auto v = run_power({"ab", "verify", path("t2-ev.json")});
  EXPECT_EQ(v.exit_code, 0) << v.err;
}

TEST_F(CliAbTest, OutputChangeIsRejectedUnderBitExact) {
  POWER_REQUIRE_SHARED();
  auto r = ab({"--baseline", path("f32.json"), "--candidate", path("f16.json"), "--workload",
               path("w.jsonl"), "--rounds", "2", "--equivalence", "bit-exact", "--out",
               path("kv-ev.json"), "--apply", path("kv-profile.json")});
  EXPECT_EQ(r.exit_code, 3) << r.out << r.err;
  EXPECT_NE(r.out.find("decision: rejected"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("output.logits_differ"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not applied"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(path("kv-profile.json")));
}

TEST_F(CliAbTest, VerifyFailsOnOneChangedByte) {
  POWER_REQUIRE_SHARED();
  // f16 against f32 under bit-exact: rejected whatever the speed (a deterministic outcome).
  auto r = ab({"--baseline", path("f32.json"), "--candidate", path("f16.json"), "--workload",
               path("w.jsonl"), "--rounds", "1", "--aa-rounds", "1", "--equivalence", "bit-exact",
               "--out", path("v-ev.json")});
  ASSERT_EQ(r.exit_code, 3) << r.out << r.err;
  auto text = read_file_text(path("v-ev.json"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(run_power({"ab", "verify", path("v-ev.json")}).exit_code, 0);
  // One byte of a raw measurement: the first digit after "wall_s":.
  std::string bad = *text;
  const size_t at = bad.find("\"wall_s\":") + 9;
  bad[at] = bad[at] == '1' ? '2' : '1';
  write("v-bad.json", bad);
  auto v = run_power({"ab", "verify", path("v-bad.json")});
  EXPECT_EQ(v.exit_code, 1);
  EXPECT_NE(v.err.find("signature"), std::string::npos) << v.err;
  // One byte of the signature itself.
  bad = *text;
  const size_t sig = bad.find("\"value\":\"") + 9;
  bad[sig] = bad[sig] == 'a' ? 'b' : 'a';
  write("v-bad2.json", bad);
  EXPECT_EQ(run_power({"ab", "verify", path("v-bad2.json")}).exit_code, 1);
  // Another signer than the one required.
  v = run_power({"ab", "verify", path("v-ev.json"), "--public-key", std::string(64, '1')});
  EXPECT_EQ(v.exit_code, 1);
}

TEST_F(CliAbTest, FreshProcessesCarryTheArmsEnvironment) {
  POWER_REQUIRE_SHARED();
  auto r = ab({"--baseline", path("t1.json"), "--candidate", path("env.json"), "--workload",
               path("w.jsonl"), "--rounds", "1", "--aa-rounds", "1", "--process", "fresh",
               "--cache", "cold", "--equivalence", "bit-exact", "--out", path("fresh-ev.json")});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.out << r.err;
  const json e = evidence("fresh-ev.json");
  ASSERT_EQ(e["runs"].size(), 8u);
  for (const auto& run : e["runs"]) {
    if (run["settings"] == "candidate") {
      EXPECT_EQ(run["env_seen"]["POWER_AB_TEST_MARK"], "candidate");
    } else {
      EXPECT_FALSE(run.contains("env_seen"));
    }
    EXPECT_TRUE(run["reload"].is_null());  // fresh processes load for every run
  }
  EXPECT_EQ(e["binding"]["options"]["process"], "fresh");
  EXPECT_EQ(run_power({"ab", "verify", path("fresh-ev.json")}).exit_code, 0);
  // The environment needs fresh processes; shared ones refuse it up front.
  r = ab({"--baseline", path("t1.json"), "--candidate", path("env.json"), "--workload",
          path("w.jsonl"), "--out", path("x.json")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--process fresh"), std::string::npos) << r.err;
}

// token-exact and lossy on stories260K (tokens take microseconds there, so this is quick):
// KV f16 against f32 keeps every greedy token, the teacher-forced KL is tiny, both settings
// answer the tasks alike; whichever way speed goes, the output gates pass.
TEST_F(CliAbTest, TokenExactAndLossyOnStories260K) {
  POWER_REQUIRE_SHARED();
  const std::string s260 = testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  write("s.jsonl", "{\"prompt\": \"Once upon a time\", \"max_tokens\": 32}\n");
  write("tasks.jsonl",
        "{\"prompt\": \"Once upon a time, there was a little girl named\", \"answer\": "
        "\"Lily\"}\n{\"prompt\": \"One day, Tim went to the\", \"answer\": \"park\"}\n");
  auto r = run_power({"ab", "-q", "-m", s260, "--baseline", path("f32.json"), "--candidate",
                      path("f16.json"), "--workload", path("s.jsonl"), "--rounds", "3", "--text",
                      std::string(POWER_SOURCE_DIR) + "/tests/data/perplexity/stories.txt", "--out",
                      path("te.json")});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.out << r.err;
  json e = evidence("te.json");
  const json& tf = e["quality"]["teacher_forced"];
  EXPECT_EQ(tf["positions"], 1071);  // 17 chunks x 63, as power perplexity -c 128
  EXPECT_LT(tf["mean_kld"].get<double>(), 0.001);
  EXPECT_GE(tf["same_top1_pct"].get<double>(), 99.5);
  EXPECT_TRUE(e["derived"]["output"]["same_tokens"].get<bool>());
  EXPECT_EQ(run_power({"ab", "verify", path("te.json")}).exit_code, 0);

  r = run_power({"ab", "-q", "-m", s260, "--baseline", path("f32.json"), "--candidate",
                 path("f16.json"), "--workload", path("s.jsonl"), "--rounds", "3", "--equivalence",
                 "lossy", "--tasks", path("tasks.jsonl"), "--out", path("lossy.json")});
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 2) << r.out << r.err;
  e = evidence("lossy.json");
  EXPECT_EQ(e["quality"]["tasks"]["baseline"].size(), 2u);
  EXPECT_EQ(e["quality"]["tasks"]["baseline"], e["quality"]["tasks"]["candidate"]);
  EXPECT_EQ(e["derived"]["output"]["tasks"]["mcnemar_p"], 1.0);
  EXPECT_EQ(run_power({"ab", "verify", path("lossy.json")}).exit_code, 0);
}

TEST_F(CliAbTest, BadInputsGetClearErrors) {
  POWER_REQUIRE_SHARED();
  write("bad-settings.json", R"({"threads": 1, "threads": 2})");
  auto r = ab({"--baseline", path("bad-settings.json"), "--candidate", path("t1.json"),
               "--workload", path("w.jsonl")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("duplicate"), std::string::npos) << r.err;
  write("unknown.json", R"({"threds": 1})");
  r = ab({"--baseline", path("unknown.json"), "--candidate", path("t1.json"), "--workload",
          path("w.jsonl")});
  EXPECT_NE(r.err.find("unknown settings key 'threds'"), std::string::npos) << r.err;
  write("bad.jsonl", "{\"prompt\": \"x\", \"max_tokens\": \"many\"}\n");
  r = ab({"--baseline", path("t1.json"), "--candidate", path("t1.json"), "--workload",
          path("bad.jsonl")});
  EXPECT_NE(r.err.find("workload line 1"), std::string::npos) << r.err;
  r = ab({"--baseline", path("t1.json"), "--candidate", path("t1.json"), "--workload",
          path("w.jsonl")});  // token-exact (the default) without --text
  EXPECT_NE(r.err.find("needs --text"), std::string::npos) << r.err;
  r = ab({"--baseline", path("t1.json"), "--candidate", path("t1.json"), "--workload",
          path("w.jsonl"), "--equivalence", "bit-exact", "--model-sha256", std::string(64, '0')});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("--model-sha256"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace power
