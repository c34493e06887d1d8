// `power perplexity` against llama.cpp's llama-perplexity (b4747) on the same model files and
// the same text (tests/data/perplexity: stories.txt and the peer's figures with the commands
// that made them). Every peer run is repeated through the CLI: perplexity within 1 %, KL
// divergence (mean, median, 99th percentile) within 10 % relative where the peer's value is
// at least 1e-4 (below that it prints 0.000000-0.00004: ours must be below 1e-4 too), and the
// same-top-1 rate within 1 percentage point. The peer's base file keeps 16-bit log-probs,
// ours float32, which is most of the KLD difference.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "base/file.h"
#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

using json = nlohmann::json;
using testing::run_power;

std::string data(const std::string& name) {
  return std::string(POWER_SOURCE_DIR) + "/tests/data/perplexity/" + name;
}

json perplexity(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"perplexity", "--json", "-f", data("stories.txt"),
                                   "-c",         "128",    "-t", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto r = run_power(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  json j = json::parse(r.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << r.out;
  return j;
}

void expect_close(double ours, double peer, double rel, const std::string& what) {
  EXPECT_LE(std::fabs(ours - peer), rel * std::fabs(peer))
      << what << ": ours " << ours << ", llama-perplexity " << peer;
}

void expect_kld(double ours, double peer, const std::string& what) {
  if (std::fabs(peer) >= 1e-4) {
    expect_close(ours, peer, 0.10, what);
  } else {
    EXPECT_LT(std::fabs(ours), 1e-4) << what << ": ours " << ours << ", peer " << peer;
  }
}

TEST(CliPerplexity, MatchesLlamaPerplexity) {
  POWER_REQUIRE_SHARED();
  auto text = read_file_text(data("peer_llama_b4747.json"));
  ASSERT_TRUE(text.ok());
  const json peer = json::parse(*text);
  const std::string dir = testing::make_temp_dir("power_ppl");
  std::map<std::string, std::string> bases;  // base model -> saved log-probs
  int ppl_runs = 0, kld_runs = 0;
  for (const auto& r : peer["runs"]) {
    const std::string model = testing::shared_dir() + "/" + r["model"].get<std::string>();
    const std::string name = r["name"];
    if (r["kind"] == "ppl") {
      const json ours = perplexity({"-m", model, "--kv-type", r["kv_type"]});
      EXPECT_EQ(ours["n_tokens"], peer["n_tokens"]) << name;
      EXPECT_EQ(ours["n_chunk"], peer["n_chunk"]) << name;
      expect_close(ours["ppl"], r["ppl"], 0.01, name + " PPL");
      expect_close(ours["ppl_err"], r["ppl_err"], 0.05, name + " PPL error");
      ++ppl_runs;
      continue;
    }
    const std::string base_model = r["base_model"];
    if (!bases.count(base_model)) {
      const std::string file = dir + "/base" + std::to_string(bases.size()) + ".kld";
      const json saved = perplexity({"-m", testing::shared_dir() + "/" + base_model, "--kv-type",
                                     "f32", "--save-logits", file});
      ASSERT_TRUE(saved.contains("ppl"));
      bases[base_model] = file;
    }
    const json ours =
        perplexity({"-m", model, "--kv-type", "f32", "--kl-divergence-base", bases[base_model]});
    ASSERT_TRUE(ours.contains("kld")) << name;
    const json& k = ours["kld"];
    expect_close(ours["ppl"], r["ppl_q"], 0.01, name + " PPL(Q)");
    expect_close(k["ppl_base"], r["ppl_base"], 0.01, name + " PPL(base)");
    expect_kld(k["mean_kld"], r["mean_kld"], name + " mean KLD");
    expect_kld(k["median_kld"], r["median_kld"], name + " median KLD");
    expect_kld(k["p99_kld"], r["p99_kld"], name + " 99% KLD");
    EXPECT_LE(std::fabs(k["same_top1_pct"].get<double>() - r["same_top_pct"].get<double>()), 1.0)
        << name << " same top-1";
    ++kld_runs;
  }
  EXPECT_EQ(ppl_runs, 14);
  EXPECT_EQ(kld_runs, 7);
  testing::remove_tree(dir);
}

TEST(CliPerplexity, ErrorsAreClear) {
  POWER_REQUIRE_SHARED();
  const std::string model = testing::shared_dir() + "/models/stories260K/stories260K-F32.gguf";
  const std::string dir = testing::make_temp_dir("power_ppl_err");
  // Too short a text for two chunks.
  ASSERT_TRUE(write_file_atomic(dir + "/short.txt", std::string_view("Once upon a time.")).ok());
  auto r = run_power({"perplexity", "-m", model, "-f", dir + "/short.txt", "-c", "128"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("needs at least 256"), std::string::npos) << r.err;
  // A base saved at another context is refused, as is a file that is not a base.
  const std::string base = dir + "/b.kld";
  r = run_power(
      {"perplexity", "-m", model, "-f", data("stories.txt"), "-c", "64", "--save-logits", base});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  r = run_power({"perplexity", "-m", model, "-f", data("stories.txt"), "-c", "128",
                 "--kl-divergence-base", base});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("another text, context"), std::string::npos) << r.err;
  r = run_power({"perplexity", "-m", model, "-f", data("stories.txt"), "-c", "128",
                 "--kl-divergence-base", data("stories.txt")});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("not a base logits file"), std::string::npos) << r.err;
  auto bytes = read_file_text(base);
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(
      write_file_atomic(dir + "/cut.kld", std::string_view(*bytes).substr(0, bytes->size() - 7))
          .ok());
  r = run_power({"perplexity", "-m", model, "-f", data("stories.txt"), "-c", "64",
                 "--kl-divergence-base", dir + "/cut.kld"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.err.find("size does not match"), std::string::npos) << r.err;
  testing::remove_tree(dir);
}

}  // namespace
}  // namespace power
