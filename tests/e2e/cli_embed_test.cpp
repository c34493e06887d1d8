// Black-box tests of `power embed` on ../shared/fixtures/embeddings: the printed vectors
// against the exact float64 reference (the bert_test rule), --json shape, --normalize,
// --file, and clear errors for a chat model and an over-long input.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "run_util.h"
#include "test_util.h"

namespace power {
namespace {

using testing::run_power;

std::string emb(const std::string& name) {
  return testing::shared_dir() + "/fixtures/embeddings/" + name;
}

double peer_max_abs(const std::string& model, const char* which) {
  std::ifstream f(emb("meta.json"));
  auto m = nlohmann::json::parse(f, nullptr, false);
  return m["files"][model][which]["max_abs"].get<double>();
}

TEST(CliEmbed, FileJsonMatchesExactReference) {
  POWER_REQUIRE_SHARED();
  for (const std::string model : {"bert-mean-F16", "bert-cls-Q8_0"}) {
    SCOPED_TRACE(model);
    auto r = run_power(
        {"embed", "-m", emb(model + ".gguf"), "--file", emb("sentences.txt"), "--json", "-t", "2"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    auto j = nlohmann::json::parse(r.out, nullptr, false);
    ASSERT_TRUE(j.is_object()) << r.out.substr(0, 200);
    ASSERT_TRUE(j["embeddings"].is_array());
    ASSERT_EQ(j["embeddings"].size(), 8u);
    EXPECT_EQ(j["prompt_tokens"].get<int>(), 225);
    const auto exact = testing::read_f32(emb(model + ".emb-exact.f32"));
    const double tol = 1.25 * peer_max_abs(model, "peer_vs_exact_raw") + 1e-4;
    double worst = 0;
    for (size_t s = 0; s < 8; ++s) {
      const auto v = j["embeddings"][s].get<std::vector<float>>();
      ASSERT_EQ(v.size(), 384u);
      for (size_t e = 0; e < v.size(); ++e) {
        worst = std::max(worst, std::fabs(double(v[e]) - exact[s * 384 + e]));
      }
    }
    EXPECT_LE(worst, tol);
  }
}

TEST(CliEmbed, TextNormalizedPlainOutput) {
  POWER_REQUIRE_SHARED();
  auto r = run_power({"embed", "-m", emb("bert-mean-F16.gguf"), "--text", "Hello world.", "--text",
                      "Embeddings", "--normalize", "-t", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::istringstream lines(r.out);
  const auto exact = testing::read_f32(emb("bert-mean-F16.emb-exact.f32"));
  const double tol = 1.25 * peer_max_abs("bert-mean-F16", "peer_vs_exact_norm") + 1e-4;
  // "Hello world." is sentence 0, "Embeddings" sentence 5.
  const size_t rows[] = {0, 5};
  std::string line;
  for (size_t row : rows) {
    ASSERT_TRUE(std::getline(lines, line));
    std::istringstream vals(line);
    std::vector<double> v;
    for (double x; vals >> x;) v.push_back(x);
    ASSERT_EQ(v.size(), 384u);
    double ss = 0, es = 0;
    for (size_t e = 0; e < 384; ++e) {
      ss += v[e] * v[e];
      es += double(exact[row * 384 + e]) * exact[row * 384 + e];
    }
    EXPECT_NEAR(ss, 1.0, 1e-6);
    for (size_t e = 0; e < 384; ++e) {
      EXPECT_NEAR(v[e], exact[row * 384 + e] / std::sqrt(es), tol) << "row " << row;
    }
  }
  EXPECT_FALSE(std::getline(lines, line));
}

TEST(CliEmbed, ClearErrors) {
  POWER_REQUIRE_SHARED();
  // A chat model.
  auto r =
      run_power({"embed", "-m", testing::shared_dir() + "/fixtures/models/llama/llama-F32.gguf",
                 "--text", "hi"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("not a BERT encoder"), std::string::npos) << r.err;
  // Longer than --ctx, and then truncated.
  r = run_power({"embed", "-m", emb("bert-cls-Q8_0.gguf"), "--ctx", "4", "--text", "Hello world."});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("longer than the context"), std::string::npos) << r.err;
  r = run_power({"embed", "-m", emb("bert-cls-Q8_0.gguf"), "--ctx", "4", "--truncate", "--json",
                 "--text", "Hello world."});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto j = nlohmann::json::parse(r.out, nullptr, false);
  EXPECT_EQ(j["prompt_tokens"].get<int>(), 4);
  // Nothing to embed.
  r = run_power({"embed", "-m", emb("bert-cls-Q8_0.gguf")});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nothing to embed"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace power
