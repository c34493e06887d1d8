// The generation loop on the real stories260K model against llama2.c and llama.cpp outputs
// (../shared/models/stories260K, see its README).
#include "engine/generate.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "format/llama2c.h"
#include "test_util.h"

namespace power {
namespace {

using testing::read_ids;

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

struct Stack {
  std::shared_ptr<const GgufFile> file;
  std::unique_ptr<Model> model;
  std::unique_ptr<text::Tokenizer> tok;
  std::unique_ptr<Workspace> ws;
  std::unique_ptr<KvCache> kv;
};

Stack load(const std::string& path, int64_t n_ctx, GgmlType kv_type = GgmlType::F16) {
  Stack s;
  auto f = GgufFile::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return s;
  s.file = std::shared_ptr<const GgufFile>(std::move(*f));
  auto tok = text::Tokenizer::from_gguf(*s.file);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  s.tok = std::move(*tok);
  auto m = load_model(s.file);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  s.model = std::move(*m);
  s.ws = std::move(*s.model->make_workspace(32, n_ctx, 2));
  s.kv = std::move(*KvCache::create(s.model->kv_config(n_ctx, 1, kv_type)));
  return s;
}

std::string stories(const std::string& name) {
  return testing::shared_dir() + "/models/stories260K/" + name;
}

GenerateParams greedy(int n) {
  GenerateParams p;
  p.max_tokens = n;
  p.sampling.temperature = 0.0f;
  return p;
}

// llama2.c `run stories260K.bin -z tok512.bin -t 0.0` (256 steps from BOS); its file ends with
// the newline run.c prints after generating.
TEST(Generate, GreedyFromBosEqualsLlama2c) {
  POWER_REQUIRE_SHARED();
  std::string expected = read_text(stories("expected_greedy_t0_n256.txt"));
  ASSERT_FALSE(expected.empty());
  ASSERT_EQ(expected.back(), '\n');
  expected.pop_back();
  for (GgmlType kv : {GgmlType::F16, GgmlType::F32}) {
    Stack s = load(stories("stories260K-F32.gguf"), 512, kv);
    ASSERT_TRUE(s.model && s.tok);
    Generator g(*s.model, *s.tok, *s.ws, *s.kv);
    std::string streamed;
    const int32_t bos[1] = {1};
    auto r = g.generate(bos, greedy(256), [&](std::string_view t) {
      streamed.append(t);
      return true;
    });
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    EXPECT_EQ(r->text, expected);
    EXPECT_EQ(streamed, r->text);
    EXPECT_EQ(r->tokens, read_ids(stories("expected_llama.cpp_greedy_bos_n256_ids.txt")));
  }
}

// The same text from a GGUF converted here from the llama2.c checkpoint itself.
TEST(Generate, ConvertedLlama2cCheckpointGivesTheSameText) {
  POWER_REQUIRE_SHARED();
  std::string dir = testing::make_temp_dir("power-l2c");
  auto st = convert_llama2c(stories("stories260K.bin"), stories("tok512.bin"), dir + "/s.gguf");
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->seq_len, 512);
  std::string expected = read_text(stories("expected_greedy_t0_n256.txt"));
  expected.pop_back();
  Stack s = load(dir + "/s.gguf", 512);
  ASSERT_TRUE(s.model);
  Generator g(*s.model, *s.tok, *s.ws, *s.kv);
  const int32_t bos[1] = {1};
  auto r = g.generate(bos, greedy(256), nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, expected);
  testing::remove_tree(dir);
}

// llama.cpp greedy with the prompt "Once upon a time" for 64 tokens: every one of the four
// stories260K GGUFs gives this text.
TEST(Generate, GreedyWithPromptEqualsLlamaCppForEveryQuantization) {
  POWER_REQUIRE_SHARED();
  const std::string expected =
      read_text(stories("expected_llama-cli_greedy_prompt-Once-upon-a-time_n64.txt"));
  const auto prompt =
      read_ids(testing::shared_dir() + "/fixtures/models/stories260K/greedy_prompt.txt");
  ASSERT_EQ(prompt, (std::vector<int32_t>{1, 403, 407, 261, 378}));
  for (const char* f : {"stories260K-F32.gguf", "stories260K-F16.gguf",
                        "stories260K-ftypeQ6_K_fallback-Q8_0-F16.gguf",
                        "stories260K-ftypeQ4_K_M_fallback-Q5_0-Q8_0-F16.gguf"}) {
    SCOPED_TRACE(f);
    Stack s = load(stories(f), 128, GgmlType::F32);
    ASSERT_TRUE(s.model);
    Generator g(*s.model, *s.tok, *s.ws, *s.kv);
    auto r = g.generate(prompt, greedy(64), nullptr);
    ASSERT_TRUE(r.ok());
    const std::string base = std::string(f).substr(0, std::string(f).size() - 5);
    EXPECT_EQ(r->tokens, read_ids(testing::shared_dir() + "/fixtures/models/stories260K/" + base +
                                  ".greedy.txt"));
    // The file holds the prompt's text followed by the continuation.
    EXPECT_NE(expected.find(r->text), std::string::npos) << r->text;
  }
}

// llama2.c `-t 1.0 -p 0.9 -s 133742`: temperature 1, top-p 0.9, its xorshift RNG seeded with
// 133742. Power's chain with top-k and min-p off is llama2.c's at temperature 1 (see
// sampler.h), so the text matches; llama2.c stops early if it samples BOS, which it did not.
TEST(Generate, SeededTopPEqualsLlama2c) {
  POWER_REQUIRE_SHARED();
  std::string expected = read_text(stories("expected_t1.0_p0.9_s133742_n256.txt"));
  expected.pop_back();
  Stack s = load(stories("stories260K-F32.gguf"), 512, GgmlType::F32);
  ASSERT_TRUE(s.model);
  GenerateParams p;
  p.max_tokens = 256;
  p.sampling.temperature = 1.0f;
  p.sampling.top_p = 0.9f;
  p.sampling.top_k = 0;
  p.sampling.min_p = 0.0f;
  p.sampling.seed = 133742;
  Generator g(*s.model, *s.tok, *s.ws, *s.kv);
  const int32_t bos[1] = {1};
  auto r = g.generate(bos, p, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, expected);
}

TEST(Generate, StopStringsAndLimits) {
  POWER_REQUIRE_SHARED();
  Stack s = load(stories("stories260K-F32.gguf"), 512);
  ASSERT_TRUE(s.model);
  Generator g(*s.model, *s.tok, *s.ws, *s.kv);
  const int32_t bos[1] = {1};
  GenerateParams p = greedy(256);
  p.stop = {"little girl"};
  auto r = g.generate(bos, p, nullptr);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->text, "Once upon a time, there was a ");
  EXPECT_EQ(r->finish, FinishReason::kStop);

  auto n5 = g.generate(bos, greedy(5), nullptr);
  ASSERT_TRUE(n5.ok());
  EXPECT_EQ(n5->tokens.size(), 5u);
  EXPECT_EQ(n5->finish, FinishReason::kLength);

  int pieces = 0;
  auto cancelled = g.generate(bos, greedy(50), [&](std::string_view) { return ++pieces < 3; });
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->finish, FinishReason::kCancelled);
  EXPECT_EQ(pieces, 3);
}

TEST(Generate, ScanStopStrings) {
  auto s = scan_stop_strings("hello wor", {"world"});
  EXPECT_EQ(s.match, std::string::npos);
  EXPECT_EQ(s.hold, 3u);
  s = scan_stop_strings("hello world!", {"xyz", "world"});
  EXPECT_EQ(s.match, 6u);
  s = scan_stop_strings("abc", {});
  EXPECT_EQ(s.hold, 0u);
}

}  // namespace
}  // namespace power
